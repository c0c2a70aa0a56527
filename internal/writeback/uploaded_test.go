package writeback

import (
	"context"
	"testing"
)

// TestUploadedForgotten: what a manager remembers of its last upload to a
// key (Uploaded, UploadedInfo) is forgotten when the object there changes
// outside writeback (Detach: a server-side copy onto it keeps the version,
// an ETag, of the same bytes with other metadata; seed
// 1796569780987275934 of the soak model), and when the name goes
// (Remove); not otherwise.
func TestUploadedForgotten(t *testing.T) {
	tests := []struct {
		name string
		act  func(m *Manager) error
		kept bool
	}{
		{"nothing", func(*Manager) error { return nil }, true},
		{"detached", func(m *Manager) error { return m.Detach(context.Background(), tgt("f")) }, false},
		{"removed", func(m *Manager) error { m.Remove(tgt("f")); return nil }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			defer m.Close()
			mark := m.UploadMark()
			f, err := m.CreateWith(tgt("f"), Attrs{Mode: 0o600, HasMode: true})
			if err != nil {
				t.Fatal(err)
			}
			f.Acquire()
			if _, err := f.WriteAt([]byte("data"), 0); err != nil {
				t.Fatal(err)
			}
			f.Release()
			drain(t, m)
			info, ok := m.UploadedInfo(tgt("f"), mark)
			if !ok || info.Size != 4 || ParseAttrs(info.Metadata).Mode != 0o600 {
				t.Fatalf("after the upload: %+v, %v", info, ok)
			}
			if err := tt.act(m); err != nil {
				t.Fatal(err)
			}
			_, ok = m.UploadedInfo(tgt("f"), mark)
			_, okv := m.Uploaded(tgt("f"), info.Version)
			if ok != tt.kept || okv != tt.kept {
				t.Errorf("remembered (UploadedInfo %v, Uploaded %v), want %v", ok, okv, tt.kept)
			}
		})
	}
}
