package vfs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

func TestErrno(t *testing.T) {
	tests := []struct {
		err  error
		want syscall.Errno
	}{
		{err: nil, want: 0},
		{err: syscall.ENOTEMPTY, want: syscall.ENOTEMPTY},
		{err: fmt.Errorf("x: %w", syscall.EXDEV), want: syscall.EXDEV},
		{err: &objstore.Error{Kind: objstore.ErrNotFound}, want: syscall.ENOENT},
		{err: objstore.ErrNoBucket, want: syscall.ENOENT},
		{err: &objstore.Error{Kind: objstore.ErrPermission, Status: 403}, want: syscall.EACCES},
		{err: &objstore.Error{Kind: objstore.ErrPrecondition}, want: syscall.ESTALE},
		{err: objstore.ErrUnsupported, want: syscall.ENOTSUP},
		{err: context.Canceled, want: syscall.EINTR},
		{err: context.DeadlineExceeded, want: syscall.EIO},
		{err: &objstore.Error{Status: 503, Kind: objstore.ErrThrottled}, want: syscall.EIO},
		{err: errors.New("dial tcp 127.0.0.1:1: connection refused"), want: syscall.EIO},
		{err: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, want: syscall.EIO},
		{err: &objstore.Error{Op: "List", Err: &url.Error{Op: "Get", Err: syscall.ECONNREFUSED}}, want: syscall.EIO},
		{err: fmt.Errorf("giving up: %w", &objstore.Error{Err: syscall.ETIMEDOUT}), want: syscall.EIO},
	}
	for _, tt := range tests {
		if got := Errno(tt.err); got != tt.want {
			t.Errorf("Errno(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
