package writeback

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// crashDirEnv tells TestCrashChild (run as a child process) where to stage.
const crashDirEnv = "WRITEBACK_CRASH_DIR"

// crashFiles are the closed files the child stages before it is killed.
var crashFiles = map[string][]byte{
	"c/small": pattern(3000, 1),
	"c/big":   pattern(6*testPart+5, 2), // multipart: its upload is journaled
	"c/empty": {},
}

// TestCrashChild is the child of TestSIGKILLRecovery: it stages files
// whose uploads hang, tells the parent, and waits to be killed. Run
// otherwise, it does nothing.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		return
	}
	st := faulty.New(mem.New(mem.Options{Bucket: "bkt", MinPartSize: testMinPart}), stallUploads())
	m, err := New(context.Background(), Config{Dir: filepath.Join(dir, "wb"), PartSize: testPart, StreamAfter: -1, MinFreeBytes: -1, SpareFiles: -1},
		func(context.Context, string, string) (objstore.Store, error) { return st, nil })
	if err != nil {
		t.Fatal(err)
	}
	for k, data := range crashFiles {
		writeFile(t, m, k, data)
	}
	if err := m.Symlink(tgt("c/link"), "small"); err != nil {
		t.Fatal(err)
	}
	open, _ := m.Create(tgt("c/open"), 0o644)
	open.Acquire()
	open.WriteAt([]byte("not closed"), 0)
	waitFor(t, "the multipart upload to start", func() bool { return st.Calls(faulty.OpUploadPart) > 0 })
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {} // until SIGKILL
}

// TestSIGKILLRecovery kills (SIGKILL) a process whose uploads hang, then
// starts a manager on its staging directory: every closed file lands, the
// file never closed does not, and nothing is left staged.
func TestSIGKILLRecovery(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the child never got ready:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	e := newEnv(t)
	e.dir = filepath.Join(dir, "wb")
	m := e.manager()
	drain(t, m)
	for k, data := range crashFiles {
		e.wantObject(k, data)
	}
	e.wantNoObject("c/open")
	if info, err := e.mem.Stat(context.Background(), "c/link"); err != nil || info.Metadata[MetaSymlink] != "small" {
		t.Fatalf("symlink: %+v, %v", info, err)
	}
	if !strings.Contains(e.logBuf.String(), "s3://bkt/c/open") {
		t.Errorf("the discarded open file is not logged:\n%s", e.logBuf)
	}
	assertStagingEmpty(t, m)
}
