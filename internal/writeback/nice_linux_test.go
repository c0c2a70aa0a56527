package writeback

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestLowPriority: lowPriority makes the goroutine's thread nice 19, and
// only that thread.
func TestLowPriority(t *testing.T) {
	nice := func() int {
		b, err := os.ReadFile("/proc/thread-self/stat")
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		n, err := strconv.Atoi(fields[16]) // field 19, counted from 3
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	got := make(chan int)
	go func() {
		lowPriority()
		got <- nice()
	}()
	if n := <-got; n != 19 {
		t.Fatalf("nice %d after lowPriority, want 19", n)
	}
	done := make(chan int)
	go func() { done <- nice() }()
	if n := <-done; n == 19 {
		t.Fatal("another goroutine runs at nice 19")
	}
}
