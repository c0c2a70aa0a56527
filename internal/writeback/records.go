package writeback

// Journal record states (see README.md).
const (
	stateOpen      = "open"      // being written; discarded by recovery
	stateClosed    = "closed"    // staged and closed: recovery uploads it
	stateUploaded  = "uploaded"  // durable; only DeleteAfter keys remain to delete
	stateDiscarded = "discarded" // no data; only Uploads remain to abort
	stateGone      = "gone"      // forgotten: nothing left to do
)

const recordVersion = 1

// record is one staged file's journal entry: the state of the file whose
// staged bytes are <id>.data. The journal log holds one JSON record per
// line; the last line of an id wins.
type record struct {
	V      int    `json:"v"`
	ID     string `json:"id"`
	Seq    uint64 `json:"seq"` // orders records of the same target: highest wins
	State  string `json:"state"`
	Target Target `json:"target"`
	Size   int64  `json:"size"`
	// Mode: permission bits, with the type bits of a special file.
	Mode    uint32 `json:"mode"`
	MtimeNs int64  `json:"mtime_ns"`
	// MtimeSet: written by older versions (the mtime was set explicitly);
	// the mtime is now always stored.
	MtimeSet bool   `json:"mtime_set,omitempty"`
	Uid      uint32 `json:"uid,omitempty"`
	Gid      uint32 `json:"gid,omitempty"`
	OwnerSet bool   `json:"owner_set,omitempty"`
	Rdev     uint32 `json:"rdev,omitempty"`
	AtimeNs  int64  `json:"atime_ns,omitempty"` // 0: follows the mtime
	CtimeNs  int64  `json:"ctime_ns,omitempty"`
	Symlink  string `json:"symlink,omitempty"`
	// Reopened (state open only): the file was closed, and modified again
	// before it was durable; every modification since is journaled, so
	// recovery uploads it as of the last one instead of discarding it.
	Reopened bool     `json:"reopened,omitempty"`
	Base     *baseRec `json:"base,omitempty"`
	// Dirty lists the [off, end) ranges whose bytes are in the data file;
	// other ranges below Base.Limit come from the base object. Unused
	// without a base (the data file is then the whole content).
	Dirty   [][2]int64  `json:"dirty,omitempty"`
	Uploads []uploadRec `json:"uploads,omitempty"`
	// Landing: the upload in progress, by the token its object carries
	// (MetaUpload): recovery checks whether it landed.
	Landing     []landingRec `json:"landing,omitempty"`
	DeleteAfter []deleteRec  `json:"delete_after,omitempty"`
}

// baseRec is the object whose bytes a file's clean ranges come from.
type baseRec struct {
	Key      string            `json:"key"`
	Version  string            `json:"version,omitempty"`
	Size     int64             `json:"size"`
	Limit    int64             `json:"limit"` // bytes at or past Limit are not the base's (truncated)
	Metadata map[string]string `json:"metadata,omitempty"`
}

// uploadRec is a multipart upload that must be completed or aborted.
type uploadRec struct {
	Key   string `json:"key"`
	ID    string `json:"id"`
	Token string `json:"token,omitempty"` // MetaUpload of the object it makes
	// owned (not journaled): a running stream or attempt of this process
	// created the upload and completes or aborts it itself. Uploads not
	// owned (recovered from the journal) are aborted by the next attempt.
	owned bool
}

// landingRec is an upload that may have landed at Key, as an object whose
// MetaUpload metadata is Token.
type landingRec struct {
	Key   string `json:"key"`
	Token string `json:"token"`
}

// deleteRec is a key to delete once the file is durable under its new
// name (the old name of a rename). Version, when set, guards the delete.
type deleteRec struct {
	Key     string `json:"key"`
	Version string `json:"version,omitempty"`
}
