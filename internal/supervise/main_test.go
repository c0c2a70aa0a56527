package supervise

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as the guardian of the pre-content
// listeners the tests' stacks start and as the starter of their tasks
// (they exec /proc/self/exe GuardArg or TaskArg).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == GuardArg {
		os.Exit(GuardMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == TaskArg {
		os.Exit(TaskMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}
