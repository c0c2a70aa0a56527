package testenv

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// Account is the storage account name, "devstoreaccount1".
	Account string
	// Key is the account's shared key (Azurite's published dev key).
	Key string
	// Endpoint is the account's blob endpoint,
	// "http://127.0.0.1:PORT/devstoreaccount1" (path-style, as Azurite wants).
	Endpoint string
	// ConnectionString holds the account, key and BlobEndpoint.
	ConnectionString string
	// Dir holds the server's data and its log (server.log).
	Dir string

	seq atomic.Uint64 // container name counter
}

// azureServer is the one Azurite of this test binary: a process-lifetime
// singleton, started on first use and killed with the binary (Pdeathsig).
var azureServer struct {
	once sync.Once
	srv  *AzureServer
	err  error
}

// Azurite returns the test binary's Azurite blob server, starting it on
// first use. It fails the test when the binary is missing or does not start.
func Azurite(t testing.TB) *AzureServer {
	t.Helper()
	bin := Tool(t, "azurite-blob")
	azureServer.once.Do(func() { azureServer.srv, azureServer.err = startAzurite(bin) })
	if azureServer.err != nil {
		t.Fatalf("testenv: azurite: %v", azureServer.err)
	}
	return azureServer.srv
}

func startAzurite(bin string) (*AzureServer, error) {
	dir, err := ScratchDir("azurite")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a free port can be taken before we bind it
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(bin,
			"--blobHost", "127.0.0.1", "--blobPort", strconv.Itoa(port),
			"--location", filepath.Join(dir, "data"),
			"--skipApiVersionCheck", "--loose", "--disableTelemetry", "--silent")
		logFile := filepath.Join(dir, "server.log")
		if err := StartProcess(cmd, logFile); err != nil {
			return nil, err
		}
		endpoint := "http://127.0.0.1:" + strconv.Itoa(port) + "/" + AzuriteAccount
		// Any answer (403 for an unsigned request) means it is listening.
		if err := WaitHTTP(endpoint+"?comp=list", 30*time.Second); err != nil {
			_ = cmd.Process.Kill()
			lastErr = fmt.Errorf("%w; log: %s", err, emuLogTail(logFile))
			continue
		}
		return &AzureServer{
			Account:  AzuriteAccount,
			Key:      AzuriteKey,
			Endpoint: endpoint,
			ConnectionString: "DefaultEndpointsProtocol=http;AccountName=" + AzuriteAccount +
				";AccountKey=" + AzuriteKey + ";BlobEndpoint=" + endpoint + ";",
			Dir: dir,
		}, nil
	}
	return nil, lastErr
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
	name := emuBucketName("ferry-test", s.seq.Add(1))
	req, err := http.NewRequest(http.MethodPut, s.Endpoint+"/"+name+"?restype=container", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.sign(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("testenv: create container %s: %v", name, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("testenv: create container %s: HTTP %d: %s", name, resp.StatusCode, msg)
	}
	return name
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
