package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// stsCreds are temporary credentials from MinIO's STS.
type stsCreds struct{ access, secret, token string }

// env returns them as AWS environment variables.
func (c stsCreds) env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + c.access, "AWS_SECRET_ACCESS_KEY=" + c.secret, "AWS_SESSION_TOKEN=" + c.token}
}

// assumeRole asks MinIO's STS (AssumeRole, signed by the SDK with the
// root credentials) for temporary credentials limited by policy ("" for
// the root's own rights). They carry a secret and a session token that
// appear nowhere else, so a test can grep every output for them.
func assumeRole(t *testing.T, srv *testenv.S3Server, policy string) stsCreds {
	t.Helper()
	cl := sts.New(sts.Options{
		Region:       srv.Region,
		BaseEndpoint: aws.String(srv.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
	})
	in := &sts.AssumeRoleInput{RoleArn: aws.String("arn:xxx:xxx:xxx:xxxx"), RoleSessionName: aws.String("ferry-e2e"), DurationSeconds: aws.Int32(3600)}
	if policy != "" {
		in.Policy = aws.String(policy)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := cl.AssumeRole(ctx, in)
	if err != nil {
		t.Fatalf("sts AssumeRole: %v", err)
	}
	c := out.Credentials
	return stsCreds{access: aws.ToString(c.AccessKeyId), secret: aws.ToString(c.SecretAccessKey), token: aws.ToString(c.SessionToken)}
}

// readOnlyPolicy allows reading and listing bucket, nothing else.
func readOnlyPolicy(bucket string) string {
	return fmt.Sprintf(`{"Version":"2012-10-17","Statement":[`+
		`{"Effect":"Allow","Action":["s3:GetObject"],"Resource":["arn:aws:s3:::%[1]s/*"]},`+
		`{"Effect":"Allow","Action":["s3:ListBucket","s3:GetBucketLocation"],"Resource":["arn:aws:s3:::%[1]s"]}]}`, bucket)
}

// TestBadInputAccessDenied runs a task with read-only credentials: reads
// work, a write is refused (EACCES/EPERM at close or fsync, or exit 174
// naming the path), with the request id in the log.
func TestBadInputAccessDenied(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	data := randBytes(t, 3<<20+5)
	e.put("in/data.bin", data)
	ro := assumeRole(t, e.srv, readOnlyPolicy(e.bucket))
	e.extra = ro.env()
	r := e.run(fmt.Sprintf(`
sha256sum %[1]s/in/data.bin
echo denied > %[1]s/out.txt; echo close=$?
sync %[1]s/out.txt; echo fsync=$?
exit 0`, e.path("")))
	if !strings.Contains(r.stdout, sha(data)) {
		t.Errorf("read with read-only credentials failed:\n%s\n%s", r.stdout, tailStr(r.stderr, 4000))
	}
	refusedAtTask := strings.Contains(r.stdout, "close=1") || strings.Contains(r.stdout, "fsync=1")
	if !refusedAtTask && r.code != 174 {
		t.Errorf("a denied write was neither refused to the task nor exit 174 (exit %d):\n%s", r.code, r.stdout)
	}
	if r.code != 0 && r.code != 174 {
		t.Errorf("exit %d, want 0 or 174", r.code)
	}
	if !strings.Contains(r.stderr, e.bucket+"/out.txt") || !strings.Contains(r.stderr, "request_id=") {
		t.Errorf("no log line naming the path with a request id:\n%s", tailStr(r.stderr, 4000))
	}
	if _, err := e.stat("out.txt"); err == nil {
		t.Errorf("out.txt landed with read-only credentials")
	}
	checkNoSecret(t, "run with read-only credentials", r.stdout+r.stderr, ro)
}

// checkNoSecret fails when out holds the secret key or session token.
func checkNoSecret(t *testing.T, what, out string, c stsCreds) {
	t.Helper()
	for name, v := range map[string]string{"secret key": c.secret, "session token": c.token} {
		if v != "" && strings.Contains(out, v) {
			t.Errorf("%s: the %s appears in the output", what, name)
		}
	}
}
