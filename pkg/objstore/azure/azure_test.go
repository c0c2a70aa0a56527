package azure

import (
	"context"
	"encoding/base64"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"

	"github.com/ferry-fs/ferry/internal/testenv"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/objstoretest"
)

// testPartSize keeps multipart cases small; Azure has no minimum block size.
const testPartSize = 64 << 10

// newTestStore returns a Store on a fresh container of the test binary's
// Azurite, authorized by the connection string (shared key).
func newTestStore(t *testing.T) *Store {
	t.Helper()
	srv := testenv.Azurite(t)
	return objstoretest.Open(t, func() (*Store, error) {
		return New(t.Context(), Config{
			Container:        srv.NewContainer(t),
			ConnectionString: srv.ConnectionString,
			MinPartSize:      testPartSize,
		})
	})
}

// pendingUploads counts the uploads whose marker block is staged and that
// carry no abort block, over every blob with uncommitted blocks.
func pendingUploads(t *testing.T, s *Store) int {
	t.Helper()
	n := 0
	pager := s.cont.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Include: container.ListBlobsInclude{UncommittedBlobs: true}})
	for pager.More() {
		page, err := pager.NextPage(t.Context())
		if err != nil {
			t.Fatalf("listing blobs: %v", err)
		}
		for _, b := range page.Segment.BlobItems {
			bl, err := s.cont.NewBlockBlobClient(*b.Name).GetBlockList(t.Context(), blockblob.BlockListTypeUncommitted, nil)
			if err != nil {
				t.Fatalf("block list of %s: %v", *b.Name, err)
			}
			markers, aborts := map[string]bool{}, map[string]bool{}
			for _, blk := range bl.UncommittedBlocks {
				raw, err := base64.StdEncoding.DecodeString(*blk.Name)
				if err != nil {
					continue
				}
				id, suffix, _ := strings.Cut(string(raw), "-")
				switch suffix {
				case markerSuffix:
					markers[id] = true
				case abortSuffix:
					aborts[id] = true
				}
			}
			for id := range markers {
				if !aborts[id] {
					n++
				}
			}
		}
	}
	return n
}

func TestConformance(t *testing.T) {
	objstoretest.Run(t, objstoretest.HarnessFor(newTestStore, pendingUploads))
}

// TestStaleVersion checks every conditional operation against a real,
// replaced ETag.
func TestStaleVersion(t *testing.T) {
	s := newTestStore(t)
	put := func(ctx context.Context, opts objstore.PutOptions) error {
		_, err := s.Put(ctx, "k", strings.NewReader("x"), 1, opts)
		return err
	}
	objstoretest.CheckStaleVersion(t, s, func(old, _ string, _ objstore.Upload) []objstoretest.Call {
		return []objstoretest.Call{
			{Name: "Put", Call: func(ctx context.Context) error { return put(ctx, objstore.PutOptions{IfVersion: old}) }},
			{Name: "PutIfAbsent", Call: func(ctx context.Context) error { return put(ctx, objstore.PutOptions{IfAbsent: true}) }},
			{Name: "CopyOntoItself", Call: func(ctx context.Context) error {
				_, err := s.Copy(ctx, "k", "k", objstore.CopyOptions{IfVersion: old, Metadata: map[string]string{"a": "b"}})
				return err
			}},
		}
	})
}

