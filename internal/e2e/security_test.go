package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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

// TestSecurityNoCredentialLeak runs workloads with temporary credentials
// whose secret and session token appear nowhere else (full rights, then a
// dead endpoint so that failures are logged), scraping /metrics during the
// run, and greps every output and "ferry config" for them.
func TestSecurityNoCredentialLeak(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	e.put("in/x", randBytes(t, 1<<20))
	c := assumeRole(t, e.srv, "")
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e.extra = c.env()
	r := e.run(fmt.Sprintf(`
cat %[1]s/in/x > %[1]s/out.bin
cat %[1]s/nosuch 2>&1
curl -s http://127.0.0.1:%[2]d/metrics
exit 0`, e.path(""), port), "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
	if r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, tailStr(r.stderr, 4000))
	}
	if !strings.Contains(r.stdout, "# TYPE") {
		t.Errorf("no metrics scraped:\n%s", tailStr(r.stdout, 2000))
	}
	checkNoSecret(t, "run with temporary credentials", r.stdout+r.stderr, c)

	dead, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e.extra = append(c.env(), fmt.Sprintf("AWS_S3_ENDPOINT=http://127.0.0.1:%d", dead), "FERRY_MAX_RETRIES=1", "FERRY_REQUEST_TIMEOUT=3s")
	r = e.run(fmt.Sprintf("cat %[1]s/in/x 2>&1 >/dev/null; (echo x > %[1]s/y) 2>&1; exit 0", e.path("")))
	if !strings.Contains(r.stdout, "Input/output error") || !strings.Contains(r.stderr, e.bucket) {
		t.Errorf("dead endpoint: want EIO and a failure logged naming the bucket:\n%s\n%s", r.stdout, tailStr(r.stderr, 4000))
	}
	checkNoSecret(t, "run against a dead endpoint", r.stdout+r.stderr, c)

	// As Nextflow's "fusion": .fusion.log lands in the work dir.
	fusion := filepath.Join(t.TempDir(), "fusion")
	if err := os.Symlink(ferryBin, fusion); err != nil {
		t.Fatal(err)
	}
	wd := e.path("work/ab/cdef")
	cmd := exec.Command(fusion, "bash", "-c", fmt.Sprintf("mkdir -p %[1]s; cat %[2]s/in/x > %[1]s/out; cat %[2]s/nosuch; exit 0", wd, e.path("")))
	cmd.Env = append(append(append([]string{}, e.env...), c.env()...),
		"FERRY_MOUNT_POINT="+e.mnt, "FUSION_CACHE_LOCATION="+e.cache, "FUSION_WORK="+wd,
		"FUSION_LOG_LEVEL=debug", "FUSION_SOMETHING_NEW=1") // debug: as much logged as can be
	cmd.SysProcAttr = sysProcAttrKillWithParent()
	fout, ferr := cmd.CombinedOutput()
	checkNoSecret(t, "fusion task output", string(fout), c)
	flog, err := e.get("work/ab/cdef/.fusion.log")
	if err != nil {
		t.Errorf("no .fusion.log (%v; fusion: %v):\n%s", err, ferr, tailStr(string(fout), 3000))
	}
	if len(flog) == 0 {
		t.Errorf(".fusion.log is empty: the grep proves nothing")
	}
	checkNoSecret(t, ".fusion.log", string(flog), c)

	e.extra = c.env()
	r = e.ferry(time.Minute, "config")
	if r.code != 0 || !strings.Contains(r.stdout, "<redacted>") {
		t.Errorf("ferry config: exit %d, no redaction:\n%s%s", r.code, r.stdout, r.stderr)
	}
	checkNoSecret(t, "ferry config", r.stdout+r.stderr, c)
	if strings.Contains(r.stdout, c.access) {
		t.Errorf("ferry config prints the whole access key id")
	}
}

// TestSecurityCacheModes walks the cache directory while files are
// staged, cached and journalled: every file 0600, every directory 0700.
func TestSecurityCacheModes(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	e.put("in/x", randBytes(t, 6<<20))
	m := startMount(t, e, e.srv.Endpoint)
	if _, err := os.ReadFile(e.path("in/x")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(e.path("out"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(e.path("out/open.bin")) // staged, still open
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(randBytes(t, 7<<20)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("out/closed.bin"), randBytes(t, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var files, dirs int
	err = filepath.WalkDir(e.cache, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file that went while walking
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		switch mode := fi.Mode(); {
		case mode.IsDir():
			dirs++
			if mode.Perm() != 0o700 {
				t.Errorf("directory %s has mode %v, want 0700", p, mode.Perm())
			}
		case mode.IsRegular():
			files++
			if mode.Perm() != 0o600 {
				t.Errorf("file %s has mode %v, want 0600", p, mode.Perm())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Errorf("no file in the cache dir: the walk proves nothing")
	}
	t.Logf("%d files, %d directories checked", files, dirs)
	f.Close()
	if code, log := m.term(t, time.Minute); code != 0 {
		t.Errorf("ferry mount exited %d:\n%s", code, tailStr(log, 4000))
	}
}

// TestSecurityAllowOther checks the mount options: allow_other only when
// asked for.
func TestSecurityAllowOther(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flags []string
		want  bool
	}{
		{flags: nil, want: false},
		{flags: []string{"--allow-other"}, want: true},
	} {
		t.Run(fmt.Sprint(tc.want), func(t *testing.T) {
			t.Parallel()
			e := newS3Env(t)
			m := startMount(t, e, e.srv.Endpoint, tc.flags...)
			opts := mountOptions(t, e.mnt)
			if got := strings.Contains(opts, "allow_other"); got != tc.want {
				t.Errorf("flags %v: mount options %q, allow_other %v, want %v", tc.flags, opts, got, tc.want)
			}
			m.term(t, time.Minute)
		})
	}
}

// mountOptions returns the per-mount and super options of the mount at
// mnt from /proc/self/mountinfo.
func mountOptions(t *testing.T, mnt string) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 5 && fields[4] == mnt {
			return strings.Join(fields[5:], " ")
		}
	}
	t.Fatalf("%s not in /proc/self/mountinfo", mnt)
	return ""
}

// TestSecuritySymlinkTarget checks that a symlink's target stays a plain
// string: a link to /etc/passwd inside the mount is only a link (readlink
// returns it; the object is empty with the target in its metadata; ferry
// reads nothing outside the mount).
func TestSecuritySymlinkTarget(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	out := e.mustRun(fmt.Sprintf(`
ln -s /etc/passwd %[1]s/pw
ln -s ../../../../../etc/shadow %[1]s/sh
echo pw=$(readlink %[1]s/pw) sh=$(readlink %[1]s/sh)
`, e.path("")))
	if !strings.Contains(out, "pw=/etc/passwd sh=../../../../../etc/shadow") {
		t.Errorf("readlink: %q", out)
	}
	for key, target := range map[string]string{"pw": "/etc/passwd", "sh": "../../../../../etc/shadow"} {
		info, err := e.stat(key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if info.Size != 0 || info.Metadata["ferry-symlink"] != target {
			t.Errorf("%s: size %d, target %q; want an empty object with target %q", key, info.Size, info.Metadata["ferry-symlink"], target)
		}
	}
	// A second run sees the same links.
	out = e.mustRun(fmt.Sprintf("readlink %[1]s/pw; readlink %[1]s/sh", e.path("")))
	if out != "/etc/passwd\n../../../../../etc/shadow\n" {
		t.Errorf("second run: %q", out)
	}
}
