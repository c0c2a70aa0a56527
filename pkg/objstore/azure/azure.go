package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Limits of Azure block blobs and the defaults of this driver.
const (
	// MaxBlockSize is the largest block (part) of a block blob: 4000 MiB.
	MaxBlockSize = 4000 << 20
	// MaxBlocks is the largest number of blocks of a block blob.
	MaxBlocks = 50000
	// MaxObjectSize is the largest block blob: 50000 blocks of 4000 MiB
	// (about 190.7 TiB).
	MaxObjectSize = MaxBlocks * MaxBlockSize
	// MaxSinglePut is the largest blob one Put Blob request uploads: 5000 MiB.
	MaxSinglePut = 5000 << 20
	// DefaultMinPartSize is the default Config.MinPartSize (1 MiB). Azure
	// has no minimum block size; this only sets how finely writeback
	// splits a file.
	DefaultMinPartSize = 1 << 20
	// defaultMaxKeys is the page size of List when MaxKeys is 0.
	defaultMaxKeys = 5000
)

// Config configures a Store. Container is required, and Account unless a
// connection string or Endpoint names it.
type Config struct {
	// Account is the storage account name.
	Account string
	// Container is the container the store serves. Required.
	Container string
	// Endpoint is the blob service URL, default
	// https://<Account>.blob.core.windows.net. For Azurite:
	// http://127.0.0.1:10000/devstoreaccount1.
	Endpoint string
	// Credentials, first match wins: ConnectionString, SASToken,
	// AccountKey, MSIClientID, Credential, else DefaultAzureCredential
	// (environment, workload identity, managed identity, Azure CLI).

	// ConnectionString supplies AccountName, AccountKey or
	// SharedAccessSignature, and BlobEndpoint (unless Endpoint is set).
	ConnectionString string
	// SASToken is a service or container SAS query string.
	SASToken string
	// AccountKey is the account's shared key (base64). Only a shared key
	// lets CopyPart sign its source URL.
	AccountKey string
	// MSIClientID selects a user-assigned managed identity by client ID.
	MSIClientID string
	// Credential is any Microsoft Entra token credential.
	Credential azcore.TokenCredential
	// MinPartSize is what Caps reports as MinPartSize. Default
	// DefaultMinPartSize.
	MinPartSize int64
	// HTTPClient, when set, sends every request (for tests).
	HTTPClient *http.Client
}

// String describes c without its secrets, so that a Config can be logged.
func (c Config) String() string {
	cred := "DefaultAzureCredential"
	switch {
	case c.ConnectionString != "":
		cred = "connection string"
	case c.SASToken != "":
		cred = "SAS token"
	case c.AccountKey != "":
		cred = "shared key"
	case c.MSIClientID != "":
		cred = "managed identity " + c.MSIClientID
	case c.Credential != nil:
		cred = "token credential"
	}
	return fmt.Sprintf("azure.Config{Account: %q, Container: %q, Endpoint: %q, credential: %s}", c.Account, c.Container, c.Endpoint, cred)
}

// ConfigFromEnv returns a Config (without Container) from the environment:
// AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_CONNECTION_STRING,
// AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_KEY, FUSION_AZ_MSI_CLIENT_ID and
// AZURE_STORAGE_ENDPOINT (see Config for their precedence). With none of
// the credentials set, New uses DefaultAzureCredential (environment,
// workload identity, managed identity, Azure CLI).
func ConfigFromEnv() Config {
	return Config{
		Account:          os.Getenv("AZURE_STORAGE_ACCOUNT"),
		Endpoint:         os.Getenv("AZURE_STORAGE_ENDPOINT"),
		ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING"),
		SASToken:         os.Getenv("AZURE_STORAGE_SAS_TOKEN"),
		AccountKey:       os.Getenv("AZURE_STORAGE_KEY"),
		MSIClientID:      os.Getenv("FUSION_AZ_MSI_CLIENT_ID"),
	}
}

// Store is one Azure Blob container. It implements objstore.Store and
// objstore.Multipart. All methods are safe for concurrent use.
type Store struct {
	cfg       Config // immutable after New
	cont      *container.Client
	sharedKey bool // requests are signed with the account key: SAS URLs can be made

	// noBlockFromURL is set once the service answered Put Block From URL
	// with 501 (Azurite): CopyPart then copies through the client.
	noBlockFromURL atomic.Bool
}

var (
	_ objstore.Store     = (*Store)(nil)
	_ objstore.Multipart = (*Store)(nil)
)

