package e2e

import (
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// TestCrashRecovery kills ferry ("ferry mount", or "ferry run" with the
// I/O coming from its task's mount namespace) with SIGKILL at chosen
// points of its uploads, 21 times (three rounds of seven crash points: during a
// single-part PUT, mid-part of a multipart upload, just before and just
// after CompleteMultipartUpload, during the server-side copy of a rename,
// after the rename of a file not uploaded yet, right after close
// returned). After each kill, "ferry run -- true" on the same cache dir
// must leave every closed file intact in the bucket, no multipart upload
// and no key the test did not write. FERRY_CRASH_SEED reproduces the
// random choices (timing still varies); FERRY_CRASH_POINTS narrows the
// crash points ("before-complete,after-close").
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	testCrash(t, crashOptions{iterations: 21, maxSize: 12 << 20})
}

// TestSoakCrash is TestCrashRecovery with 140 kills (twenty rounds) and
// larger files (FERRY_SOAK=1 only).
func TestSoakCrash(t *testing.T) {
	if os.Getenv("FERRY_SOAK") == "" {
		t.Log("soak test: set FERRY_SOAK=1 to run it")
		return
	}
	t.Parallel()
	testCrash(t, crashOptions{iterations: 140, maxSize: 24 << 20})
}

type crashOptions struct {
	iterations int
	maxSize    int // largest file written
}

// crashPoint is where an iteration kills ferry.
type crashPoint int

const (
	crashSinglePut crashPoint = iota
	crashMidPart
	crashBeforeComplete
	crashAfterComplete
	crashRenameCopy
	crashRenameDirty
	crashAfterClose
	numCrashPoints
)

var crashNames = [numCrashPoints]string{"single-put", "mid-part", "before-complete", "after-complete", "rename-copy", "rename-dirty", "after-close"}

func (c crashPoint) String() string { return crashNames[c] }

// crashPointsFromEnv returns the crash points to cycle through: all, or
// those named in FERRY_CRASH_POINTS ("before-complete,after-close").
func crashPointsFromEnv(t *testing.T) []crashPoint {
	t.Helper()
	var out []crashPoint
	v := os.Getenv("FERRY_CRASH_POINTS")
	for p := crashPoint(0); p < numCrashPoints; p++ {
		if v == "" || strings.Contains(","+v+",", ","+p.String()+",") {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Fatalf("FERRY_CRASH_POINTS=%q names none of %v", v, crashNames)
	}
	return out
}

// reqKind names an S3 request from its method, query and headers.
func reqKind(r *http.Request) string {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "" && q.Has("partNumber"):
		return "CopyPart"
	case r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "":
		return "Copy"
	case r.Method == http.MethodPut && q.Has("partNumber"):
		return "UploadPart"
	case r.Method == http.MethodPut:
		return "Put"
	case r.Method == http.MethodPost && q.Has("uploads"):
		return "CreateUpload"
	case r.Method == http.MethodPost && q.Has("uploadId"):
		return "Complete"
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		return "Abort"
	case r.Method == http.MethodDelete:
		return "Delete"
	}
	return r.Method
}

// crasher kills the ferry of the current iteration once: from the proxy
// (before or after a matching request is forwarded) or from a timer.
type crasher struct {
	mu      sync.Mutex // guards the fields below
	proc    *os.Process
	match   func(r *http.Request) bool // nil: no request triggers
	after   bool                       // trigger after the upstream answered
	delay   time.Duration              // wait this long after the trigger
	killed  bool
	firing  bool   // a trigger fired; its delayed kill is pending
	trigger string // what triggered the kill
}

func (c *crasher) arm(proc *os.Process, match func(*http.Request) bool, after bool, delay time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.proc, c.match, c.after, c.delay, c.killed, c.trigger, c.firing = proc, match, after, delay, false, "", false
}

// see is the proxy hook.
func (c *crasher) see(r *http.Request, after bool) {
	c.mu.Lock()
	hit := c.match != nil && c.after == after && !c.killed && c.match(r)
	var delay time.Duration
	if hit {
		c.match = nil
		c.firing = true
		delay = c.delay
	}
	c.mu.Unlock()
	if !hit {
		return
	}
	what := reqKind(r) + " " + r.URL.Path
	if after {
		what += " (answered)"
	}
	if delay == 0 {
		c.kill(what) // synchronously: the request waits for the kill
		return
	}
	time.AfterFunc(delay, func() { c.kill(what + " +" + delay.String()) })
}

func (c *crasher) kill(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.killed || c.proc == nil {
		return
	}
	c.killed, c.trigger, c.firing = true, why, false
	_ = c.proc.Kill()
}

