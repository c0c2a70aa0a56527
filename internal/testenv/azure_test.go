package testenv

import (
	"net/http"
	"strings"
	"testing"
)

func TestAzurite(t *testing.T) {
	srv := Azurite(t)
	if again := Azurite(t); again != srv {
		t.Fatalf("Azurite started a second server")
	}
	if srv.Account != "devstoreaccount1" || !strings.HasSuffix(srv.Endpoint, "/devstoreaccount1") {
		t.Fatalf("Account %q Endpoint %q", srv.Account, srv.Endpoint)
	}
	if !strings.Contains(srv.ConnectionString, "BlobEndpoint="+srv.Endpoint) {
		t.Fatalf("connection string lacks the endpoint")
	}
	want := map[string]string{
		"AZURE_STORAGE_ACCOUNT":           srv.Account,
		"AZURE_STORAGE_KEY":               srv.Key,
		"AZURE_STORAGE_CONNECTION_STRING": srv.ConnectionString,
		"AZURE_STORAGE_ENDPOINT":          srv.Endpoint,
	}
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		if want[k] != v {
			t.Errorf("Env %s: got a different value than the server's field", k)
		}
		delete(want, k)
	}
	if len(want) != 0 {
		t.Errorf("Env lacks %v", want)
	}
	a, b := srv.NewContainer(t), srv.NewContainer(t)
	if a == b {
		t.Fatalf("NewContainer returned %q twice", a)
	}
	// A signed GET of the container's properties proves it exists and
	// that the Shared Key signature is right.
	req, err := http.NewRequest(http.MethodGet, srv.Endpoint+"/"+a+"?restype=container", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.sign(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET container %s: HTTP %d", a, resp.StatusCode)
	}
}
