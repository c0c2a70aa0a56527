package e2e

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"
)

// refusingProxy is a reverse proxy in front of the S3 server that answers
// every write to keys ending in suffix with an S3 error (status, code),
// as a backend that refuses one key for good would.
func refusingProxy(t *testing.T, upstream, suffix string, status int, code string) string {
	t.Helper()
	up, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(up)
		pr.Out.Host = pr.In.Host // SigV4 signs it
	}}
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, suffix) && (r.Method == http.MethodPut || r.Method == http.MethodPost) {
			writeS3Error(w, r, status, code, "refused by the test")
			return
		}
		rp.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestFaultsPermanentRefusal: a backend that refuses one key on every
// attempt (400 InvalidArgument, 400 KeyTooLongError, 403 AccessDenied)
// makes ferry exit 174 promptly (not at the drain deadline, 30 minutes
// by default), naming the path, the cause and the request id; the other
// outputs are durable.
func TestFaultsPermanentRefusal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		code   string
	}{
		{400, "InvalidArgument"},
		{400, "KeyTooLongError"},
		{403, "AccessDenied"},
	}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			e := newS3Env(t)
			ep := refusingProxy(t, e.srv.Endpoint, "/refused.bin", tc.status, tc.code)
			e.extra = []string{"AWS_S3_ENDPOINT=" + ep}
			start := time.Now()
			r := e.run(`
set -e
mkdir -p ` + e.path("out") + `
head -c 100000 /dev/urandom > ` + e.path("out/refused.bin") + `
head -c 9000000 /dev/urandom > ` + e.path("out/big-refused.bin") + `
echo fine > ` + e.path("out/fine.txt") + `
exit 0`)
			took := time.Since(start)
			if r.code != 174 {
				t.Fatalf("exit %d, want 174\n%s", r.code, tailStr(r.stderr, 4000))
			}
			if took > 60*time.Second {
				t.Errorf("ferry took %v to give up on a refused key", took)
			}
			if !strings.Contains(r.stderr, "out/refused.bin") || !strings.Contains(r.stderr, tc.code) || !strings.Contains(r.stderr, "request_id=FAULT") {
				t.Errorf("the log does not name the path, the cause and the request id:\n%s", tailStr(r.stderr, 4000))
			}
			if got := e.mustGet("out/fine.txt"); string(got) != "fine\n" {
				t.Errorf("out/fine.txt = %q", got)
			}
		})
	}
}
