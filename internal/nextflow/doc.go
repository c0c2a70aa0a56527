// Package nextflow knows the Nextflow task contract of fusion.enabled:
// the FUSION_* environment (FUSION_WORK, the FUSION_TAGS grammar), the
// "### outputs:" header of .command.run and its glob patterns, the inputs
// its nxf_stage section (or .command.stage) links or copies into the work
// dir, read without running them (stage.go, shellwords.go), the
// .command.log tee, the .fusion/trace.json task metrics, and the small
// object-store helpers the supervisor uses at start and exit (waiting for
// .command.sh, uploading local files).
//
// It never touches the mount: everything it reads or writes in a bucket goes
// through an objstore.Store. It imports only pkg/objstore, internal/config
// and the standard library (never vfs, writeback or supervise).
package nextflow
