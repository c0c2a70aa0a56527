package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// TestCacheDamageWatched writes 64 KiB of zeros into the cache file of a
// 32 MiB object while a descriptor reads it through FUSE passthrough (the
// kernel reads the cache file without ferry), as another process on the
// node sharing the cache directory could: within seconds ferry finds the
// file changed, checks it, counts the damage in
// ferry_cache_checksum_failures_total, logs the path once and drops the
// version. The descriptor opened before keeps reading the damaged file
// (documented); the next open reads the right bytes, fetched again into
// a new cache file. It runs with warm and with cold passthrough (where the
// first read fills the file through pre-content events, and the held
// open may share that cold file).
func TestCacheDamageWatched(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{modeWarm, modeCold} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testCacheDamageWatched(t, mode)
		})
	}
}

func testCacheDamageWatched(t *testing.T, mode string) {
	e := newS3Env(t)
	data := randBytes(t, 32<<20)
	e.put("big/obj", data)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metrics := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	m := startMount(t, e, e.srv.Endpoint, append(mountModeFlags(mode), "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))...)
	p := e.path("big/obj")
	if mode == modeWarm {
		// Read through ferry first: the next open finds the file whole.
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("first read: %v", err)
		}
	}
	// Warm: whole in the cache, a passthrough open. Cold: the open passes
	// through at once, its reads fill the file, which becomes whole while
	// it stays open (watched once whole).
	held, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if got, err := io.ReadAll(held); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through the held descriptor: %v", err)
	}
	const off, n = 5<<20 + 4096, 64 << 10
	buf := make([]byte, n)
	if _, err := held.ReadAt(buf, off); err != nil || !bytes.Equal(buf, data[off:off+n]) {
		t.Fatalf("read before the damage: %v", err)
	}
	sums := func() map[string]float64 {
		text, err := scrape(metrics)
		if err != nil {
			t.Fatal(err)
		}
		_, s := parseMetrics(text)
		return s
	}
	if s := sums(); s["ferry_fuse_opens_total"] < 1 || s["ferry_cache_checksum_failures_total"] != 0 {
		t.Fatalf("before the damage: %v opens, %v checksum failures", s["ferry_fuse_opens_total"], s["ferry_cache_checksum_failures_total"])
	}
	files := dataFiles(t, e.cache)
	if len(files) != 1 {
		t.Fatalf("data files: %v", files)
	}
	var before syscall.Stat_t
	if err := syscall.Stat(files[0], &before); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(files[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, n), off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	const logged = "changed by something other than ferry"
	deadline := time.Now().Add(20 * time.Second)
	var log string
	for !strings.Contains(log, logged) {
		if time.Now().After(deadline) {
			t.Fatalf("no damage logged within 20 s:\n%s", tailStr(log, 3000))
		}
		time.Sleep(100 * time.Millisecond)
		b, _ := os.ReadFile(m.log.Name())
		log = string(b)
	}
	if s := sums(); s["ferry_cache_checksum_failures_total"] < 1 {
		t.Errorf("checksum failures %v after the damage, want at least 1", s["ferry_cache_checksum_failures_total"])
	}
	if !strings.Contains(log, files[0]) {
		t.Errorf("the log does not name the cache file %s:\n%s", files[0], tailStr(log, 3000))
	}
	// What the descriptor opened before sees: the damaged file.
	if _, err := held.ReadAt(buf, off); err != nil || !bytes.Equal(buf, make([]byte, n)) {
		t.Errorf("the descriptor opened before the damage: %v, zeros %v (README: it reads the damaged file until closed)", err, bytes.Equal(buf, make([]byte, n)))
	}
	// The next open reads the right bytes (through ferry while the old
	// descriptor holds the damaged file as its backing file).
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the next open after the damage: %v, right bytes %v", err, bytes.Equal(got, data))
	}
	held.Close()
	// Once that is closed, a new open passes through the new cache file.
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
		t.Errorf("an open after the old descriptor closed: %v, right bytes %v", err, bytes.Equal(got, data))
	}
	files = dataFiles(t, e.cache)
	var after syscall.Stat_t
	if len(files) != 1 || syscall.Stat(files[0], &after) != nil || after.Ino == before.Ino {
		t.Errorf("the object is not in a new cache file: %v", files)
	}
	b, _ := os.ReadFile(m.log.Name())
	if n := strings.Count(string(b), logged); n != 1 {
		t.Errorf("the damage was logged %d times, want once", n)
	}
	if code, log := m.term(t, time.Minute); code != 0 {
		t.Errorf("ferry mount exited %d:\n%s", code, tailStr(log, 3000))
	}
}
