package nextflow

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("stdout closed") }

func TestCmdLogTee(t *testing.T) {
	path := filepath.Join(t.TempDir(), "command.log")
	cl, err := CreateCmdLog(path)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	stdout, stderr := cl.Tee(&out), cl.Tee(&errOut)
	steps := []struct {
		w    interface{ Write([]byte) (int, error) }
		text string
	}{
		{w: stdout, text: "one\n"},
		{w: stderr, text: "two\n"},
		{w: stdout, text: "three\n"},
		{w: cl.Tee(brokenWriter{}), text: "four\n"}, // a broken echo never fails the task
		{w: cl.Tee(nil), text: "five\n"},
	}
	for _, s := range steps {
		n, err := s.w.Write([]byte(s.text))
		if n != len(s.text) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s.text, n, err)
		}
	}
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if n, err := stdout.Write([]byte("late\n")); n != 5 || err != nil {
		t.Fatalf("write after close = %d, %v", n, err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "one\ntwo\nthree\nfour\nfive\n"; string(got) != want {
		t.Fatalf("log = %q, want %q", got, want)
	}
	if out.String() != "one\nthree\nlate\n" || errOut.String() != "two\n" {
		t.Fatalf("echo stdout %q stderr %q", out.String(), errOut.String())
	}
	if cl.Path() != path {
		t.Fatalf("Path = %q", cl.Path())
	}
}

// TestCmdLogWithChild runs a real child whose stdout and stderr interleave.
func TestCmdLogWithChild(t *testing.T) {
	path := filepath.Join(t.TempDir(), "command.log")
	cl, err := CreateCmdLog(path)
	if err != nil {
		t.Fatal(err)
	}
	var echo bytes.Buffer
	w := cl.Tee(&echo)
	cmd := exec.Command("sh", "-c", "echo out; echo err >&2; echo out2")
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "out\nerr\nout2\n" || echo.String() != string(got) {
		t.Fatalf("log %q echo %q", got, echo.String())
	}
}

func TestCreateCmdLogError(t *testing.T) {
	_, err := CreateCmdLog(filepath.Join(t.TempDir(), "missing", "x.log"))
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("err = %v", err)
	}
}
