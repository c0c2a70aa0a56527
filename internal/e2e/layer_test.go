package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// layerConfig is the container-config JSON of `make layer`, the document
// Nextflow's fusion.containerConfigUrl points to (Wave's ContainerConfig
// and ContainerLayer).
type layerConfig struct {
	Entrypoint []string `json:"entrypoint"`
	Env        []string `json:"env"`
	Layers     []struct {
		Location    string `json:"location"`
		GzipDigest  string `json:"gzipDigest"`
		GzipSize    int64  `json:"gzipSize"`
		TarDigest   string `json:"tarDigest"`
		SkipHashing bool   `json:"skipHashing"`
	} `json:"layers"`
}

// runRepoScript runs scripts/<name> from the repository root with env added
// to the test's environment and returns its combined output; a failure or
// a timeout fails the test.
func runRepoScript(t *testing.T, name string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(testenv.RepoRoot(), "scripts", name))
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/%s: %v\n%s", name, err, out)
	}
	return string(out)
}

// makeLayer runs scripts/layer.sh (what `make layer` runs) on the binary
// under test into dir and returns the parsed JSON (unknown fields fail).
func makeLayer(t *testing.T, dir, url string) layerConfig {
	t.Helper()
	env := []string{"FERRY_BIN=" + ferryBin, "OUT=" + dir}
	if url != "" {
		env = append(env, "LAYER_URL="+url)
	}
	runRepoScript(t, "layer.sh", env...)
	b, err := os.ReadFile(filepath.Join(dir, "fusion-layer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c layerConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("fusion-layer.json: %v\n%s", err, b)
	}
	return c
}

// TestLayer checks `make layer`: the JSON has the fields Wave reads, its
// digests and size are those of the tarball, the tarball holds exactly
// usr/bin/ferry (the binary) and usr/bin/fusion -> ferry, owned by root,
// and two builds are byte-identical.
func TestLayer(t *testing.T) {
	t.Parallel()
	bin, err := os.ReadFile(ferryBin)
	if err != nil {
		t.Fatal(err)
	}
	const url = "https://downloads.example.org/ferry/fusion-layer.tar.gz"
	dirA, dirB := t.TempDir(), t.TempDir()
	cfgA := makeLayer(t, dirA, url)
	cfgB := makeLayer(t, dirB, "")
	gz, err := os.ReadFile(filepath.Join(dirA, "fusion-layer.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	gzB, err := os.ReadFile(filepath.Join(dirB, "fusion-layer.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gz, gzB) {
		t.Errorf("two builds of the layer differ (%d and %d bytes)", len(gz), len(gzB))
	}
	raw := gunzip(t, gz)
	checkLayerTar(t, raw, sha(bin))

	for _, tc := range []struct {
		location string
		cfg      layerConfig
	}{
		{url, cfgA},
		{"file://" + filepath.Join(dirB, "fusion-layer.tar.gz"), cfgB},
	} {
		c := tc.cfg
		if !slices.Equal(c.Entrypoint, []string{"/usr/bin/fusion"}) {
			t.Errorf("entrypoint = %q", c.Entrypoint)
		}
		for _, kv := range []string{"FUSION_CONFIG_PROFILE=nextflow", "FUSION_COMPACT_SYMLINKS=true", "FUSION_SHOW_GLOBAL_INFO=true"} {
			if !slices.Contains(c.Env, kv) {
				t.Errorf("env %q lacks %s", c.Env, kv)
			}
		}
		if len(c.Layers) != 1 {
			t.Fatalf("layers = %+v, want one", c.Layers)
		}
		l := c.Layers[0]
		if l.Location != tc.location {
			t.Errorf("location = %q, want %q", l.Location, tc.location)
		}
		if want := "sha256:" + sha(gz); l.GzipDigest != want {
			t.Errorf("gzipDigest = %s, file has %s", l.GzipDigest, want)
		}
		if l.GzipSize != int64(len(gz)) {
			t.Errorf("gzipSize = %d, file has %d bytes", l.GzipSize, len(gz))
		}
		if want := "sha256:" + sha(raw); l.TarDigest != want {
			t.Errorf("tarDigest = %s, tar has %s", l.TarDigest, want)
		}
		if !l.SkipHashing {
			t.Errorf("skipHashing = false")
		}
	}
}

// checkLayerTar checks the entries of the layer tar.
func checkLayerTar(t *testing.T, raw []byte, binSHA string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(raw))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("layer tar: %v", err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d, want root", h.Name, h.Uid, h.Gid)
		}
		switch h.Name {
		case "usr/", "usr/bin/":
			if h.Typeflag != tar.TypeDir || h.Mode&0o7777 != 0o755 {
				t.Errorf("%s: type %c mode %o, want a 0755 dir", h.Name, h.Typeflag, h.Mode)
			}
		case "usr/bin/ferry":
			b, _ := io.ReadAll(tr)
			if h.Typeflag != tar.TypeReg || h.Mode&0o7777 != 0o755 || sha(b) != binSHA {
				t.Errorf("usr/bin/ferry: type %c mode %o, %d bytes, same binary %v", h.Typeflag, h.Mode, len(b), sha(b) == binSHA)
			}
		case "usr/bin/fusion":
			if h.Typeflag != tar.TypeSymlink || h.Linkname != "ferry" {
				t.Errorf("usr/bin/fusion: type %c -> %q, want a link to ferry", h.Typeflag, h.Linkname)
			}
		}
	}
	if want := []string{"usr/", "usr/bin/", "usr/bin/ferry", "usr/bin/fusion"}; !slices.Equal(names, want) {
		t.Errorf("layer entries = %q, want %q", names, want)
	}
}

// gunzip decompresses with gzip(1): compress/flate under the race detector
// takes seconds per 50 MB.
func gunzip(t *testing.T, gz []byte) []byte {
	t.Helper()
	cmd := exec.Command("gzip", "-dc")
	cmd.Stdin = bytes.NewReader(gz)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("gzip -dc: %v: %s", err, stderr.String())
	}
	return b
}

// TestLayerRefusesDynamicBinary: the layer and the image carry a static
// binary only (they go on top of any task image, or FROM scratch).
func TestLayerRefusesDynamicBinary(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	sh, _ = filepath.EvalSymlinks(sh)
	cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "scripts", "layer.sh"))
	cmd.Env = append(os.Environ(), "FERRY_BIN="+sh, "OUT="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "dynamically linked") {
		t.Errorf("layer.sh with %s: err %v, output:\n%s", sh, err, out)
	}
}
