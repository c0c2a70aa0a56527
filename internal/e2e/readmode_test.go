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

// readModeFlags returns ferry's flags for read mode m.
func readModeFlags(m string) []string {
	switch m {
	case modeFUSE:
		return []string{"--passthrough", "off", "--cold-passthrough", "off"}
	case modeWarm:
		return []string{"--passthrough", "on", "--cold-passthrough", "off"}
	}
	return []string{"--passthrough", "on", "--cold-passthrough", "on"}
}
