package testenv

import (
	"os"
	"strings"
	"testing"
)

// TestDockerEngine starts a private engine, uses it, and checks that its
// cleanup leaves no mount and no dockerd behind.
func TestDockerEngine(t *testing.T) {
	var d *DockerEngine
	t.Run("engine", func(t *testing.T) {
		d = StartDocker(t)
		if out := d.Docker(t, nil, "info", "--format", "{{.ServerVersion}}"); strings.TrimSpace(out) == "" {
			t.Errorf("docker info: empty server version")
		}
		if out := d.Docker(t, strings.NewReader(""), "import", "-", "empty:test"); !strings.HasPrefix(out, "sha256:") {
			t.Errorf("docker import: %q", out)
		}
	})
	if d == nil {
		t.Fatal("no engine")
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(info), d.root+"/") {
		t.Errorf("mounts left under %s after cleanup", d.root)
	}
	if _, err := os.Stat(d.root); !os.IsNotExist(err) {
		t.Errorf("engine root %s still there: %v", d.root, err)
	}
}
