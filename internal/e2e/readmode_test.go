package e2e

// Read modes: how the kernel serves reads of files opened read-only.
// The suites that check data (the model, the crash suite, the fault
// workload) run in each.
const (
	modeFUSE = "fuse" // every read through ferry (--passthrough off)
	modeWarm = "warm" // wholly cached files pass through, others through ferry (--cold-passthrough off)
	modeCold = "cold" // every read-only open passes through, cold ones filled on demand (the default here)
)

var readModes = []string{modeCold, modeWarm, modeFUSE}

// readModeFlags returns ferry's flags for read mode m. Cold passthrough
// is for a task's processes, under the mapping guard (ferry run); with
// ferry mount (the test process reads through it) it takes
// --cold-passthrough unguarded (the suites map no files).
func readModeFlags(m string) []string {
	switch m {
	case modeFUSE:
		return []string{"--passthrough", "off", "--cold-passthrough", "off"}
	case modeWarm:
		return []string{"--passthrough", "on", "--cold-passthrough", "off"}
	}
	return []string{"--passthrough", "on", "--cold-passthrough", "on"}
}

// mountModeFlags is readModeFlags for ferry mount.
func mountModeFlags(m string) []string {
	if m == modeCold {
		return []string{"--passthrough", "on", "--cold-passthrough", "unguarded"}
	}
	return readModeFlags(m)
}
