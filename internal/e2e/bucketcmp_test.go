package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// treeEntry is one name of a local reference tree, as ferry should store
// it: a regular file's content hash, a symlink's target, or a directory.
type treeEntry struct {
	dir    bool
	link   string // symlink target ("" for files and dirs)
	isLink bool
	sha    string // regular files
	size   int64
	fifo   bool
}

// readTree walks root and returns its entries by slash path relative to
// root (the root itself excluded).
func readTree(root string) (map[string]treeEntry, error) {
	out := map[string]treeEntry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = treeEntry{isLink: true, link: t}
		case d.IsDir():
			out[rel] = treeEntry{dir: true}
		case d.Type()&fs.ModeNamedPipe != 0:
			out[rel] = treeEntry{fifo: true}
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = treeEntry{sha: sha(b), size: int64(len(b))}
		}
		return nil
	})
	return out, err
}

// compareBucket checks that the bucket below prefix holds exactly the
// tree: every file byte-identical, every symlink an object whose
// ferry-symlink metadata is its target, every FIFO an empty object whose
// ferry-mode has the FIFO type, every empty directory a marker, and no
// other key (markers of existing directories are allowed). It returns
// one line per difference, sorted.
func compareBucket(e *s3env, tree map[string]treeEntry, prefix string) []string {
	var diffs []string
	keys := map[string]bool{}
	for _, k := range e.keys(prefix) {
		keys[strings.TrimPrefix(k, prefix)] = true
	}
	nonEmpty := map[string]bool{}
	for rel := range tree {
		if d := path.Dir(rel); d != "." {
			nonEmpty[d] = true
		}
	}
	for rel, want := range tree {
		switch {
		case want.dir:
			if !nonEmpty[rel] && !keys[rel+"/"] {
				diffs = append(diffs, fmt.Sprintf("empty directory %s has no marker %q", rel, prefix+rel+"/"))
			}
		case want.fifo:
			info, err := e.stat(prefix + rel)
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("fifo %s: %v", rel, err))
			} else if m, _ := strconv.ParseUint(info.Metadata["ferry-mode"], 8, 32); info.Size != 0 || m&syscall.S_IFMT != syscall.S_IFIFO {
				diffs = append(diffs, fmt.Sprintf("fifo %s: %d bytes, ferry-mode %q", rel, info.Size, info.Metadata["ferry-mode"]))
			}
		case want.isLink:
			info, err := e.stat(prefix + rel)
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("symlink %s: %v", rel, err))
			} else if got, ok := info.Metadata["ferry-symlink"]; !ok || got != want.link {
				diffs = append(diffs, fmt.Sprintf("symlink %s: target %q (set %v), want %q", rel, got, ok, want.link))
			}
		default:
			b, err := e.get(prefix + rel)
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("file %s: %v", rel, err))
			} else if sha(b) != want.sha {
				diffs = append(diffs, fmt.Sprintf("file %s: %d bytes sha %.12s in the bucket, want %d bytes sha %.12s", rel, len(b), sha(b), want.size, want.sha))
			}
		}
	}
	for k := range keys {
		if k == "" {
			continue // the marker of the prefix itself
		}
		if d, ok := strings.CutSuffix(k, "/"); ok {
			if w, found := tree[d]; found && w.dir {
				continue
			}
			diffs = append(diffs, fmt.Sprintf("unexpected marker %q", prefix+k))
			continue
		}
		if w, ok := tree[k]; !ok || w.dir {
			diffs = append(diffs, fmt.Sprintf("unexpected object %q", prefix+k))
		}
	}
	sort.Strings(diffs)
	return diffs
}
