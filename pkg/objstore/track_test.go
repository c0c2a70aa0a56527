package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// trackInner is a Store (and Multipart) whose writes fail with fail
// (when set) and report their key in out (when set) and then wait for
// release (when set).
type trackInner struct {
	Store
	fail    error
	out     chan string
	release chan struct{}
}

func (s *trackInner) write(key string) error {
	if s.out != nil {
		s.out <- key
		<-s.release
	}
	return s.fail
}

func (s *trackInner) Put(_ context.Context, key string, _ io.ReaderAt, _ int64, _ PutOptions) (ObjectInfo, error) {
	return ObjectInfo{Key: key}, s.write(key)
}

func (s *trackInner) Copy(_ context.Context, _, dst string, _ CopyOptions) (ObjectInfo, error) {
	return ObjectInfo{Key: dst}, s.write(dst)
}

func (s *trackInner) Delete(_ context.Context, key string, _ DeleteOptions) error {
	return s.write(key)
}

func (s *trackInner) CreateUpload(_ context.Context, key string, _ PutOptions) (Upload, error) {
	return &trackInnerUpload{s: s, key: key}, nil
}

func (s *trackInner) AbortUpload(context.Context, string, string) error { return nil }

type trackInnerUpload struct {
	Upload
	s   *trackInner
	key string
}

func (u *trackInnerUpload) Complete(context.Context) (ObjectInfo, error) {
	return ObjectInfo{Key: u.key}, u.s.write(u.key)
}

// TestTrack: WrittenSince tells a write to a key in flight, or ended at
// or after the time asked about (a failed one for trackKeep more), for
// each kind of write, through a decorator too.
func TestTrack(t *testing.T) {
	ctx := context.Background()
	put := func(s Store, k string) error {
		_, err := s.Put(ctx, k, bytes.NewReader(nil), 0, PutOptions{})
		return err
	}
	tests := []struct {
		name  string
		write func(s Store) error // writes key "k" (or not)
		fail  error
		ask   time.Duration // WrittenSince(k, end of the write + ask)
		want  bool
	}{
		{name: "put, asked from before its end", write: func(s Store) error { return put(s, "k") }, ask: -time.Second, want: true},
		{name: "put, asked from its end", write: func(s Store) error { return put(s, "k") }, ask: 0, want: true},
		{name: "put, asked from after its end", write: func(s Store) error { return put(s, "k") }, ask: time.Second},
		{name: "failed put, asked from after its end", write: func(s Store) error { return put(s, "k") }, fail: errors.New("timeout"), ask: time.Second, want: true},
		{name: "failed put, long after", write: func(s Store) error { return put(s, "k") }, fail: errors.New("timeout"), ask: 2 * trackKeep},
		{name: "another key", write: func(s Store) error { return put(s, "k2") }, ask: -time.Second},
		{name: "delete", write: func(s Store) error { return s.Delete(ctx, "k", DeleteOptions{}) }, ask: -time.Second, want: true},
		{name: "copy to it", write: func(s Store) error { _, err := s.Copy(ctx, "src", "k", CopyOptions{}); return err }, ask: -time.Second, want: true},
		{name: "copy from it", write: func(s Store) error { _, err := s.Copy(ctx, "k", "dst", CopyOptions{}); return err }, ask: -time.Second},
		{name: "multipart complete", write: func(s Store) error {
			u, err := s.(Multipart).CreateUpload(ctx, "k", PutOptions{})
			if err != nil {
				return err
			}
			_, err = u.Complete(ctx)
			return err
		}, ask: -time.Second, want: true},
		{name: "multipart never completed", write: func(s Store) error {
			_, err := s.(Multipart).CreateUpload(ctx, "k", PutOptions{})
			return err
		}, ask: -time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			s := Track(&trackInner{fail: tt.fail})
			s.(*trackMultipart).now = func() time.Time { return now }
			if err := tt.write(s); !errors.Is(err, tt.fail) {
				t.Fatalf("write: %v", err)
			}
			// Through a decorator, as the vfs sees it.
			d := WithRetry(s, RetryPolicy{MaxAttempts: 1})
			if got := WrittenSince(d, "k", now.Add(tt.ask)); got != tt.want {
				t.Errorf("WrittenSince(k, end%+v) = %v, want %v", tt.ask, got, tt.want)
			}
		})
	}
}

// TestTrackInFlight: a write counts from its start until it returns, and
// a store that does not track tells nothing.
func TestTrackInFlight(t *testing.T) {
	in := &trackInner{out: make(chan string), release: make(chan struct{})}
	s := Track(in)
	done := make(chan error)
	go func() { _, err := s.Put(context.Background(), "k", bytes.NewReader(nil), 0, PutOptions{}); done <- err }()
	<-in.out
	future := time.Now().Add(time.Hour)
	if !WrittenSince(s, "k", future) {
		t.Error("a put in flight: WrittenSince = false")
	}
	close(in.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if WrittenSince(s, "k", future) {
		t.Error("a put that ended: WrittenSince from later = true")
	}
	if WrittenSince(&trackInner{}, "k", time.Time{}) {
		t.Error("an untracked store: WrittenSince = true")
	}
}

// TestTrackBound: past trackMax keys, the finished writes are forgotten
// and every key counts as written for trackKeep.
func TestTrackBound(t *testing.T) {
	now := time.Unix(1000, 0)
	s := Track(&trackInner{}).(*trackMultipart)
	s.now = func() time.Time { return now }
	for i := 0; i <= trackMax; i++ {
		if _, err := s.Put(context.Background(), fmt.Sprint(i), bytes.NewReader(nil), 0, PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.keys); n > trackMax {
		t.Errorf("%d keys remembered, want at most %d", n, trackMax)
	}
	if !WrittenSince(s, "never", now.Add(time.Second)) {
		t.Error("after forgetting writes: WrittenSince(a key never written) = false, want true")
	}
	now = now.Add(2 * trackKeep)
	if WrittenSince(s, "never", now) {
		t.Error("trackKeep after forgetting: WrittenSince(a key never written) = true")
	}
}