// waitArmed waits until the armed trigger fired (or its delayed kill
// ran), at most timeout.
func (c *crasher) waitArmed(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		pending := c.match != nil || c.firing
		c.mu.Unlock()
		if !pending {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *crasher) result() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.killed, c.trigger
}

func testCrash(t *testing.T, o crashOptions) {
	seed := testSeed(t, "FERRY_CRASH_SEED")
	t.Logf("FERRY_CRASH_SEED=%d", seed)
	rng := rand.New(rand.NewSource(seed))
	e := newS3Env(t)
	var c crasher
	hp := newFaultProxy(t, faultProxyOptions{
		Upstream:  e.srv.Endpoint,
		Hook:      func(r *http.Request) { c.see(r, false) },
		AfterHook: func(r *http.Request, status int) { c.see(r, true) },
	})
	tp := testenv.Toxiproxy(t, strings.TrimPrefix(hp.URL, "http://"))
	tp.AddToxic(t, testenv.Toxic{Name: "slowup", Type: "bandwidth", Stream: "upstream", Attributes: map[string]any{"rate": 4096}})
	points := crashPointsFromEnv(t)
	l := newCrashLedger()
	reportedUploads, reportedPhantoms := 0, 0
	for i := 0; i < o.iterations; i++ {
		point := points[i%len(points)]
		t0 := time.Now()
		killed, why := crashOnce(t, e, &c, "http://"+strings.TrimPrefix(tp.Endpoint, "http://"), point, rng, l, i, o)
		r := e.run("true")
		if r.code != 0 {
			t.Fatalf("iteration %d (%s, seed %d): restart exited %d\n%s", i, point, seed, r.code, tailStr(r.stderr, 6000))
		}
		if diffs := l.check(e); len(diffs) > 0 {
			// Go on: the other crash points still tell something.
			t.Errorf("iteration %d (%s, killed %v at %q, seed %d): after the restart:\n%s\nrestart log:\n%s",
				i, point, killed, why, seed, strings.Join(diffs, "\n"), tailStr(r.stderr, 4000))
		}
		ups, phantoms := liveUploads(t, e)
		if len(ups) > reportedUploads {
			t.Errorf("iteration %d (%s, killed at %q, seed %d): multipart uploads left after the restart:\n%s\nrestart log:\n%s", i, point, why, seed, strings.Join(ups, "\n"), tailStr(r.stderr, 4000))
			reportedUploads = len(ups) // report new leftovers only
		}
		if len(phantoms) > reportedPhantoms {
			t.Logf("iteration %d: MinIO's bucket-wide listing names uploads that no longer exist (ListParts: NoSuchUpload; see liveUploads):\n%s", i, strings.Join(phantoms, "\n"))
			reportedPhantoms = len(phantoms)
		}
		t.Logf("iteration %d: %s, read mode %s, task namespace %v, killed %v at %q; verified in %v", i, point, crashMode(i), crashTaskNS(i), killed, why, time.Since(t0).Round(time.Millisecond))
	}
}

// crashMode is the read mode of iteration iter: each in turn, so that
// the crash suite covers them all.
func crashMode(iter int) string { return readModes[iter%len(readModes)] }

// crashTaskNS reports whether iteration iter runs its I/O as a task of
// "ferry run" (from the task's mount namespace, see taskns_test.go)
// rather than on "ferry mount": three iterations (one per read mode) of
// each in turn, so that both meet every read mode.
func crashTaskNS(iter int) bool { return (iter/len(readModes))%2 == 0 }

