package s3

import (
	"testing"

	"github.com/ferry-fs/ferry/internal/testenv"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/objstoretest"
)

// TestConformance runs the objstore conformance suite against MinIO, one
// fresh bucket per case.
func TestConformance(t *testing.T) {
	objstoretest.Run(t, objstoretest.Harness{
		NoObjectPrefixCollision: true, // MinIO stores objects as directories
		NewStore: func(t *testing.T) objstore.Store {
			s, _ := minioStore(t, nil)
			return s
		},
		PendingUploads: pendingUploads,
	})
}

// TestConformanceSSE runs the suite again with SSE-KMS on every write (the
// test server has a built-in KMS key), which changes ETags and headers.
func TestConformanceSSE(t *testing.T) {
	objstoretest.Run(t, objstoretest.Harness{
		NoObjectPrefixCollision: true, // MinIO stores objects as directories
		NewStore: func(t *testing.T) objstore.Store {
			s, _ := minioStore(t, func(c *Config) { c.SSEKMSKeyID = testenv.MinIO(t).KMSKeyID })
			return s
		},
		PendingUploads: pendingUploads,
	})
}
