package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Proxy is one TCP proxy in front of an upstream server, through which a
// test injects faults (latency, bandwidth caps, resets, stalls) with
// toxics. It is removed when the test that made it ends.
type Proxy struct {
	// Endpoint is where clients connect: "http://127.0.0.1:PORT" when the
	// upstream was given as a URL, else "127.0.0.1:PORT".
	Endpoint string
	// Name is the proxy's name in toxiproxy's API.
	Name string

	api    string
	client *http.Client
}

// Toxic is one toxiproxy fault. See toxiproxy's README for the types
// (latency, bandwidth, slow_close, timeout, reset_peer, slicer,
// limit_data) and their attributes.
type Toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"` // "downstream" (server to client, the default) or "upstream"
	Toxicity   float64        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

// Toxiproxy starts (once per test binary) a toxiproxy-server and returns a
// new proxy in front of upstream, which is "host:port" or a URL such as
// "http://127.0.0.1:9000". The proxy starts without toxics and is deleted
// when t ends. A missing toxiproxy-server binary fails the test.
func Toxiproxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	api := sharedToxiproxy.get(t, "toxiproxy", startToxiproxy)
	scheme, hostport := "", upstream
	if u, err := url.Parse(upstream); err == nil && u.Scheme != "" && u.Host != "" {
		scheme, hostport = u.Scheme, u.Host
	}
	p := &Proxy{
		Name:   strings.ReplaceAll(BucketName(t), "-", "_"),
		api:    api,
		client: &http.Client{Timeout: 10 * time.Second},
	}
	var created struct {
		Listen string `json:"listen"`
	}
	p.call(t, http.MethodPost, "/proxies", map[string]any{
		"name": p.Name, "listen": "127.0.0.1:0", "upstream": hostport, "enabled": true,
	}, &created)
	if created.Listen == "" || strings.HasSuffix(created.Listen, ":0") {
		t.Fatalf("testenv: toxiproxy did not report the listen address (%q)", created.Listen)
	}
	p.Endpoint = created.Listen
	if scheme != "" {
		p.Endpoint = scheme + "://" + created.Listen
	}
	t.Cleanup(func() { p.call(t, http.MethodDelete, "/proxies/"+p.Name, nil, nil) })
	return p
}

func startToxiproxy() (string, error) {
	bin, err := LookTool("toxiproxy-server")
	if err != nil {
		return "", fmt.Errorf("%v (run scripts/setup.sh toxiproxy)", err)
	}
	dir, err := ownedScratchDir("toxiproxy")
	if err != nil {
		return "", err
	}
	api := func(port int) string { return fmt.Sprintf("http://127.0.0.1:%d", port) }
	port, err := startOnFreePort(func(port int) error {
		cmd := exec.Command(bin, "-host", "127.0.0.1", "-port", fmt.Sprint(port))
		return startAndWait(cmd, filepath.Join(dir, "toxiproxy.log"), func() error { return WaitHTTP(api(port)+"/version", 30*time.Second) })
	})
	if err != nil {
		return "", err
	}
	return api(port), nil
}

// AddToxic adds a toxic and returns its name (generated from the type when
// tox.Name is empty). Stream defaults to downstream and Toxicity to 1.
func (p *Proxy) AddToxic(t testing.TB, tox Toxic) string {
	t.Helper()
	if tox.Stream == "" {
		tox.Stream = "downstream"
	}
	if tox.Toxicity == 0 {
		tox.Toxicity = 1
	}
	if tox.Name == "" {
		tox.Name = tox.Type + "_" + tox.Stream
	}
	if tox.Attributes == nil {
		tox.Attributes = map[string]any{}
	}
	p.call(t, http.MethodPost, "/proxies/"+p.Name+"/toxics", tox, nil)
	return tox.Name
}

// AddLatency delays the server's responses by latency ± jitter.
func (p *Proxy) AddLatency(t testing.TB, latency, jitter time.Duration) string {
	t.Helper()
	return p.AddToxic(t, Toxic{Type: "latency", Attributes: map[string]any{
		"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds(),
	}})
}

// AddBandwidth caps each connection's download rate at kbPerSec KB/s.
func (p *Proxy) AddBandwidth(t testing.TB, kbPerSec int64) string {
	t.Helper()
	return p.AddToxic(t, Toxic{Type: "bandwidth", Attributes: map[string]any{"rate": kbPerSec}})
}

// AddResetPeer resets every connection (TCP RST) after the given time.
func (p *Proxy) AddResetPeer(t testing.TB, after time.Duration) string {
	t.Helper()
	return p.AddToxic(t, Toxic{Type: "reset_peer", Stream: "upstream", Attributes: map[string]any{
		"timeout": after.Milliseconds(),
	}})
}

// AddTimeout stops all data on every connection and closes it after the
// given time (never, when after is 0): a hung server.
func (p *Proxy) AddTimeout(t testing.TB, after time.Duration) string {
	t.Helper()
	return p.AddToxic(t, Toxic{Type: "timeout", Attributes: map[string]any{
		"timeout": after.Milliseconds(),
	}})
}

// AddLimitData closes each connection after the server has sent n bytes: a
// response body cut short.
func (p *Proxy) AddLimitData(t testing.TB, n int64) string {
	t.Helper()
	return p.AddToxic(t, Toxic{Type: "limit_data", Attributes: map[string]any{"bytes": n}})
}

// RemoveToxic removes the named toxic.
func (p *Proxy) RemoveToxic(t testing.TB, name string) {
	t.Helper()
	p.call(t, http.MethodDelete, "/proxies/"+p.Name+"/toxics/"+name, nil, nil)
}

// RemoveAllToxics removes every toxic of the proxy.
func (p *Proxy) RemoveAllToxics(t testing.TB) {
	t.Helper()
	var toxics []Toxic
	p.call(t, http.MethodGet, "/proxies/"+p.Name+"/toxics", nil, &toxics)
	for _, tox := range toxics {
		p.RemoveToxic(t, tox.Name)
	}
}

// SetEnabled enables or disables the proxy; a disabled proxy refuses
// connections and drops the open ones.
func (p *Proxy) SetEnabled(t testing.TB, enabled bool) {
	t.Helper()
	p.call(t, http.MethodPost, "/proxies/"+p.Name, map[string]any{"enabled": enabled}, nil)
}

// call sends one API request, failing the test on error; out, when non-nil,
// receives the JSON answer.
func (p *Proxy) call(t testing.TB, method, path string, in, out any) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatalf("testenv: toxiproxy %s %s: %v", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.api+path, body)
	if err != nil {
		t.Fatalf("testenv: toxiproxy %s %s: %v", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatalf("testenv: toxiproxy %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("testenv: toxiproxy %s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("testenv: toxiproxy %s %s: decode %q: %v", method, path, b, err)
		}
	}
}
