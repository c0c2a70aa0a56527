package writeback

import (
	"context"
	"errors"
	"strconv"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// A killed ferry may have had an upload land without journaling it: an
// object that replaced the file's own base (whose old version is then
// gone), or a stray under a name the file had left. Every upload carries
// a token (MetaUpload) journaled before it starts, so the next process
// can tell its own objects apart (checkLandings).

// newTokenLocked returns a token no other upload has. Caller holds f.mu.
func (f *File) newTokenLocked() string {
	f.tokens++
	return f.id + "." + strconv.FormatUint(f.tokens, 10)
}

// tagLocked gives the snapshot's metadata a new token and returns the
// tokens its object may carry (its own, or its stream's). Caller holds
// f.mu.
func (s *snapshot) tagLocked(f *File) []landingRec {
	tok := f.newTokenLocked()
	s.md[MetaUpload] = tok
	l := []landingRec{{Key: s.target.Key, Token: tok}}
	if s.stream != nil && s.stream.token != "" {
		l = append(l, landingRec{Key: s.stream.key, Token: s.stream.token})
	}
	return l
}

// verifyFrom sets the landings of a recovered record to check: its
// attempt's and its multipart uploads' tokens; with keepOwn, not those at
// the record's own name (whatever landed there stays).
func (f *File) verifyFrom(r *record, keepOwn bool) {
	cands := append([]landingRec(nil), r.Landing...)
	for _, u := range r.Uploads {
		if u.Token != "" {
			cands = append(cands, landingRec{Key: u.Key, Token: u.Token})
		}
	}
	for _, l := range cands {
		if keepOwn && l.Key == r.Target.Key {
			continue
		}
		f.verify = append(f.verify, l)
	}
}

// checkLandings looks for the objects of the uploads an earlier process
// recorded: one that replaced the file's base becomes its base; any other
// one under a name the file does not have is deleted (if unchanged).
func (f *File) checkLandings(ctx context.Context, st objstore.Store) error {
	f.mu.Lock()
	verify := f.verify
	f.mu.Unlock()
	for _, l := range verify {
		info, err := st.Stat(ctx, l.Key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if info.Metadata[MetaUpload] != l.Token {
			continue // not ours (or ours, overwritten since)
		}
		f.mu.Lock()
		t := Target{Scheme: f.target.Scheme, Bucket: f.target.Bucket, Key: l.Key}
		rebase := !f.removed && f.hasData && f.base != nil && f.base.Key == l.Key && f.base.Version != info.Version
		var old string
		if rebase {
			// It holds a snapshot of this file: its bytes equal the old
			// base's wherever the file is clean now.
			old = f.base.Version
			info.Key = l.Key
			f.setBaseLocked(&info)
			f.baseLimit = min(f.baseLimit, info.Size)
		}
		mine := !f.removed && f.target == t
		// Never the object the file reads from.
		mine = mine || (f.base != nil && f.base.Key == l.Key && f.base.Version == info.Version)
		f.mu.Unlock()
		switch {
		case rebase:
			f.m.log.Info("writeback: an upload of the previous run had landed; using it", "path", t.String())
			f.m.retargetDeletes(t, old, info.Version)
		case mine: // overwritten by the upload to come
		default:
			f.m.log.Info("writeback: deleting an upload of the previous run left under an old name", "path", t.String())
			f.m.mu.Lock()
			f.m.deleting[t]++
			f.m.mu.Unlock()
			if err := f.m.deleteMarked(ctx, st, t, info.Version, f); err != nil {
				return err
			}
		}
	}
	f.mu.Lock()
	f.verify = nil
	f.mu.Unlock()
	return nil
}
