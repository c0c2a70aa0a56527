package e2e

import (
	"bytes"
	"testing"
)

// TestSharedMappingWritesAfterClose: a task creates a file, maps it
// shared and writable, closes the descriptor, and writes through the
// mapping a second later. With write passthrough the mapping writes the
// staging file itself and the FUSE file is released at the close; the
// bytes written after it must still be in the bucket when ferry exits.
// Guarded (the default: the task's mapping guard names the processes to
// look at) and unguarded (every process in /proc is looked at).
func TestSharedMappingWritesAfterClose(t *testing.T) {
	t.Parallel()
	// ctypes' mmap, not Python's mmap module: that one keeps a duplicate
	// of the descriptor, so the FUSE file would stay open.
	const script = `import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
p = os.environ["OUT"]
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"\0" * 8192)
a = libc.mmap(None, 8192, 3, 1, fd, 0)  # PROT_READ|PROT_WRITE, MAP_SHARED
assert a not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
os.close(fd)
time.sleep(1)  # the release and an upload of the closed file would run now
ctypes.memmove(a + 4096, b"through the mapping", 19)
libc.munmap(ctypes.c_void_p(a), ctypes.c_size_t(8192))
`
	want := make([]byte, 8192)
	copy(want[4096:], "through the mapping")
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{name: "guarded"},
		{name: "unguarded", flags: []string{"--cold-passthrough", "unguarded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newS3Env(t)
			key := "mapped-" + tc.name + ".bin"
			r := e.run("OUT="+e.path(key)+" python3 -c '"+script+"'", tc.flags...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			got, err := e.get(key)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: %d bytes in the bucket, the mapping's write missing: %q", key, len(got), bytes.Trim(got, "\x00"))
			}
		})
	}
}
