package testenv

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestWaitServer: a probe answered by another server than the one started
// (its port was taken meanwhile) fails at once; the right one, or any when
// none is named, is ready.
func TestWaitServer(t *testing.T) {
	for _, tc := range []struct {
		name, header, want string
		ok                 bool
	}{
		{name: "the right server", header: "Azurite-Blob/3.35.0", want: "Azurite", ok: true},
		{name: "another server", header: "", want: "Azurite"},
		{name: "any server", header: "whatever", want: "", ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.header != "" {
					w.Header().Set("Server", tc.header)
				}
				http.NotFound(w, r)
			}))
			defer srv.Close()
			t0 := time.Now()
			err := waitServer(srv.URL, tc.want, 10*time.Second)
			if (err == nil) != tc.ok {
				t.Fatalf("waitServer: %v, want ok %v", err, tc.ok)
			}
			if took := time.Since(t0); took > 5*time.Second {
				t.Errorf("took %v: a wrong server must fail at once", took)
			}
		})
	}
}
