package testenv

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// dockerReadyTimeout bounds dockerd start-up (about a second here).
	dockerReadyTimeout = 30 * time.Second
	// dockerStopTimeout bounds a clean dockerd shutdown before SIGKILL.
	dockerStopTimeout = 20 * time.Second
)

// DockerEngine is a private Docker engine for one test: dockerd (Debian
// docker.io) with its own socket, data root and exec root in the test's
// temp dir, no bridge network and no iptables (containers use
// --network host), and no registry (images are built FROM scratch or
// imported). The exported fields are fixed once StartDocker returns.
type DockerEngine struct {
	Host string // the DOCKER_HOST value: "unix:///…/docker.sock"
	CLI  string // the docker client binary

	root   string // temp dir holding everything of this engine
	config string // DOCKER_CONFIG: an empty client config dir
}

// StartDocker starts a private dockerd and stops it when the test ends:
// SIGTERM (SIGKILL after dockerStopTimeout), then it unmounts what dockerd
// leaves under its exec and data roots (the netns bind mount), so that
// repeated runs work. A missing dockerd or docker client fails the test
// (scripts/setup.sh apt installs docker.io).
func StartDocker(t testing.TB) *DockerEngine {
	t.Helper()
	dockerd, err := LookTool("dockerd")
	if err != nil {
		t.Fatalf("%v: the container tests need a Docker engine (scripts/setup.sh apt installs docker.io)", err)
	}
	cli, err := LookTool("docker")
	if err != nil {
		t.Fatalf("%v: the container tests need the docker client (scripts/setup.sh apt installs docker.io)", err)
	}
	root := t.TempDir() // removed after the cleanup below (cleanups run last-in first-out)
	d := &DockerEngine{
		Host:   "unix://" + filepath.Join(root, "docker.sock"),
		CLI:    cli,
		root:   root,
		config: filepath.Join(root, "client"),
	}
	if err := os.MkdirAll(d.config, 0o700); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(root, "dockerd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(dockerd,
		"--data-root", filepath.Join(root, "data"),
		"--exec-root", filepath.Join(root, "exec"),
		"--pidfile", filepath.Join(root, "dockerd.pid"),
		"--host", d.Host,
		"--iptables=false", "--ip-masq=false", "--bridge=none")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("testenv: start dockerd: %v", err)
	}
	exited := make(chan struct{})
	go func() { // owner: the engine; ends when dockerd exits, closes the log
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	t.Cleanup(func() { d.stop(t, cmd.Process.Pid, exited) })
	if err := d.waitReady(exited); err != nil {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("testenv: dockerd: %v; log:\n%s", err, tail(log, 3000))
	}
	return d
}

// waitReady polls the engine's /_ping until it answers OK.
func (d *DockerEngine) waitReady(exited <-chan struct{}) error {
	sock := strings.TrimPrefix(d.Host, "unix://")
	c := &http.Client{
		Timeout: time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", sock)
		}},
	}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(dockerReadyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("dockerd exited during start-up")
		default:
		}
		resp, err := c.Get("http://docker/_ping")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(b) == "OK" {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no answer on %s within %v", d.Host, dockerReadyTimeout)
}

// stop ends dockerd (its process group after the timeout) and unmounts
// what it left under the engine's root.
func (d *DockerEngine) stop(t testing.TB, pid int, exited <-chan struct{}) {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(dockerStopTimeout):
		t.Logf("testenv: dockerd did not stop within %v; killing it", dockerStopTimeout)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-exited
	}
	if err := unmountUnder(d.root); err != nil {
		t.Errorf("testenv: unmount what dockerd left: %v", err)
	}
}

// unmountUnder lazily unmounts every mount point below dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	prefix := filepath.Clean(dir) + "/"
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], prefix) {
			points = append(points, fields[4])
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	var first error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && first == nil {
			first = fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return first
}

// Env is the environment that points the docker client (and scripts that
// call it) at this engine, with an empty client config and the classic
// builder (Debian's engine has no buildx; FROM scratch needs no BuildKit).
func (d *DockerEngine) Env() []string {
	return []string{"DOCKER_HOST=" + d.Host, "DOCKER_CONFIG=" + d.config, "DOCKER_BUILDKIT=0"}
}

// Command returns a docker client command against this engine. Its
// environment is the test's without other DOCKER_* settings, plus Env.
func (d *DockerEngine) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, d.CLI, args...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOCKER_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, d.Env()...)
	return cmd
}

// Docker runs one docker client command (stdin may be nil) and returns its
// combined output; an error or a timeout fails the test.
func (d *DockerEngine) Docker(t testing.TB, stdin io.Reader, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := d.Command(ctx, args...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
