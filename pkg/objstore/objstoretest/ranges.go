package objstoretest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

func rangeCases() []testCase {
	return []testCase{
		{name: "Ranges", run: testRanges},
	}
}

func testRanges(t *testing.T, e *env) {
	objects := map[string][]byte{
		"hundred": randBytes(3, 100),
		"empty":   {},
		"one":     []byte("x"),
	}
	versions := make(map[string]string)
	for k, data := range objects {
		versions[k] = e.put(t, k, data, objstore.PutOptions{}).Version
	}
	tests := []struct {
		key         string
		off, length int64
		from, to    int // expected slice of the object
	}{
		{key: "hundred", off: 0, length: -1, from: 0, to: 100},
		{key: "hundred", off: 0, length: 100, from: 0, to: 100},
		{key: "hundred", off: 0, length: 1, from: 0, to: 1},
		{key: "hundred", off: 10, length: 20, from: 10, to: 30},
		{key: "hundred", off: 50, length: -1, from: 50, to: 100},
		{key: "hundred", off: 99, length: -1, from: 99, to: 100},
		{key: "hundred", off: 90, length: 50, from: 90, to: 100},
		{key: "hundred", off: 0, length: 1000, from: 0, to: 100},
		{key: "hundred", off: 10, length: 0, from: 10, to: 10},
		{key: "hundred", off: 100, length: -1, from: 100, to: 100},
		{key: "hundred", off: 100, length: 10, from: 100, to: 100},
		{key: "hundred", off: 150, length: 10, from: 100, to: 100},
		{key: "hundred", off: 150, length: -1, from: 100, to: 100},
		{key: "empty", off: 0, length: -1, from: 0, to: 0},
		{key: "empty", off: 0, length: 10, from: 0, to: 0},
		{key: "empty", off: 5, length: -1, from: 0, to: 0},
		{key: "one", off: 0, length: -1, from: 0, to: 1},
		{key: "one", off: 0, length: 1, from: 0, to: 1},
		{key: "one", off: 0, length: 5, from: 0, to: 1},
		{key: "one", off: 1, length: -1, from: 1, to: 1},
		{key: "one", off: 2, length: 1, from: 1, to: 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d+%d", tt.key, tt.off, tt.length), func(t *testing.T) {
			obj := objects[tt.key]
			got, info := e.read(t, tt.key, tt.off, tt.length, objstore.ReadOptions{})
			if want := obj[tt.from:tt.to]; !bytes.Equal(got, want) {
				t.Errorf("read %d bytes %q, want %d bytes %q", len(got), clip(got), len(want), clip(want))
			}
			if len(got) == 0 {
				return // Info of an empty range is not checked: some backends answer 416 without it.
			}
			if info.Size != int64(len(obj)) {
				t.Errorf("Info().Size = %d, want the object size %d", info.Size, len(obj))
			}
			if info.Version != versions[tt.key] {
				t.Errorf("Info().Version = %q, want %q", info.Version, versions[tt.key])
			}
		})
	}
}

// clip shortens b for error messages.
func clip(b []byte) []byte {
	if len(b) > 16 {
		return b[:16]
	}
	return b
}
