// Package hsm serves fanotify pre-content events (Linux 6.14+) for the
// block cache, so that a read-only open can pass through to a cache file
// while that file is still sparse: the kernel asks ferry for every range
// a task reads before it reads it, ferry makes the range present, and
// the kernel reads the cache file itself.
//
// One Listener per process: a fanotify group of class
// FAN_CLASS_PRE_CONTENT with a FAN_PRE_ACCESS mark on a private,
// detached clone of the cache directory's mount (open_tree with
// OPEN_TREE_CLONE). Files opened through that clone (Listener.Open) and
// handed to the kernel as passthrough backing files raise events to this
// process alone; ferry's own reads and writes of the same files go
// through the ordinary path and raise none. So no process ever waits on
// another one's listener: a ferry that is frozen or killed holds up only
// reads of its own tasks, never another task's (each ferry's mark covers
// its own mount only), and a fill never raises an event.
//
// Each Watch names one cache file (by inode) and the Filler that makes
// its ranges present. A range already present is answered at once from
// the reading goroutine; any other is filled in a goroutine of its own
// and answered FAN_ALLOW, or FAN_DENY with EIO when the fill fails: a
// task never reads a hole as zeros. Once a file is whole, an ignore mark
// on its inode ends the events for it (reads then cost what an unmarked
// passthrough read costs).
//
// When the listener's process dies, the kernel allows every event the
// group has not answered, so a read of a hole would return zeros. A
// guardian process (RunGuard, a re-execution of ferry) holds a copy of
// the group: when ferry is gone it answers every pending and later event
// with EIO, and exits once nothing on ferry's mount is open or mapped.
//
// The package imports the standard library and golang.org/x/sys only.
package hsm
