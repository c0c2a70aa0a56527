package supervise

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
)

// TestTaskSurvivesThreadExits: the task's Pdeathsig follows the thread
// that forked it, so startAndWait keeps that thread for the task alone.
// Goroutines that lock a thread and exit (as writeback's low-priority
// prefill does) end their threads; with the task started from a thread
// one of them could take, it got SIGKILL.
func TestTaskSurvivesThreadExits(t *testing.T) {
	for i := range 5 {
		cmd := exec.Command("sleep", "0.3")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		started, done := make(chan error, 1), make(chan error, 1)
		go startAndWait(cmd, nil, started, done)
		if err := <-started; err != nil {
			t.Fatal(err)
		}
		// Many at once, so that they take threads from the idle ones
		// (the task's forking thread among them when it is not held).
		var wg sync.WaitGroup
		for range 256 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread() // and exit locked: the runtime ends the thread
				syscall.Getpid()
			}()
		}
		wg.Wait()
		if err := <-done; err != nil {
			t.Fatalf("run %d: the task ended with %v (%v), want a clean exit", i, err, cmd.ProcessState)
		}
	}
}
