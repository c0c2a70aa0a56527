package supervise

// Exit codes.
const (
	ExitOK           = 0
	ExitStartFailure = 1   // mount refused, no /dev/fuse, bad config
	ExitNotDurable   = 174 // some output could not be made durable
	ExitNoCommand    = 127 // Nextflow: .command.sh never became visible
)