// TestMetadataKeys: keys that are no C# identifiers round-trip.
func TestMetadataKeys(t *testing.T) {
	s := newTestStore(t)
	meta := map[string]string{"ferry-mode": "0644", "a_b": "1", "1st": "x", "x.y": "z", "_x2d": "tricky", "plain": "p"}
	info, err := s.Put(t.Context(), "m", strings.NewReader("x"), 1, objstore.PutOptions{Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(info.Metadata, meta) {
		t.Errorf("Put.Metadata = %v, want %v", info.Metadata, meta)
	}
	st, err := s.Stat(t.Context(), "m")
	if err != nil || !maps.Equal(st.Metadata, meta) {
		t.Errorf("Stat.Metadata = %v, %v; want %v", st.Metadata, err, meta)
	}
	cp, err := s.Copy(t.Context(), "m", "m2", objstore.CopyOptions{Metadata: map[string]string{}})
	if err != nil || len(cp.Metadata) != 0 {
		t.Errorf("Copy with empty Metadata = %v, %v; want none", cp.Metadata, err)
	}
	if st, err := s.Stat(t.Context(), "m2"); err != nil || len(st.Metadata) != 0 {
		t.Errorf("Stat of a copy with empty Metadata = %v, %v; want none", st.Metadata, err)
	}
}

// TestCompleteAfterForeignCommit: another writer's commit discards the
// upload's blocks, and Complete says so instead of failing obscurely.
func TestCompleteAfterForeignCommit(t *testing.T) {
	s := newTestStore(t)
	ctx := t.Context()
	u, err := s.CreateUpload(ctx, "k", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := u.UploadPart(ctx, 1, strings.NewReader("mine"), 4); err != nil {
		t.Fatal(err)
	}
	// Another writer's upload commits first. (A Put Blob discards the
	// blocks too on Azure, but not on Azurite.)
	other, err := s.CreateUpload(ctx, "k", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.UploadPart(ctx, 1, strings.NewReader("theirs"), 6); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Complete(ctx); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Complete = %v, want ErrNotFound", err)
	}
	if got := pendingUploads(t, s); got != 0 {
		t.Errorf("pending uploads = %d, want 0", got)
	}
}

// TestSASCredential runs a store authorized by a container SAS: it works,
// but cannot sign source URLs, so CopyPart is unsupported.
func TestSASCredential(t *testing.T) {
	srv := testenv.Azurite(t)
	name := srv.NewContainer(t)
	cred, err := container.NewSharedKeyCredential(srv.Account, srv.Key)
	if err != nil {
		t.Fatal(err)
	}
	perms := sas.ContainerPermissions{Read: true, Add: true, Create: true, Write: true, Delete: true, List: true}
	qp, err := sas.BlobSignatureValues{
		Protocol:      sas.ProtocolHTTPSandHTTP,
		ExpiryTime:    time.Now().Add(time.Hour).UTC(),
		Permissions:   perms.String(),
		ContainerName: name,
	}.SignWithSharedKey(cred)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(t.Context(), Config{Account: srv.Account, Endpoint: srv.Endpoint, Container: name, SASToken: qp.Encode()})
	if err != nil {
		t.Fatal(err)
	}
	if s.Caps().CopyPart {
		t.Error("Caps().CopyPart with a SAS = true")
	}
	if _, err := s.Put(t.Context(), "k", strings.NewReader("sas"), 3, objstore.PutOptions{}); err != nil {
		t.Fatalf("Put with a SAS: %v", err)
	}
	if st, err := s.Stat(t.Context(), "k"); err != nil || st.Size != 3 {
		t.Errorf("Stat with a SAS = %+v, %v", st, err)
	}
	u, err := s.CreateUpload(t.Context(), "dst", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort(context.WithoutCancel(t.Context()))
	if err := u.CopyPart(t.Context(), 1, "k", 0, 3); !errors.Is(err, objstore.ErrUnsupported) {
		t.Errorf("CopyPart with a SAS = %v, want ErrUnsupported", err)
	}
}

func TestConfigFromEnv(t *testing.T) {
	vals := map[string]string{
		"AZURE_STORAGE_ACCOUNT":           "acct",
		"AZURE_STORAGE_ENDPOINT":          "http://127.0.0.1:1/acct",
		"AZURE_STORAGE_CONNECTION_STRING": "AccountName=acct;AccountKey=a2V5",
		"AZURE_STORAGE_SAS_TOKEN":         "sv=1&sig=x",
		"AZURE_STORAGE_KEY":               "a2V5",
		"FUSION_AZ_MSI_CLIENT_ID":         "client-id",
	}
	for k, v := range vals {
		t.Setenv(k, v)
	}
	want := Config{Account: "acct", Endpoint: "http://127.0.0.1:1/acct", ConnectionString: vals["AZURE_STORAGE_CONNECTION_STRING"],
		SASToken: "sv=1&sig=x", AccountKey: "a2V5", MSIClientID: "client-id"}
	if got := ConfigFromEnv(); got != want {
		t.Errorf("ConfigFromEnv() = %+v, want %+v", got, want)
	}
}

// TestNewCredentials checks which credential New picks, and the endpoint.
func TestNewCredentials(t *testing.T) {
	const key = "a2V5" // base64 "key"
	tests := []struct {
		name      string
		cfg       Config
		endpoint  string
		sharedKey bool
		wantErr   bool
	}{
		{name: "connection string with key", cfg: Config{ConnectionString: "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + key + ";EndpointSuffix=core.windows.net"},
			endpoint: "https://acct.blob.core.windows.net", sharedKey: true},
		{name: "connection string with BlobEndpoint", cfg: Config{ConnectionString: "AccountName=devstoreaccount1;AccountKey=" + key + ";BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"},
			endpoint: "http://127.0.0.1:10000/devstoreaccount1", sharedKey: true},
		{name: "endpoint overrides connection string", cfg: Config{Endpoint: "http://h:1/a/", ConnectionString: "AccountName=a;AccountKey=" + key + ";BlobEndpoint=http://x/a"},
			endpoint: "http://h:1/a", sharedKey: true},
		{name: "connection string with SAS", cfg: Config{ConnectionString: "BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=1&sig=x"},
			endpoint: "https://acct.blob.core.windows.net"},
		{name: "connection string wins over key", cfg: Config{Account: "other", AccountKey: key, ConnectionString: "BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=sig=x"},
			endpoint: "https://acct.blob.core.windows.net"},
		{name: "SAS before key", cfg: Config{Account: "acct", SASToken: "?sig=x", AccountKey: key}, endpoint: "https://acct.blob.core.windows.net"},
		{name: "shared key", cfg: Config{Account: "acct", AccountKey: key}, endpoint: "https://acct.blob.core.windows.net", sharedKey: true},
		{name: "managed identity", cfg: Config{Account: "acct", MSIClientID: "id"}, endpoint: "https://acct.blob.core.windows.net"},
		{name: "no account", cfg: Config{AccountKey: key}, wantErr: true},
		{name: "malformed connection string", cfg: Config{ConnectionString: "AccountName"}, wantErr: true},
		{name: "connection string without secret", cfg: Config{ConnectionString: "AccountName=a"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Container = "cont"
			s, err := New(t.Context(), tt.cfg)
			if tt.wantErr {
				if err == nil {
					t.Fatal("New succeeded")
				}
				if strings.Contains(err.Error(), key) {
					t.Errorf("error %q shows the key", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.cfg.Endpoint != tt.endpoint || s.sharedKey != tt.sharedKey || s.Caps().CopyPart != tt.sharedKey {
				t.Errorf("endpoint %q sharedKey %v, want %q %v", s.cfg.Endpoint, s.sharedKey, tt.endpoint, tt.sharedKey)
			}
			if got := s.cont.URL(); !strings.HasPrefix(got, tt.endpoint+"/cont") {
				t.Errorf("container URL %q", got)
			}
		})
	}
}
