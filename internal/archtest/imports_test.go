package archtest

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const mod = "github.com/ferry-fs/ferry/"

// allowed lists, per package (prefix match on the package path below the
// module), the project packages and third-party module prefixes it may
// import directly. Standard-library imports are always allowed.
var allowed = map[string][]string{
	"cmd/ferry":                 {"internal/cli"},
	"internal/cli":              {"internal/config", "internal/supervise", "github.com/spf13/cobra", "github.com/spf13/pflag", "github.com/schollz/progressbar", "golang.org/x/term"},
	"internal/config":           {},
	"internal/supervise":        {"internal/config", "internal/fusefs", "internal/vfs", "internal/cache/", "internal/writeback", "internal/nextflow", "internal/metrics", "pkg/objstore", "golang.org/x/sys"},
	"internal/fusefs":           {"internal/vfs", "internal/metrics", "github.com/hanwen/go-fuse/v2"},
	"internal/vfs":              {"internal/cache/", "internal/writeback", "pkg/objstore", "internal/metrics", "golang.org/x/sync"},
	"internal/cache/meta":       {"pkg/objstore", "github.com/dgraph-io/ristretto"},
	"internal/cache/block":      {"pkg/objstore", "golang.org/x/sync", "internal/cache/hsm"},
	"internal/cache/hsm":        {"golang.org/x/sys"},
	"internal/writeback":        {"pkg/objstore", "golang.org/x/sync"},
	"internal/nextflow":         {"pkg/objstore", "internal/config"},
	"internal/metrics":          {"github.com/prometheus/"},
	"internal/archtest":         {},
	"pkg/objstore":              {},
	"pkg/objstore/mem":          {"pkg/objstore"},
	"pkg/objstore/faulty":       {"pkg/objstore"},
	"pkg/objstore/objstoretest": {"pkg/objstore"},
	"pkg/objstore/s3":           {"pkg/objstore", "github.com/aws/", "golang.org/x/sync"},
	"pkg/objstore/gcs":          {"pkg/objstore", "cloud.google.com/go/storage", "google.golang.org/api", "cloud.google.com/go", "google.golang.org/grpc"},
	"pkg/objstore/azure":        {"pkg/objstore", "github.com/Azure/azure-sdk-for-go/"},
}

// free may import anything: test support, benchmarks.
var free = []string{"internal/testenv", "internal/e2e", "bench"}

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func TestImportRules(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = moduleRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	seen := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(f[0], mod)
		if isFree(pkg) {
			continue
		}
		rules, ok := rulesFor(pkg)
		if !ok {
			t.Errorf("package %s has no import rule in DESIGN.md §2 (add it here)", pkg)
			continue
		}
		seen++
		for _, imp := range f[1:] {
			if isStd(imp) {
				continue
			}
			target := strings.TrimPrefix(imp, mod)
			if target == pkg || permitted(target, rules) {
				continue
			}
			t.Errorf("%s must not import %s", pkg, imp)
		}
	}
	if seen < 5 {
		t.Fatalf("only %d packages checked: go list output looks wrong", seen)
	}
}

// TestNoFUSEBelowFusefs checks transitively that only fusefs (and what
// imports it) depends on go-fuse, and that vfs builds without it.
func TestNoFUSEBelowFusefs(t *testing.T) {
	for _, pkg := range []string{"internal/vfs", "internal/writeback", "internal/cache/block", "internal/cache/meta", "pkg/objstore"} {
		cmd := exec.Command("go", "list", "-deps", "./"+pkg)
		cmd.Dir = moduleRoot()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		if bytes.Contains(out, []byte("github.com/hanwen/go-fuse")) {
			t.Errorf("%s depends on go-fuse", pkg)
		}
	}
}

func isFree(pkg string) bool {
	for _, p := range free {
		if pkg == p || strings.HasPrefix(pkg, p+"/") {
			return true
		}
	}
	return false
}

// rulesFor finds the most specific rule for pkg.
func rulesFor(pkg string) ([]string, bool) {
	best, bestLen, found := []string(nil), -1, false
	for k, v := range allowed {
		if (pkg == k || strings.HasPrefix(pkg, k+"/")) && len(k) > bestLen {
			best, bestLen, found = v, len(k), true
		}
	}
	return best, found
}

func permitted(imp string, rules []string) bool {
	for _, r := range rules {
		switch {
		case strings.Contains(strings.SplitN(r, "/", 2)[0], "."):
			if strings.HasPrefix(imp, r) { // third-party module prefix
				return true
			}
		case strings.HasSuffix(r, "/"):
			if strings.HasPrefix(imp, r) { // a family such as internal/cache/
				return true
			}
		case imp == r || strings.HasPrefix(imp, r+"/"):
			return true
		}
	}
	return false
}

func isStd(imp string) bool {
	first := strings.SplitN(imp, "/", 2)[0]
	return !strings.Contains(first, ".")
}
