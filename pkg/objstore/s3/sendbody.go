package s3

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// The body of a checksummed upload over plain HTTP (a Put, or a part of
// an upload with part checksums). The SDK would read the source twice:
// once for its CRC32C, once more to send it, 32 KiB at a time, and the
// kernel would copy each byte into ferry and out again (with the
// writeback's own pass, a third of ferry's CPU in a task workload that
// wrote 4 GiB of outputs). Instead the driver reads the source once, in
// large pieces, for the CRC32C it puts in the request's header, and a
// source that is a range of a local file (objstore.SourceFile: a staged
// file) is then sent from that file with sendfile(2), which copies
// nothing into ferry. The server verifies the body against the header:
// bytes that changed in the file since the read fail the request and
// are never stored (see objstore.FileRange). Over HTTPS the SDK sends a
// trailing checksum computed while it sends, one pass already; that
// path is left as it is.

// smallBody is the largest body read into memory and sent from there
// (one read of the source, no second open).
const smallBody = 64 << 10

// sumBuf is the buffer size of the checksum pass over a larger source
// (one per upload in flight, 16 by default: 256 KiB ones cost ferry 2 MiB
// more peak RSS in a dd of 1 GiB, and no CPU it could measure).
const sumBuf = 64 << 10

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	sumBufs    = sync.Pool{New: func() any { b := make([]byte, sumBuf); return &b }}
)

// fileBodyKey is the context key of a request whose body fileBodyClient
// sends from a file.
type fileBodyKey struct{}

// fileBody is size bytes of f from off.
type fileBody struct {
	f    *os.File
	off  int64
	size int64
}

// checksummedBody prepares the body of a checksummed upload of size
// bytes of src when the endpoint is plain HTTP: it returns the body for
// the SDK, the CRC32C of the bytes (base64, as the header wants it) and
// ctx, which carries the file to send from when src is a file range.
// sum is nil when the SDK should compute the checksum itself (HTTPS).
// An error reading src is returned as it is (the caller wraps it).
func (s *Store) checksummedBody(ctx context.Context, src io.ReaderAt, size int64) (context.Context, io.Reader, *string, error) {
	if !s.plainHTTP || size <= 0 {
		return ctx, io.NewSectionReader(src, 0, size), nil, nil
	}
	if size <= smallBody {
		b := make([]byte, size) // not pooled: the transport may read the body after the call returns
		if err := readFull(src, b, 0); err != nil {
			return ctx, nil, nil, err
		}
		return ctx, bytes.NewReader(b), crcHeader(crc32.Checksum(b, castagnoli)), nil
	}
	bp := sumBufs.Get().(*[]byte)
	buf := *bp
	var crc uint32
	for off := int64(0); off < size; {
		k := min(size-off, int64(len(buf)))
		if err := readFull(src, buf[:k], off); err != nil {
			sumBufs.Put(bp)
			return ctx, nil, nil, err
		}
		crc = crc32.Update(crc, castagnoli, buf[:k])
		off += k
	}
	sumBufs.Put(bp)
	if f, off, ok := objstore.SourceFile(src); ok {
		ctx = context.WithValue(ctx, fileBodyKey{}, &fileBody{f: f, off: off, size: size})
	}
	return ctx, io.NewSectionReader(src, 0, size), crcHeader(crc), nil
}

// readFull reads len(b) bytes of src at off; a short source is
// io.ErrUnexpectedEOF.
func readFull(src io.ReaderAt, b []byte, off int64) error {
	n, err := src.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// crcHeader is the x-amz-checksum-crc32c value of crc.
func crcHeader(crc uint32) *string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], crc)
	v := base64.StdEncoding.EncodeToString(b[:])
	return &v
}

// fileBodyClient sends the body of a request prepared by checksummedBody
// from its file: the request's body becomes a rangeBody over a new
// descriptor of the file, which net/http hands to sendfile(2) (a
// syscall.Conn under a length limit). Anything else, or a file it cannot
// open again, goes out as the SDK built it.
type fileBodyClient struct{ inner s3.HTTPClient }

func (c fileBodyClient) Do(req *http.Request) (*http.Response, error) {
	fb, _ := req.Context().Value(fileBodyKey{}).(*fileBody)
	if fb != nil && req.Method == http.MethodPut && req.ContentLength == fb.size && req.Body != nil {
		if f, err := fb.open(); err == nil {
			// net/http closes it once the body is sent (or the request failed).
			req.Body, req.GetBody = f, nil
		}
	}
	return c.inner.Do(req)
}

// rangeBody reads a file from its descriptor's offset up to end. It is a
// syscall.Conn, so that net/http's write of the body (a length-limited
// copy into the connection) becomes sendfile(2) from that offset; Read
// looks at the offset each time, so after a sendfile it ends where the
// range ends (net/http reads on to check that the body is no longer
// than its Content-Length).
type rangeBody struct {
	f   *os.File
	end int64
}

func (b *rangeBody) Read(p []byte) (int, error) {
	pos, err := b.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	if pos >= b.end {
		return 0, io.EOF
	}
	if int64(len(p)) > b.end-pos {
		p = p[:b.end-pos]
	}
	return b.f.Read(p)
}

func (b *rangeBody) SyscallConn() (syscall.RawConn, error) { return b.f.SyscallConn() }
func (b *rangeBody) Close() error                          { return b.f.Close() }

// open returns a rangeBody over a new open file description of fb.f
// (its own offset, set to fb.off), opened through /proc/self/fd while
// fb.f's descriptor is held, so that a close meanwhile cannot hand its
// number to another file; the two must be the same inode.
func (fb *fileBody) open() (*rangeBody, error) {
	rc, err := fb.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var (
		g    *os.File
		oerr error
	)
	if err := rc.Control(func(fd uintptr) {
		g, oerr = os.Open("/proc/self/fd/" + strconv.Itoa(int(fd)))
		if oerr != nil {
			return
		}
		var a, b syscall.Stat_t
		if syscall.Fstat(int(fd), &a) != nil || syscall.Fstat(int(g.Fd()), &b) != nil || a.Dev != b.Dev || a.Ino != b.Ino {
			g.Close()
			g, oerr = nil, fmt.Errorf("s3: /proc/self/fd/%d is not the staged file", fd)
		}
	}); err != nil {
		return nil, err
	}
	if oerr != nil {
		return nil, oerr
	}
	if _, err := g.Seek(fb.off, io.SeekStart); err != nil {
		g.Close()
		return nil, err
	}
	return &rangeBody{f: g, end: fb.off + fb.size}, nil
}
