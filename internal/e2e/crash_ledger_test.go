package e2e

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// crashLedger is what the crash test knows the bucket must hold: files
// whose close returned (intact, by contract), renames that were cut
// (the content under one of the two names), and names that were being
// written when ferry died (may exist, any content).
type crashLedger struct {
	mu     sync.Mutex        // guards the fields below (the I/O runs in its own goroutine)
	want   map[string]string // key -> sha256 of its last closed content
	either []eitherRec
	free   map[string]bool
	dirs   map[string]bool // directories ever made: their markers may exist
	// verified caches the content hash of a key at a version already read,
	// so that a check reads only what changed.
	verified map[string]verifiedRec
}

type verifiedRec struct{ version, sha string }

// eitherRec is a file whose rename did not return: its content must be
// under from or to (or both, when ferry died between copy and delete).
type eitherRec struct {
	from, to, sha string
}

func newCrashLedger() *crashLedger {
	return &crashLedger{want: map[string]string{}, free: map[string]bool{}, dirs: map[string]bool{}, verified: map[string]verifiedRec{}}
}

func (l *crashLedger) noteDirs(key string) {
	for d := path.Dir(key); d != "." && d != "/"; d = path.Dir(d) {
		l.dirs[d] = true
	}
}

// inFlight records that key is being written.
func (l *crashLedger) inFlight(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noteDirs(key)
	delete(l.want, key) // an overwrite: old or new, whole or partial
	l.free[key] = true
}

// closed records that key was closed with content sha.
func (l *crashLedger) closed(key, sha string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.free, key)
	l.want[key] = sha
}

// beginRename records a rename of a file or a directory in flight and
// returns the moves it makes.
func (l *crashLedger) beginRename(from, to string) []eitherRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noteDirs(to)
	l.dirs[to] = true // to may be a directory
	var moves []eitherRec
	for k, s := range l.want {
		var nk string
		switch {
		case k == from:
			nk = to
		case strings.HasPrefix(k, from+"/"):
			nk = to + strings.TrimPrefix(k, from)
		default:
			continue
		}
		l.noteDirs(nk)
		moves = append(moves, eitherRec{from: k, to: nk, sha: s})
		delete(l.want, k)
	}
	for k := range l.free {
		if k == from || strings.HasPrefix(k, from+"/") {
			l.free[to+strings.TrimPrefix(k, from)] = true
		}
	}
	l.either = append(l.either, moves...)
	return moves
}

// renamed records that a rename returned.
func (l *crashLedger) renamed(moves []eitherRec) {
	l.mu.Lock()
	defer l.mu.Unlock()
	done := map[eitherRec]bool{}
	for _, m := range moves {
		done[m] = true
		l.want[m.to] = m.sha
	}
	kept := l.either[:0]
	for _, m := range l.either {
		if !done[m] {
			kept = append(kept, m)
		}
	}
	l.either = kept
}

// check compares the bucket with the ledger and returns the differences;
// then it folds what it found into the ledger (a loss is reported once;
// a cut rename resolves to the names that hold the content; a cut write
// to what landed, if anything).
func (l *crashLedger) check(e *s3env) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	objs, _, err := objstore.ListAll(context.Background(), e.store, objstore.ListOptions{})
	if err != nil {
		return []string{"list: " + err.Error()}
	}
	version := map[string]string{}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
		version[o.Key] = o.Version
	}
	got := map[string]string{} // key -> sha ("" when missing), read once
	content := func(k string) (string, bool) {
		if s, ok := got[k]; ok {
			return s, s != ""
		}
		v, present := version[k]
		if !present {
			got[k] = ""
			return "", false
		}
		if r, ok := l.verified[k]; ok && r.version == v {
			got[k] = r.sha
			return r.sha, true
		}
		b, err := e.get(k)
		if err != nil {
			got[k] = ""
			return "", false
		}
		got[k] = sha(b)
		l.verified[k] = verifiedRec{version: v, sha: got[k]}
		return got[k], true
	}
	var diffs []string
	for k, s := range l.want {
		if g, ok := content(k); !ok {
			diffs = append(diffs, fmt.Sprintf("closed file %s is missing", k))
			delete(l.want, k)
		} else if g != s {
			diffs = append(diffs, fmt.Sprintf("closed file %s has other content (sha %.12s, want %.12s)", k, g, s))
			l.want[k] = g
		}
	}
	for _, m := range l.either {
		var found []string
		for _, k := range []string{m.from, m.to} {
			g, ok := content(k)
			if !ok {
				continue
			}
			if g != m.sha {
				diffs = append(diffs, fmt.Sprintf("%s (cut rename %s -> %s) has other content", k, m.from, m.to))
			}
			found = append(found, k)
		}
		if len(found) == 0 {
			diffs = append(diffs, fmt.Sprintf("closed file lost by a cut rename: neither %s nor %s exists", m.from, m.to))
		}
		for _, k := range found {
			l.want[k] = got[k]
		}
	}
	l.either = nil
	for _, k := range keys {
		if d, ok := strings.CutSuffix(k, "/"); ok && l.dirs[d] {
			continue
		}
		if _, ok := l.want[k]; ok {
			continue
		}
		if l.free[k] {
			if s, ok := content(k); ok {
				l.want[k] = s // it landed: from now on it must stay
			}
			continue
		}
		diffs = append(diffs, fmt.Sprintf("unexpected key %q (a temporary object, or a name that should be gone)", k))
	}
	l.free = map[string]bool{}
	sort.Strings(diffs)
	return diffs
}
