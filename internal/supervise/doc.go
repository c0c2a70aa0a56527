// Package supervise owns the life of a ferry process: it builds the stack
// (stores → caches and write-back → vfs → FUSE mount), runs the task, and
// turns what happened into an exit code.
//
// The order, written once here and tested end to end:
//
//  1. open the write-back journal (finishing uploads an earlier, killed
//     process left behind), the block cache and the stat cache;
//  2. mount at the mount point (mount(2) directly as root, fusermount3
//     otherwise) and wait until the mount answers; for a Nextflow task,
//     start staging its inputs in the background (stage.go);
//  3. start the task in its own process group, with cwd and environment
//     unchanged; the task's binary is looked up by this process before
//     the fork, and the child does no chdir, so neither goes through a
//     request this process must serve while blocked (go-fuse "Deadlocks").
//     ferry run starts it in a mount namespace of its own in which the
//     cache directory is covered (isolate.go; decided before step 2,
//     which then mounts on a shared bind of the mount point so that
//     unmounts reach the task's copy);
//  4. forward SIGTERM, SIGINT, SIGHUP, SIGQUIT and SIGUSR2 to the task's
//     process group;
//  5. when the task exits: stop the input staging, run the pre-drain hooks (Nextflow symlink
//     compaction, server-side copies), stop new writes, Drain with the
//     drain deadline, then the post-drain hooks (uploading .command.log
//     and ferry's own logs). The ordering hook keeps .exitcode last: it
//     is uploaded only after the stop (so after compaction) and after
//     every other file under its work dir is durable;
//  6. unmount (lazily if something still holds it);
//  7. exit with the task's code (128+signal if it was killed), 174 when any
//     write could not be made durable, 1 on a start-up failure.
//
// The end of the mount from outside (umount, fusermount3 -u, umount -f;
// umount -l once nothing on the mount is open any more) ends the FUSE
// session: ferry mount then drains and exits as on SIGTERM; ferry run
// sends the task's process group SIGTERM, as when it gets one, waits for
// the task and goes on with step 5 (the exit code is the task's, or 174).
// Files open for writing when the session ended are closed by fusefs in
// their writers' place and uploaded as written. A mount unmounted from
// outside is not unmounted again (something else may be mounted there).
//
// Exit codes are constants here; only cmd/ferry calls os.Exit.
package supervise
