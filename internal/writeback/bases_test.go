package writeback

import (
	"slices"
	"testing"
)

// Every test cross-checks the base and directory indexes with a scan of
// every file, and makes spares at normal priority (TestLowPriority tests
// the other).
func init() {
	checkBaseIndex = true
	checkDirIndex = true
	nicePrefill = false
}

func TestBaseIndex(t *testing.T) {
	var x baseIndex
	a, b := &File{id: "a"}, &File{id: "b"}
	x.add("k", a)
	x.add("k", b)
	x.add("k", a)
	x.add("j", a)
	ids := func(key string) []string {
		var out []string
		for _, f := range x.files(key) {
			out = append(out, f.id)
		}
		slices.Sort(out)
		return out
	}
	if got := ids("k"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("files(k) = %v, want [a b]", got)
	}
	x.remove("k", a)
	x.remove("k", a)
	x.remove("nothing", a)
	if got := ids("k"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("files(k) = %v, want [b]", got)
	}
	x.remove("k", b)
	if _, ok := x.byKey["k"]; ok {
		t.Fatal("an empty set is kept")
	}
	if got := ids("j"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("files(j) = %v, want [a]", got)
	}
}

// TestBaseIndexFollowsFiles: the index holds the live files reading from
// an object, and forgets them once durable and released.
func TestBaseIndexFollowsFiles(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	info := e.putObject("src", pattern(3*testPart, 1))
	f, err := m.OpenBase(t.Context(), tgt("src"), info)
	if err != nil {
		t.Fatal(err)
	}
	f.Acquire()
	if got := m.bases.files("src"); len(got) != 1 || got[0] != f {
		t.Fatalf("index of src after OpenBase: %v", got)
	}
	if _, err := f.WriteAt([]byte("x"), 5); err != nil {
		t.Fatal(err)
	}
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
	drain(t, m)
	waitFor(t, "the file to be dropped", func() bool { return len(m.bases.files("src")) == 0 })
	// Written again through a stale pointer: live again, reading from its
	// own upload.
	f.Acquire()
	if got := m.bases.files("src"); len(got) != 1 || got[0] != f {
		t.Fatalf("index of src after the file came back: %v", got)
	}
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
}
