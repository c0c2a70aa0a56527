package vfs

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"syscall"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

func errIs(err, target error) bool { return errors.Is(err, target) }

func errAs(err error, target any) bool { return errors.As(err, target) }

func isErrno(err error) bool {
	var e syscall.Errno
	return errors.As(err, &e)
}

// Errno is the one table from ferry's errors to what the task sees.
// POSIX conditions pass through; a missing key or bucket is ENOENT; denied
// access EACCES; an object that changed under an open handle ESTALE;
// interrupted requests EINTR; every other failure, including a dead or
// unreachable endpoint and timeouts, is EIO (never ENOENT).
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var (
		e   syscall.Errno
		oe  *objstore.Error
		ne  *net.OpError
		ue  *url.Error
		sce *os.SyscallError
	)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, objstore.ErrPermission):
		return syscall.EACCES
	case errors.Is(err, objstore.ErrPrecondition):
		return syscall.ESTALE
	case errors.Is(err, objstore.ErrUnsupported):
		return syscall.ENOTSUP
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.As(err, &oe), errors.As(err, &ne), errors.As(err, &ue), errors.As(err, &sce):
		// A backend or transport failure: its inner errno (ECONNREFUSED,
		// ETIMEDOUT, …) is not the file's, so the task sees EIO.
		return syscall.EIO
	case errors.As(err, &e):
		return e
	}
	return syscall.EIO
}
