package block

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
)

// TestSmallWorkers: while every budget worker is held by a GET of a
// large object, a small object is still fetched (on a small worker),
// for a read that waits for it and for a prediction; a large object is
// not fetched until a budget worker is free.
func TestSmallWorkers(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		predict bool
		served  bool // fetched while the budget workers are held
	}{
		{name: "small, read", size: 4096, served: true},
		{name: "small, predicted", size: 4096, predict: true, served: true},
		{name: "large, read", size: smallObject + 1, served: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 10, Config{MaxConcurrency: 2})
			gate := make(chan struct{})
			block := &gatedStore{Store: f.store, release: gate, gates: map[string]int64{}}
			done := make(chan struct{}, f.cache.nworkers)
			var bigs []Ref
			for i := range f.cache.nworkers {
				key := fmt.Sprintf("big%d", i)
				bigs = append(bigs, f.put(key, bytes.Repeat([]byte("b"), smallObject+1)))
				bigs[i].Store = block
				block.gates[key] = 0
			}
			for _, ref := range bigs {
				go func() { // owner: the test (done)
					r := f.cache.Open(ref)
					defer r.Close()
					r.ReadAt(context.Background(), make([]byte, 4096), 0)
					done <- struct{}{}
				}()
			}
			waitFor(t, "the budget workers to be held", func() bool { return len(block.log()) == f.cache.nworkers })
			data := bytes.Repeat([]byte("s"), tt.size)
			ref := f.put("obj", data)
			ref.Store = block
			got := make(chan error, 1)
			go func() { // owner: the test (got)
				if tt.predict {
					f.cache.Predict(ref, ref.Size, 0)
					for f.cache.Cached(ref) < ref.Size {
						time.Sleep(time.Millisecond)
					}
					got <- nil
					return
				}
				r := f.cache.Open(ref)
				defer r.Close()
				buf := make([]byte, 4096)
				_, err := r.ReadAt(context.Background(), buf, 0)
				if err == nil && !bytes.Equal(buf, data[:4096]) {
					err = fmt.Errorf("read wrong bytes")
				}
				got <- err
			}()
			select {
			case err := <-got:
				if !tt.served {
					t.Fatalf("fetched while every budget worker was held (err %v)", err)
				}
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(map[bool]time.Duration{true: 10 * time.Second, false: 300 * time.Millisecond}[tt.served]):
				if tt.served {
					t.Fatal("not fetched while the budget workers were held")
				}
			}
			close(gate)
			for range f.cache.nworkers {
				<-done
			}
			if !tt.served {
				if err := <-got; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