// crashOnce starts ferry (mount, or run with a waiting task), runs one
// crash point's I/O through the mount from this process (from the
// task's namespace for ferry run), kills ferry and detaches the mount.
func crashOnce(t *testing.T, e *s3env, c *crasher, endpoint string, point crashPoint, rng *rand.Rand, l *crashLedger, iter int, o crashOptions) (bool, string) {
	t.Helper()
	var m *mountProc
	pid := 0
	if crashTaskNS(iter) {
		m, pid = startTaskMount(t, e, endpoint, mountModeFlags(crashMode(iter))...)
	} else {
		m = startMount(t, e, endpoint, mountModeFlags(crashMode(iter))...)
	}
	root := e.path("")
	w := &crashIO{root: root, l: l, rng: rng}
	dir := fmt.Sprintf("i%02d", iter)
	size := func(lo, hi int) int { return lo + rng.Intn(max(1, min(hi, o.maxSize)-lo)) }
	anyPut := func(r *http.Request) bool { k := reqKind(r); return k == "Put" || k == "UploadPart" }
	isKind := func(kind string) func(*http.Request) bool {
		return func(r *http.Request) bool { return reqKind(r) == kind }
	}
	var steps func() error
	switch point {
	case crashSinglePut:
		c.arm(m.Process, anyPut, false, time.Duration(rng.Intn(600))*time.Millisecond)
		steps = func() error {
			for j := 0; j < 1+rng.Intn(4); j++ {
				if err := w.write(fmt.Sprintf("%s/s%d", dir, j), size(1, 3<<20), false); err != nil {
					return err
				}
			}
			return nil
		}
	case crashMidPart:
		c.arm(m.Process, func(r *http.Request) bool {
			return reqKind(r) == "UploadPart" && r.URL.Query().Get("partNumber") == "2"
		}, false, time.Duration(rng.Intn(1000))*time.Millisecond)
		steps = func() error { return w.write(dir+"/mp", size(11<<20, 16<<20), false) }
	case crashBeforeComplete, crashAfterComplete:
		c.arm(m.Process, isKind("Complete"), point == crashAfterComplete, 0)
		steps = func() error { return w.write(dir+"/mc", size(6<<20, 12<<20), false) }
	case crashRenameCopy:
		// Kill at the copy of the file rename, or at the k-th copy of the
		// directory rename; before the copy is forwarded or after it was
		// answered (the delete not sent).
		after := rng.Intn(2) == 0
		target := rng.Intn(4) // 0: the file; 1-3: that copy of the directory's
		copies := 0
		c.arm(m.Process, func(r *http.Request) bool {
			if reqKind(r) != "Copy" {
				return false
			}
			copies++ // the hook runs once per request, under c.mu
			return copies == target+1
		}, after, 0)
		steps = func() error {
			if err := w.write(dir+"/rc", size(1000, 400<<10), true); err != nil {
				return err
			}
			if err := w.rename(dir+"/rc", dir+"/rc.moved"); err != nil {
				return err
			}
			// A directory of durable files, renamed: copy and delete per key.
			for j := 0; j < 3; j++ {
				if err := w.write(fmt.Sprintf("%s/d/f%d", dir, j), size(10, 50<<10), true); err != nil {
					return err
				}
			}
			return w.rename(dir+"/d", dir+"/d2")
		}
	case crashRenameDirty:
		c.arm(m.Process, nil, false, 0)
		steps = func() error {
			if err := w.write(dir+"/rd.tmp", size(1<<20, 4<<20), false); err != nil {
				return err
			}
			if err := w.rename(dir+"/rd.tmp", dir+"/rd"); err != nil {
				return err
			}
			time.Sleep(time.Duration(rng.Intn(300)) * time.Millisecond)
			c.kill("after the rename returned")
			return nil
		}
	case crashAfterClose:
		c.arm(m.Process, nil, false, 0)
		steps = func() error {
			// Small files closed back to back, the kill right after the
			// last close(2) returned: FUSE sends RELEASE after close
			// returns, so this is where a close not yet journaled shows.
			for j := 0; j < 8; j++ {
				if err := w.write(fmt.Sprintf("%s/ac%d", dir, j), size(1, 64<<10), false); err != nil {
					return err
				}
			}
			c.kill("right after close returned")
			return nil
		}
	}
	done := make(chan error, 1)
	go func() { // owner: crashOnce, which reads done
		if pid != 0 {
			done <- inTaskNS(pid, steps)
			return
		}
		done <- steps()
	}()
	var stepErr error
	select {
	case stepErr = <-done:
	case <-time.After(90 * time.Second):
		c.kill("the I/O took more than 90 s")
		stepErr = <-done
	}
	// Give an armed trigger time to fire (the uploads crawl); failing
	// that, kill at a random moment of the uploads.
	c.waitArmed(15 * time.Second)
	time.Sleep(time.Duration(rng.Intn(800)) * time.Millisecond)
	c.kill("random moment after the I/O")
	m.stop(t)
	killed, why := c.result()
	if stepErr != nil {
		why += fmt.Sprintf(" (the I/O failed: %v)", stepErr)
	}
	return killed, why
}

// crashIO does file I/O on the mount and records what became durable by
// contract (closed files) in the ledger.
type crashIO struct {
	root string
	l    *crashLedger
	rng  *rand.Rand
}

// write creates key with n random bytes (fsync before close when sync).
func (c *crashIO) write(key string, n int, sync bool) error {
	p := filepath.Join(c.root, key)
	c.l.inFlight(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	data := seededBytes(c.rng, n)
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	for off := 0; off < n; {
		m, err := f.Write(data[off:min(n, off+1<<20)])
		off += m
		if err != nil {
			f.Close()
			return err
		}
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	c.l.closed(key, sha(data))
	return nil
}

// rename renames a file or directory of the ledger.
func (c *crashIO) rename(from, to string) error {
	moves := c.l.beginRename(from, to)
	if err := os.Rename(filepath.Join(c.root, from), filepath.Join(c.root, to)); err != nil {
		return err
	}
	c.l.renamed(moves)
	return nil
}