// New returns a Store for cfg.Container. It makes no request, so a missing
// container shows up on first use (as an error wrapping
// objstore.ErrNoBucket). The SDK's own retries are off: retries belong to
// objstore.WithRetry.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Container == "" {
		return nil, errors.New("azure: Config.Container is required")
	}
	if cfg.MinPartSize <= 0 {
		cfg.MinPartSize = DefaultMinPartSize
	}
	suffix := "core.windows.net"
	if cfg.ConnectionString != "" {
		cs, err := parseConnectionString(cfg.ConnectionString)
		if err != nil {
			return nil, err
		}
		cfg.Account = first(cs["AccountName"], cfg.Account)
		cfg.Endpoint = first(cfg.Endpoint, cs["BlobEndpoint"])
		cfg.AccountKey = cs["AccountKey"]
		cfg.SASToken = cs["SharedAccessSignature"]
		suffix = first(cs["EndpointSuffix"], suffix)
		if cfg.AccountKey == "" && cfg.SASToken == "" {
			return nil, errors.New("azure: connection string has neither AccountKey nor SharedAccessSignature")
		}
	}
	if cfg.Endpoint == "" {
		if cfg.Account == "" {
			return nil, errors.New("azure: Config.Account (AZURE_STORAGE_ACCOUNT) or Endpoint is required")
		}
		cfg.Endpoint = "https://" + cfg.Account + ".blob." + suffix
	}
	cfg.Endpoint = strings.TrimRight(cfg.Endpoint, "/")
	containerURL := cfg.Endpoint + "/" + cfg.Container
	opts := &container.ClientOptions{}
	opts.Retry = policy.RetryOptions{MaxRetries: -1} // one try: objstore.WithRetry retries
	if cfg.HTTPClient != nil {
		opts.Transport = cfg.HTTPClient
	}
	s := &Store{cfg: cfg}
	var err error
	switch {
	case cfg.SASToken != "":
		s.cont, err = container.NewClientWithNoCredential(containerURL+"?"+strings.TrimPrefix(cfg.SASToken, "?"), opts)
	case cfg.AccountKey != "":
		if cfg.Account == "" {
			return nil, errors.New("azure: a shared key needs Config.Account")
		}
		var cred *container.SharedKeyCredential
		if cred, err = container.NewSharedKeyCredential(cfg.Account, cfg.AccountKey); err == nil {
			s.cont, err = container.NewClientWithSharedKeyCredential(containerURL, cred, opts)
			s.sharedKey = true
		}
	default:
		var cred azcore.TokenCredential
		if cred, err = tokenCredential(cfg); err == nil {
			s.cont, err = container.NewClient(containerURL, cred, opts)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("azure: new client: %w", err)
	}
	return s, nil
}

// tokenCredential returns the managed identity of cfg.MSIClientID,
// cfg.Credential, or DefaultAzureCredential.
func tokenCredential(cfg Config) (azcore.TokenCredential, error) {
	switch {
	case cfg.MSIClientID != "":
		return azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{
			ID: azidentity.ClientID(cfg.MSIClientID),
		})
	case cfg.Credential != nil:
		return cfg.Credential, nil
	default:
		return azidentity.NewDefaultAzureCredential(nil)
	}
}

// parseConnectionString splits "k1=v1;k2=v2;…" (values may hold '=').
func parseConnectionString(s string) (map[string]string, error) {
	out := make(map[string]string)
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, errors.New("azure: malformed connection string") // never echo it: it holds the key
		}
		out[k] = v
	}
	if proto := out["DefaultEndpointsProtocol"]; out["BlobEndpoint"] == "" && out["AccountName"] != "" && proto == "http" {
		out["BlobEndpoint"] = "http://" + out["AccountName"] + ".blob." + first(out["EndpointSuffix"], "core.windows.net")
	}
	return out, nil
}

// first returns the first non-empty string.
func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// Caps reports the limits of block blobs. CopyPart needs a shared key (to
// sign the source URL of Put Block From URL).
func (s *Store) Caps() objstore.Caps {
	return objstore.Caps{
		Provider:      "az",
		MaxObjectSize: MaxObjectSize,
		MaxSinglePut:  MaxSinglePut,
		MinPartSize:   s.cfg.MinPartSize,
		MaxPartSize:   MaxBlockSize,
		MaxParts:      MaxBlocks,
		CopyPart:      s.sharedKey,
		Metadata:      true,
		ListMetadata:  true,
		Tags:          false,
	}
}

// Close releases nothing: the SDK's clients hold no resources of their own.
func (s *Store) Close() error { return nil }

// Container returns the container name.
func (s *Store) Container() string { return s.cfg.Container }
