package testenv

import (
	"net/http"
	"strings"
	"testing"
)

func TestFakeGCS(t *testing.T) {
	srv := FakeGCS(t)
	if again := FakeGCS(t); again != srv {
		t.Fatalf("FakeGCS started a second server")
	}
	if !strings.HasPrefix(srv.Host, "127.0.0.1:") || srv.URL != "http://"+srv.Host {
		t.Fatalf("Host %q URL %q", srv.Host, srv.URL)
	}
	if env := srv.Env(); len(env) != 1 || env[0] != "STORAGE_EMULATOR_HOST="+srv.Host {
		t.Fatalf("Env() = %q", env)
	}
	a, b := srv.NewBucket(t), srv.NewBucket(t)
	if a == b {
		t.Fatalf("NewBucket returned %q twice", a)
	}
	for _, name := range []string{a, b} {
		resp, err := http.Get(srv.URL + "/storage/v1/b/" + name)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET bucket %s: HTTP %d", name, resp.StatusCode)
		}
	}
}
