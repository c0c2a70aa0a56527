package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// TestContainer runs ferry as real containers on a private Docker engine,
// the way it is deployed:
//   - image: the ferry image `make image` builds (scripts/image.sh), the task
//     bind-mounted in, argv as Wave makes it (fusion /usr/bin/fusion task …);
//   - layer: the layer `make layer` writes, put on a task image the way Wave
//     does it (the tarball as a layer, entrypoint and env from the JSON);
//   - baked: a task image built with deploy/docker/Dockerfile.task, argv as
//     Nextflow without Wave makes it (/usr/bin/fusion task …).
//
// Each task reads an object through /fusion/s3/<bucket>/… and writes a copy
// back; the copy must be in the bucket (sha256) once docker run returns, and
// the task's exit code must be docker run's.
func TestContainer(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	d := testenv.StartDocker(t)
	input := randBytes(t, 5<<20+3)
	e.put("in/input.bin", input)
	task := buildContainerTask(t)

	// The task containers get the S3 settings and nothing else of ours,
	// from a file, so that no key is on a command line.
	var awsEnv []string
	for _, kv := range e.env {
		if strings.HasPrefix(kv, "AWS_") {
			awsEnv = append(awsEnv, kv)
		}
	}
	envFile := writeTemp(t, "container.env", []byte(strings.Join(append(awsEnv, "TASK_MARK=from-the-host"), "\n")+"\n"))

	runRepoScript(t, "image.sh", append(d.Env(), "FERRY_BIN="+ferryBin, "IMAGE=ferry", "VERSION=test")...)
	d.Docker(t, bytes.NewReader(taskBaseTar(t, task)), "import", "-", "taskbase:test")

	// run runs image with argv, checks the exit code, the output and the
	// copy, and returns the output.
	run := func(t *testing.T, image string, extra []string, code int, argv ...string) string {
		t.Helper()
		out := "out/" + t.Name()[len("TestContainer/"):] + ".bin"
		args := append([]string{"run", "--rm", "--network", "host", "--device", "/dev/fuse", "--cap-add", "SYS_ADMIN",
			"--env-file", envFile}, extra...)
		args = append(args, image)
		args = append(args, argv...)
		args = append(args, "-in", "/fusion/s3/"+e.bucket+"/in/input.bin", "-out", "/fusion/s3/"+e.bucket+"/"+out,
			"-exit", fmt.Sprint(code))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := d.Command(ctx, args...)
		combined, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("docker run timed out\n%s", combined)
		}
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatalf("docker run: %v\n%s", err, combined)
		}
		if got := cmd.ProcessState.ExitCode(); got != code {
			t.Fatalf("docker run exited %d, want the task's %d\n%s", got, code, combined)
		}
		want := fmt.Sprintf("task: copied %d bytes (sha256 %s) mark=from-the-host", len(input), sha(input))
		if !strings.Contains(string(combined), want) {
			t.Errorf("task output %q missing:\n%s", want, combined)
		}
		got, err := e.get(out)
		if err != nil {
			t.Fatalf("%s not in the bucket after docker run returned: %v\n%s", out, err, combined)
		}
		if sha(got) != sha(input) {
			t.Errorf("%s: %d bytes sha256 %s, want %d bytes %s", out, len(got), sha(got), len(input), sha(input))
		}
		return string(combined)
	}

	t.Run("image", func(t *testing.T) {
		run(t, "ferry:test", []string{"-v", task + ":/task:ro"}, 3, "/usr/bin/fusion", "/task")
	})
	// The cache in the container's /tmp, on the container's overlayfs:
	// the second open of the input is a passthrough one.
	t.Run("passthrough", func(t *testing.T) {
		out := run(t, "ferry:test", []string{"-v", task + ":/task:ro", "-e", "FERRY_PASSTHROUGH=on"}, 0, "/usr/bin/fusion", "/task", "-reads", "2")
		if !strings.Contains(out, "FUSE passthrough on") || !strings.Contains(out, `"passthrough_files":1`) {
			t.Errorf("no passthrough open with the cache on the container's overlayfs:\n%s", out)
		}
	})
	t.Run("layer", func(t *testing.T) {
		ctxDir := t.TempDir()
		cfg := makeLayer(t, ctxDir, "")
		if len(cfg.Layers) != 1 {
			t.Fatalf("layers: %+v", cfg.Layers)
		}
		// What Wave's ContainerAugmenter does: the layer on top, then
		// ENTRYPOINT and Env from the container config.
		var df strings.Builder
		df.WriteString("FROM taskbase:test\nADD fusion-layer.tar.gz /\n")
		for _, kv := range cfg.Env {
			fmt.Fprintf(&df, "ENV %s\n", kv)
		}
		ep, _ := json.Marshal(cfg.Entrypoint)
		fmt.Fprintf(&df, "ENTRYPOINT %s\n", ep)
		if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(df.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		d.Docker(t, nil, "build", "-q", "-t", "wave-task:test", ctxDir)
		run(t, "wave-task:test", nil, 4, "/usr/bin/fusion", "/task")
	})
	t.Run("baked", func(t *testing.T) {
		dir := filepath.Join(testenv.RepoRoot(), "deploy", "docker")
		d.Docker(t, nil, "build", "-q", "-f", filepath.Join(dir, "Dockerfile.task"),
			"--build-arg", "TASK_IMAGE=taskbase:test", "--build-arg", "FERRY_IMAGE=ferry:test",
			"-t", "baked-task:test", t.TempDir())
		run(t, "baked-task:test", nil, 0, "/usr/bin/fusion", "/task")
	})
}

// buildContainerTask builds the static task binary the containers run.
func buildContainerTask(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "task")
	cmd := exec.Command("go", "build", "-o", bin, "./internal/e2e/testdata/containertask")
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the container task: %v\n%s", err, out)
	}
	return bin
}

// taskBaseTar is the root of a task image without ferry (for docker
// import): the task at /task and a /tmp (ferry's default cache location).
func taskBaseTar(t *testing.T, task string) []byte {
	t.Helper()
	b, err := os.ReadFile(task)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdrs := []*tar.Header{
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
		{Name: "task", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b))},
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
