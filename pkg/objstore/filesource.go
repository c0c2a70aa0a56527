package objstore

import (
	"io"
	"os"
)

// FileRange is implemented by an upload source (the src of Put and
// UploadPart) whose bytes are a range of a local file, read through the
// source's own ReadAt, which may check or sum them on the way.
//
// A driver may send such a source's bytes straight from the file
// (sendfile(2)) instead of through ReadAt, on one condition: it has read
// the whole source through ReadAt once, in order from offset 0, and the
// request carries a checksum of the bytes that read returned, which the
// server verifies before it stores anything. Bytes that changed in the
// file after that read then fail the request (the server refuses the
// body) instead of landing, and what ReadAt checked or summed is exactly
// what the server stored.
type FileRange interface {
	// FileRange returns the file and the offset in it of the source's
	// byte 0 (nil when the source has no file after all).
	FileRange() (f *os.File, off int64)
}

// SourceFile returns the file range behind src: src itself when it is
// an *os.File or a FileRange, or the range of an *io.SectionReader over
// one of those (at any depth). ok is false for any other source.
func SourceFile(src io.ReaderAt) (f *os.File, off int64, ok bool) {
	for {
		switch s := src.(type) {
		case *os.File:
			return s, off, s != nil
		case FileRange:
			g, o := s.FileRange()
			return g, off + o, g != nil
		case *io.SectionReader:
			r, o, _ := s.Outer()
			src, off = r, off+o
		default:
			return nil, 0, false
		}
	}
}
