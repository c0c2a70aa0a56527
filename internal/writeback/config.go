package writeback

import (
	"context"
	"log/slog"
	"path"
	"runtime"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Target names one object: a key in a bucket of a backend.
type Target struct {
	Scheme string `json:"scheme"` // "s3", "gs" or "az"
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
}

// String returns the target as a URL, e.g. "s3://bucket/key".
func (t Target) String() string { return t.Scheme + "://" + t.Bucket + "/" + t.Key }

// dir returns the directory of t's key (up to and including the last '/').
func (t Target) dir() string {
	d := path.Dir(t.Key)
	if d == "." {
		return ""
	}
	return d + "/"
}

// sameBucket reports whether u lives in the same bucket as t.
func (t Target) sameBucket(u Target) bool { return t.Scheme == u.Scheme && t.Bucket == u.Bucket }

// StoreResolver returns the (retry-decorated) store of one bucket.
type StoreResolver func(ctx context.Context, scheme, bucket string) (objstore.Store, error)

// Defaults used when a Config field is zero.
const (
	DefaultConcurrency  = 16
	DefaultPartSize     = 16 << 20
	DefaultMinFreeBytes = 256 << 20
	DefaultSpareFiles   = 1024
	// DefaultForegroundQuiet: see Config.ForegroundQuiet.
	DefaultForegroundQuiet = 30 * time.Millisecond
	defaultRetryMin        = 250 * time.Millisecond
	defaultRetryMax        = 30 * time.Second
)

// Config tunes a Manager. Zero fields take the documented defaults.
type Config struct {
	// Dir is the staging root, created 0700. Each Manager stages in a
	// directory of its own under it, so several processes may share it;
	// a Manager takes over the staged files of processes that died there
	// (see README.md).
	Dir string
	// Concurrency bounds data-carrying upload requests (parts and objects of
	// at least 1 MiB) across all files. Default 16.
	Concurrency int
	// SmallConcurrency bounds the other requests (small Puts, CopyPart,
	// Copy, Complete, Delete), which cost latency rather than bandwidth.
	// Default Concurrency: each request in flight beyond the connections a
	// store keeps idle (S3: 64, or its MaxConns) opens a connection of its
	// own (a TLS handshake on a real endpoint), which is closed again once
	// the burst is over (with 4 × 64, a cp of 1,000 small files opened
	// 255–310 connections instead of 64–68).
	SmallConcurrency int
	// ForegroundQuiet: the task is busy writing while it made at least 8
	// write-side calls (Create, Acquire, WriteAt, Truncate, Flush,
	// Release…) within this window. Meanwhile uploads yield to it: a
	// request starts only while fewer than ForegroundUploads requests are
	// in flight (at most a quarter of them heavy, and a heavy one only
	// after it waited 0.5 s), and upload attempts start only as the queue
	// drains, so that the writer runs at local-disk speed (uploads take
	// CPU: signing, hashing, HTTP, maybe a local object server). Requests
	// keep starting one after another, in arrival order; once the task is
	// quiet, heavy requests ramp up (doubling every 100 ms); a Sync or
	// Drain waiting lifts the limit. Default 30ms; < 0 disables the limit.
	ForegroundQuiet time.Duration
	// LocalForeground: uploads yield to this Manager's task only. By
	// default they yield to every task on the node whose Manager stages
	// under the same Dir (per-task ferries sharing a cache directory):
	// while any of them is busy, the limits of ForegroundQuiet hold for
	// the requests of all of them together, as under one mount, and a
	// Drain yields to the others' tasks too (a Sync does not).
	LocalForeground bool
	// ForegroundUploads: requests in flight while the task is busy writing
	// (see ForegroundQuiet). Default the number of CPUs (GOMAXPROCS): on
	// 2 cores, twice that made a cp of 1,000 small files return 6 %
	// later (4 rounds of 5 runs, A/B), with no gain in the time until all
	// were uploaded.
	ForegroundUploads int
	// ExternalWrites lets File.Backing hand out the staging file of a new
	// file for the kernel to write itself (FUSE passthrough for writers;
	// see external.go). Set it only on a kernel with fine-grained
	// change times (Linux 6.13+), which tell every write apart.
	ExternalWrites bool
	// PartSize is the base multipart part size; it grows with the file
	// (objstore.PartSize) so that MaxParts parts reach the backend maximum.
	// Default 16 MiB.
	PartSize int64
	// StreamAfter: once a file grows past it, its full parts are uploaded
	// while the writer is still writing. Default PartSize; < 0 disables.
	StreamAfter int64
	// MinFreeBytes: a write that would leave less free space on the staging
	// disk fails with syscall.ENOSPC. Default 256 MiB; < 0 disables.
	MinFreeBytes int64
	// OrderLast, when it returns true for a key, makes that file upload only
	// after Stop or Drain was called (the task has ended, and what the
	// caller does before, such as symlink compaction, is done), and after
	// every other dirty file under the same directory (same scheme, bucket
	// and key prefix up to the last '/', subdirectories included) is
	// durable. A Sync of such a file skips the wait for Stop or Drain.
	OrderLast func(key string) bool
	// PutOptions returns extra options (tags, metadata) for an upload.
	PutOptions func(t Target) objstore.PutOptions
	// Logger receives warnings and drain failures; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// FreeSpace returns the bytes available on the staging disk; default
	// statfs(Dir). Tests inject it.
	FreeSpace func() (int64, error)
	// SyncJournal fsyncs data files and journal records (and the directory)
	// before a close is acknowledged. Without it, staged data survives a
	// kill of the process (it is in the page cache) but not a kernel crash.
	SyncJournal bool
	// SpareFiles is how many empty data files are created ahead, in the
	// background from the first Create on, and kept ready (refilled once
	// fifteen sixteenths are used; while the task is busy, only up to an
	// eighth): creating
	// a file costs far more than reusing one on many file systems (0.5 ms
	// of CPU on some cloud disks), and a task often writes many small files
	// in a burst, faster than uploads free theirs. Default 1024; < 0
	// disables.
	SpareFiles int
	// RetryMin and RetryMax bound the backoff between failed upload
	// attempts of one file (defaults 250ms and 30s).
	RetryMin, RetryMax time.Duration
}

func (c Config) withDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.SmallConcurrency <= 0 {
		c.SmallConcurrency = c.Concurrency
	}
	if c.ForegroundQuiet == 0 {
		c.ForegroundQuiet = DefaultForegroundQuiet
	}
	if c.ForegroundUploads <= 0 {
		c.ForegroundUploads = runtime.GOMAXPROCS(0)
	}
	if c.PartSize <= 0 {
		c.PartSize = DefaultPartSize
	}
	if c.StreamAfter == 0 {
		c.StreamAfter = c.PartSize
	}
	if c.MinFreeBytes == 0 {
		c.MinFreeBytes = DefaultMinFreeBytes
	}
	if c.SpareFiles == 0 {
		c.SpareFiles = DefaultSpareFiles
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.RetryMin <= 0 {
		c.RetryMin = defaultRetryMin
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(defaultRetryMax, c.RetryMin)
	}
	return c
}

// Stats is a snapshot of the upload queue, for metrics and the exit summary.
type Stats struct {
	PendingFiles    int           // dirty files not yet durable
	PendingBytes    int64         // their total size
	OldestPending   time.Duration // age of the oldest not-yet-durable modification
	UploadedBytes   int64         // bytes sent in Put and UploadPart requests
	UploadedObjects int64         // objects made durable
	Retries         int64         // failed attempts that were retried
	Failures        int64         // attempts that failed with a final error
}
