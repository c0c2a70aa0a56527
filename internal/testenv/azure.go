package testenv

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Azurite's published development-storage account. These are public,
// documented values (not secrets); Azurite accepts only them by default.
const (
	AzuriteAccount = "devstoreaccount1"
	AzuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// AzureServer is an azurite-blob process serving the Blob API over plain
// HTTP on loopback. It lives as long as the test binary.
type AzureServer struct {
	emulator // Dir

	// Account is the storage account name, "devstoreaccount1".
	Account string
	// Key is the account's shared key (Azurite's published dev key).
	Key string
	// Endpoint is the account's blob endpoint,
	// "http://127.0.0.1:PORT/devstoreaccount1" (path-style, as Azurite wants).
	Endpoint string
	// ConnectionString holds the account, key and BlobEndpoint.
	ConnectionString string
}

// Azurite returns the test binary's Azurite blob server, starting it on
// first use. It fails the test when the binary is missing or does not start.
func Azurite(t testing.TB) *AzureServer {
	t.Helper()
	return azureServer.get(t, "azurite", startAzurite)
}

// azuriteEndpoint is the account's blob endpoint of the Azurite on port.
func azuriteEndpoint(port int) string {
	return "http://127.0.0.1:" + strconv.Itoa(port) + "/" + AzuriteAccount
}

func startAzurite() (*AzureServer, error) {
	args := func(port int, dir string) []string {
		return []string{"--blobHost", "127.0.0.1", "--blobPort", strconv.Itoa(port), "--location", filepath.Join(dir, "data"),
			"--skipApiVersionCheck", "--loose", "--disableTelemetry", "--silent"}
	}
	// Any answer from Azurite (403 for an unsigned request) means it is
	// listening; its Server header tells it from whatever took the port.
	ready := func(port int) string { return azuriteEndpoint(port) + "?comp=list" }
	dir, port, err := startEmulator("azurite-blob", "azurite", args, ready, "Azurite", 30*time.Second)
	if err != nil {
		return nil, err
	}
	endpoint := azuriteEndpoint(port)
	return &AzureServer{
		Account:  AzuriteAccount,
		Key:      AzuriteKey,
		Endpoint: endpoint,
		ConnectionString: "DefaultEndpointsProtocol=http;AccountName=" + AzuriteAccount +
			";AccountKey=" + AzuriteKey + ";BlobEndpoint=" + endpoint + ";",
		emulator: emulator{Dir: dir},
	}, nil
}

// Env returns the environment that points Azure clients at Azurite:
// AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY, AZURE_STORAGE_CONNECTION_STRING
// and AZURE_STORAGE_ENDPOINT (the blob endpoint, for clients that use the
// key rather than the connection string).
func (s *AzureServer) Env() []string {
	return []string{
		"AZURE_STORAGE_ACCOUNT=" + s.Account,
		"AZURE_STORAGE_KEY=" + s.Key,
		"AZURE_STORAGE_CONNECTION_STRING=" + s.ConnectionString,
		"AZURE_STORAGE_ENDPOINT=" + s.Endpoint,
	}
}

// NewContainer creates a container with a fresh name and returns the name.
// It fails the test on error.
func (s *AzureServer) NewContainer(t testing.TB) string {
	t.Helper()
	return s.create(t, "container", http.StatusCreated, func(name string) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPut, s.Endpoint+"/"+name+"?restype=container", nil)
		if err != nil {
			return nil, err
		}
		s.sign(req)
		return http.DefaultClient.Do(req)
	})
}

// sign adds x-ms-date, x-ms-version and a SharedKey Authorization header to
// a body-less request (the Blob service's Shared Key scheme).
func (s *AzureServer) sign(req *http.Request) {
	req.Header.Set("x-ms-date", time.Now().UTC().Format(http.TimeFormat))
	req.Header.Set("x-ms-version", "2021-12-02")
	var ms []string
	for k := range req.Header {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-ms-") {
			ms = append(ms, lk)
		}
	}
	sort.Strings(ms)
	var b strings.Builder
	b.WriteString(req.Method + "\n")
	b.WriteString(strings.Repeat("\n", 11)) // standard headers, all empty here
	for _, k := range ms {
		b.WriteString(k + ":" + req.Header.Get(k) + "\n")
	}
	b.WriteString("/" + s.Account + req.URL.EscapedPath())
	q := req.URL.Query()
	var qs []string
	for k := range q {
		qs = append(qs, k)
	}
	sort.Strings(qs)
	for _, k := range qs {
		b.WriteString("\n" + strings.ToLower(k) + ":" + strings.Join(q[k], ","))
	}
	key, _ := base64.StdEncoding.DecodeString(s.Key)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(b.String()))
	req.Header.Set("Authorization", "SharedKey "+s.Account+":"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}
