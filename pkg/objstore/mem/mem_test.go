package mem_test

import (
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
	"github.com/ferry-fs/ferry/pkg/objstore/objstoretest"
)

func TestConformance(t *testing.T) {
	objstoretest.Run(t, objstoretest.Harness{
		NewStore: func(t *testing.T) objstore.Store {
			s := mem.New(mem.Options{Bucket: "test", MinPartSize: 1 << 10})
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		PendingUploads: func(t *testing.T, s objstore.Store) int {
			return s.(*mem.Store).PendingUploads()
		},
	})
}

// TestConformanceDefaultPartSize runs the suite with the real 5 MiB minimum.
func TestConformanceDefaultPartSize(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: the default-part-size run is covered by TestConformance")
	}
	objstoretest.Run(t, objstoretest.Harness{
		NewStore: func(t *testing.T) objstore.Store { return mem.New(mem.Options{}) },
	})
}
