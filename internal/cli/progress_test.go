package cli

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/supervise"
)

func TestProgressLogLines(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	report := newProgress(&buf, log, progressOptions{Interval: 5 * time.Second})
	steps := []supervise.Progress{
		{Op: "prefetch", Done: 0, Total: 100 << 20, FilesTotal: 4},
		{Op: "prefetch", Done: 10 << 20, Total: 100 << 20, Files: 1, FilesTotal: 4, Elapsed: time.Second},
		{Op: "prefetch", Done: 50 << 20, Total: 100 << 20, Files: 2, FilesTotal: 4, Elapsed: 5 * time.Second},
		{Op: "prefetch", Done: 60 << 20, Total: 100 << 20, Files: 2, FilesTotal: 4, Elapsed: 6 * time.Second},
		{Op: "prefetch", Done: 100 << 20, Total: 100 << 20, Files: 4, FilesTotal: 4, Elapsed: 10 * time.Second},
		{Op: "prefetch", Done: 100 << 20, Total: 100 << 20, Files: 4, FilesTotal: 4, Elapsed: 11 * time.Second, Final: true},
	}
	for _, s := range steps {
		report(s)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`msg="prefetch progress" op=prefetch done="50.0 MiB" total="100.0 MiB" files=2/4 rate="10.0 MiB/s" elapsed=5s percent=50.0 eta=5s`,
		`msg="prefetch progress" op=prefetch done="100.0 MiB" total="100.0 MiB" files=4/4`,
		`msg="prefetch finished" op=prefetch done="100.0 MiB"`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d = %s\nwant it to contain %s", i, lines[i], w)
		}
	}

	// A quick transfer logs nothing (prefetch logs its own closing line).
	buf.Reset()
	report(supervise.Progress{Op: "drain", Total: 10, Elapsed: time.Second})
	report(supervise.Progress{Op: "drain", Done: 10, Total: 10, Elapsed: 2 * time.Second, Final: true})
	if buf.Len() != 0 {
		t.Errorf("quick transfer logged:\n%s", buf.String())
	}
}

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	report := newProgress(&buf, slog.New(slog.DiscardHandler), progressOptions{Terminal: true})
	report(supervise.Progress{Op: "drain", Total: 3 << 20, FilesTotal: 2})
	report(supervise.Progress{Op: "drain", Done: 1 << 20, Total: 4 << 20, Files: 1, FilesTotal: 2, Elapsed: time.Second})
	report(supervise.Progress{Op: "drain", Done: 4 << 20, Total: 4 << 20, Files: 2, FilesTotal: 2, Elapsed: 2 * time.Second, Final: true})
	out := buf.String()
	for _, want := range []string{"drain 2/2 files", "100%", "4.0/4.0 MiB", "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("bar output lacks %q: %q", want, out)
		}
	}
	if isTerminal(&buf) {
		t.Error("a buffer is a terminal")
	}
}

func TestPrefetchCmdArgs(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"ferry", "prefetch"}, "requires at least 1 arg"},
		{[]string{"ferry", "prefetch", "--cache-dir", t.TempDir(), "/elsewhere/file"}, "not under the mount point"},
		{[]string{"ferry", "prefetch", "--cache-dir", t.TempDir(), "/fusion/ftp/b/k"}, "unknown scheme"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		root := &IO{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
		cmd := newPrefetchCmd(context.Background(), *root)
		cmd.SetArgs(tt.args[2:])
		cmd.SetOut(&out)
		cmd.SetErr(&errb)
		cmd.SilenceUsage = true
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want %q", tt.args, err, tt.want)
		}
	}
	var out bytes.Buffer
	cmd := newPrefetchCmd(context.Background(), IO{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }})
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--cache-dir", "FERRY_CACHE_DIR", "--mount-point", "--files", "FERRY_PREFETCH_FILES"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
