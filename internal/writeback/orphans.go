package writeback

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// A ferry killed while a CreateUpload was on the wire (sent, its answer
// not back, so its ID never journaled) leaves a multipart upload nobody
// knows. Recovery therefore lists the uploads in progress on every key a
// dead process's record names (its name, the keys of its uploads and
// landings) where the store can (objstore.UploadLister), and aborts those
// initiated while that process ran: after it started (its id prefix is
// its start time) and before this manager started. Uploads known to this
// manager are left to their files.

// orphanSkew widens the window for clock skew between this host and the
// server.
const orphanSkew = 5 * time.Second

// orphanScan is a key to look for uploads left by a dead process since
// since (guarded by File.mu; not journaled: a later recovery derives it
// again from the same record).
type orphanScan struct {
	key   string
	since time.Time
}

// orphanScansFor returns the scans a recovered record asks for, skipping
// those in seen (and adding its own).
func orphanScansFor(r *record, seen map[orphanScanKey]bool) []orphanScan {
	if r.State == stateGone {
		return nil
	}
	since := processStart(r.ID).Add(-orphanSkew)
	keys := []string{r.Target.Key}
	for _, u := range r.Uploads {
		keys = append(keys, u.Key)
	}
	for _, l := range r.Landing {
		keys = append(keys, l.Key)
	}
	var out []orphanScan
	for _, k := range keys {
		sk := orphanScanKey{Scheme: r.Target.Scheme, Bucket: r.Target.Bucket, Key: k, since: since}
		if k == "" || seen[sk] {
			continue
		}
		seen[sk] = true
		out = append(out, orphanScan{key: k, since: since})
	}
	return out
}

// orphanScanKey dedups scans across the records of one recovery.
type orphanScanKey struct {
	Scheme, Bucket, Key string
	since               time.Time
}

// processStart returns the start time of the process that made id (see
// Manager.newID), or the zero time when id does not tell.
func processStart(id string) time.Time {
	prefix, _, ok := strings.Cut(id, "-")
	if !ok {
		return time.Time{}
	}
	ns, err := strconv.ParseInt(prefix, 36, 64)
	if err != nil || ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// uploadLister returns the UploadLister of st or of a store it decorates.
func uploadLister(st objstore.Store) objstore.UploadLister {
	for s := st; s != nil; s = objstore.Unwrap(s) {
		if l, ok := s.(objstore.UploadLister); ok {
			return l
		}
	}
	return nil
}

// knownUploads returns the ids of the multipart uploads the live files
// record.
func (m *Manager) knownUploads() map[string]bool {
	known := map[string]bool{}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.byID {
		g.mu.Lock()
		for _, u := range g.uploads {
			known[u.ID] = true
		}
		g.mu.Unlock()
	}
	return known
}

// abortOrphans runs f's orphan scans (see orphanScan): it aborts the
// uploads a dead process left unrecorded on those keys. A scan that fails
// with an error worth retrying (an outage) stays for a later attempt
// (see orphansLeft); like a failed abort, it never holds back the file's
// data. Only the end of ctx is returned.
func (f *File) abortOrphans(ctx context.Context, st objstore.Store) error {
	m := f.m
	f.mu.Lock()
	scans := slices.Clone(f.orphans)
	f.mu.Unlock()
	if len(scans) == 0 {
		return nil
	}
	l := uploadLister(st)
	mp, _ := st.(objstore.Multipart)
	var left []orphanScan
	if l != nil && mp != nil {
		known := m.knownUploads()
		for _, s := range scans {
			err := m.abortOrphansOf(ctx, l, mp, s, known)
			switch {
			case err == nil:
			case ctx.Err() != nil:
				return context.Cause(ctx)
			case objstore.Retryable(err):
				m.log.Info("writeback: could not look for multipart uploads a killed ferry left yet; retried later", "key", s.key, "err", err)
				left = append(left, s)
			default:
				m.log.Warn("writeback: could not abort the multipart uploads a killed ferry may have left; a bucket lifecycle rule must remove them", "key", s.key, "err", err)
			}
		}
	}
	f.mu.Lock()
	f.orphans = left
	f.mu.Unlock()
	return nil
}

// abortOrphansOf aborts the uploads of s.key that s covers, but those in
// known.
func (m *Manager) abortOrphansOf(ctx context.Context, l objstore.UploadLister, mp objstore.Multipart, s orphanScan, known map[string]bool) error {
	if err := m.sched.acquire(ctx, classLight); err != nil {
		return err
	}
	ups, err := l.ListUploads(ctx, s.key)
	m.sched.release(classLight)
	if errors.Is(err, objstore.ErrUnsupported) {
		return nil
	}
	if err != nil {
		return err
	}
	m.log.Debug("writeback: looking for multipart uploads a killed ferry left", "key", s.key, "since", s.since, "until", m.started, "found", len(ups))
	for _, u := range ups {
		if known[u.ID] || u.Initiated.Before(s.since) || !u.Initiated.Before(m.started) {
			m.log.Debug("writeback: multipart upload left alone", "key", s.key, "upload", u.ID, "initiated", u.Initiated, "ours", known[u.ID])
			continue
		}
		if err := m.sched.acquire(ctx, classLight); err != nil {
			return err
		}
		err := mp.AbortUpload(ctx, s.key, u.ID)
		m.sched.release(classLight)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return err
		}
		m.log.Info("writeback: aborted a multipart upload a killed ferry left unrecorded", "key", s.key, "upload", u.ID)
	}
	return nil
}

// orphansLeft reports whether orphan scans are left (see abortOrphans).
func (f *File) orphansLeft() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.orphans) > 0
}
