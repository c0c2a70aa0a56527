package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestColdHeaderRead: under cold passthrough, a task that reads the head
// of a cold object and goes on with other work does not download the
// rest of it (the background fill starts only once a process reads a
// file in order past its first 1 MiB, and stops when its readers close),
// while a task that reads it whole gets every byte, fetched once.
func TestColdHeaderRead(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	const size = 32 << 20
	data := randBytes(t, size)
	e.put("head/ref.bin", data)
	cases := []struct {
		name     string
		script   string // %s: the object's path under the mount
		want     string // in the task's output
		min, max float64
	}{
		// The first read's readahead (a 4 MiB window past its block); the
		// sleep gives a fill that ran on time to fetch the rest.
		{name: "head", script: "head -c 100 %s | wc -c && sleep 2", want: "100", min: 1, max: 8 << 20},
		{name: "whole", script: "sha256sum %s", want: sha(data), min: size, max: size},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m := filepath.Join(dir, "m")
			script := fmt.Sprintf(tc.script, e.mountPath(m, "head/ref.bin"))
			d, _ := e.startRunAt(m, filepath.Join(dir, "cache"), script, "--cold-passthrough", "on")
			r := <-d
			if r.code != 0 || !strings.Contains(r.stdout, tc.want) {
				t.Fatalf("exit %d, want %q in the output:\n%s\n%s", r.code, tc.want, r.stdout, tailStr(r.stderr, 3000))
			}
			s := parseSummary(t, r.stderr)
			if s["passthrough_cold_files"] < 1 {
				t.Errorf("no cold passthrough open (summary %v)", s)
			}
			if got := s["bytes_downloaded"]; got < tc.min || got > tc.max {
				t.Errorf("downloaded %v bytes of the %d-byte object, want %v-%v", got, size, tc.min, tc.max)
			}
		})
	}
}
