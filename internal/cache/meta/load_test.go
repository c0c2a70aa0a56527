package meta

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newTestCache(t *testing.T, now *time.Time) *Cache {
	t.Helper()
	c, err := New(Config{StatTTL: time.Minute, ListTTL: time.Minute, NegativeTTL: 5 * time.Second, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestLoadListShared: concurrent loads of one directory share one load,
// and the listing answers for the names it lacks (negative knowledge)
// until it expires.
func TestLoadListShared(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newTestCache(t, &now)
	var loads atomic.Int64
	release := make(chan struct{})
	load := func() ([]DirEntry, error) {
		loads.Add(1)
		<-release
		return []DirEntry{{Name: "a", Kind: KindFile}, {Name: "sub", Kind: KindDir}}, nil
	}
	var wg sync.WaitGroup
	got := make([]*Listing, 8)
	for i := range got {
		wg.Go(func() {
			ls, err := c.LoadList("s3/b/d", false, nil, load)
			if err != nil {
				t.Error(err)
			}
			got[i] = ls
		})
	}
	time.Sleep(20 * time.Millisecond) // let the callers join
	close(release)
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Errorf("%d loads for 8 concurrent callers, want 1", n)
	}
	ls, ok := c.List("s3/b/d")
	if !ok {
		t.Fatal("listing not cached")
	}
	tests := []struct {
		name  string
		found bool
		kind  Kind
	}{
		{"a", true, KindFile},
		{"sub", true, KindDir},
		{"missing", false, KindNone},
	}
	for _, tt := range tests {
		e, found := ls.Has(tt.name)
		if found != tt.found || e.Kind != tt.kind {
			t.Errorf("Has(%q) = %v %v, want %v %v", tt.name, e.Kind, found, tt.found, tt.kind)
		}
	}
	if _, err := c.LoadList("s3/b/d", false, nil, load); err != nil || loads.Load() != 1 {
		t.Errorf("a fresh cached listing was loaded again (%d loads, %v)", loads.Load(), err)
	}
	if _, err := c.LoadList("s3/b/d", false, func(l *Listing) bool { return l != ls }, func() ([]DirEntry, error) {
		loads.Add(1)
		return nil, nil
	}); err != nil || loads.Load() != 2 {
		t.Errorf("a listing refused by ok was not loaded again (%d loads, %v)", loads.Load(), err)
	}
	now = now.Add(2 * time.Minute)
	if _, ok := c.List("s3/b/d"); ok {
		t.Error("an expired listing still answers")
	}
}

// TestLoadListChangedDuringLoad: a name created or removed while a load
// runs keeps that load out of the cache, and later callers load again.
func TestLoadListChangedDuringLoad(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Cache)
	}{
		{"add", func(c *Cache) { c.AddEntry("s3/b/d", DirEntry{Name: "new", Kind: KindFile}) }},
		{"remove", func(c *Cache) { c.RemoveEntry("s3/b/d", "a") }},
		{"touch", func(c *Cache) { c.Touch("s3/b/d") }},
		{"forget", func(c *Cache) { c.ForgetList("s3/b/d") }},
		{"clear", func(c *Cache) { c.Clear() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			c := newTestCache(t, &now)
			ls, err := c.LoadList("s3/b/d", false, nil, func() ([]DirEntry, error) {
				tt.change(c) // the task changes the directory meanwhile
				return []DirEntry{{Name: "a", Kind: KindFile}}, nil
			})
			if err != nil || ls == nil {
				t.Fatalf("load: %v, %v", ls, err)
			}
			if _, ok := c.List("s3/b/d"); ok {
				t.Error("a load overtaken by a change was cached")
			}
			loaded := false
			if _, err := c.LoadList("s3/b/d", false, nil, func() ([]DirEntry, error) {
				loaded = true
				return nil, nil
			}); err != nil || !loaded {
				t.Errorf("the next caller did not load (%v)", err)
			}
			if _, ok := c.List("s3/b/d"); !ok {
				t.Error("an undisturbed load was not cached")
			}
		})
	}
}

// TestLoadListTooBig: a capped load that finds the directory too big is
// remembered for the listing TTL; an uncapped load does not share it.
func TestLoadListTooBig(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newTestCache(t, &now)
	if _, err := c.LoadList("s3/b/huge", true, nil, func() ([]DirEntry, error) { return nil, ErrTooBig }); err != ErrTooBig {
		t.Fatalf("capped load: %v, want ErrTooBig", err)
	}
	if !c.TooBig("s3/b/huge") || c.TooBig("s3/b/other") {
		t.Error("TooBig does not remember the directory (or remembers another)")
	}
	if _, err := c.LoadList("s3/b/huge", false, nil, func() ([]DirEntry, error) { return []DirEntry{{Name: "x"}}, nil }); err != nil {
		t.Errorf("uncapped load: %v", err)
	}
	now = now.Add(2 * time.Minute)
	if c.TooBig("s3/b/huge") {
		t.Error("TooBig outlived the listing TTL")
	}
}
