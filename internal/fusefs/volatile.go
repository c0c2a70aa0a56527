package fusefs

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Volatile attributes (vfs.Attr.Volatile): the kernel writes the file
// beside ferry for an open descriptor (write passthrough), so what ferry
// answers may be outdated at once and the kernel must not cache it. A
// node marks such an answer with the timeout volatileTTL, and rawFS turns
// it into 0 after go-fuse's bridge, which takes 0 for "the mount's
// timeout"; the kernel rounds any other timeout up to a jiffy, in which a
// stat of a second node of the file (a writer that could not pass
// through got one) would show the size of before the kernel's writes.
const volatileTTL = time.Nanosecond

func (r *rawFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	st := r.RawFileSystem.GetAttr(cancel, in, out)
	unmarkAttr(out)
	return st
}

func (r *rawFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	st := r.RawFileSystem.SetAttr(cancel, in, out)
	unmarkAttr(out)
	return st
}

func (r *rawFS) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	st := r.RawFileSystem.Lookup(cancel, header, name, out)
	if out.AttrTimeout() == volatileTTL {
		out.SetAttrTimeout(0)
	}
	return st
}

func unmarkAttr(out *fuse.AttrOut) {
	if out.Timeout() == volatileTTL {
		out.SetTimeout(0)
	}
}
