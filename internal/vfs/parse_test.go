package vfs

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

// TestSecurityParse checks that a path can only name a key inside the
// bucket it names: ".", "..", empty components and NUL are rejected
// (the kernel resolves "." and ".." before ferry sees a path, so only a
// caller bypassing it sends them), and over-long names are ENAMETOOLONG.
func TestSecurityParse(t *testing.T) {
	long := strings.Repeat("n", NameMax)
	tests := []struct {
		in   string
		want Loc
		err  error
	}{
		{in: "", want: Loc{}},
		{in: "s3", want: Loc{Scheme: "s3"}},
		{in: "s3/bkt", want: Loc{Scheme: "s3", Bucket: "bkt"}},
		{in: "/s3/bkt/a/b/", want: Loc{Scheme: "s3", Bucket: "bkt", Key: "a/b"}},
		{in: "s3/bkt/100%/a b\nc", want: Loc{Scheme: "s3", Bucket: "bkt", Key: "100%/a b\nc"}},
		{in: "s3/bkt/é€", want: Loc{Scheme: "s3", Bucket: "bkt", Key: "é€"}},
		{in: "s3/bkt/\xff\xfe", err: syscall.EILSEQ},
		{in: "s3/bk\xfft/a", err: syscall.EILSEQ},
		{in: "s3/bkt/" + long, want: Loc{Scheme: "s3", Bucket: "bkt", Key: long}},
		{in: "nope/bkt/x", err: syscall.ENOENT},
		{in: "s3/a", err: syscall.ENOENT},
		{in: "s3/ab/x", err: syscall.ENOENT},
		{in: "s3/a b/x", err: syscall.ENOENT},
		{in: "s3/...", err: syscall.ENOENT},
		{in: "gs/my_bucket.example.com/x", want: Loc{Scheme: "gs", Bucket: "my_bucket.example.com", Key: "x"}},
		{in: "s3/Legacy_Bucket/x", want: Loc{Scheme: "s3", Bucket: "Legacy_Bucket", Key: "x"}},
		{in: "s3/bkt/../other/x", err: syscall.EINVAL},
		{in: "s3/bkt/a/../../other/x", err: syscall.EINVAL},
		{in: "s3/bkt/..", err: syscall.EINVAL},
		{in: "s3/bkt/./x", err: syscall.EINVAL},
		{in: "s3/bkt/a/.", err: syscall.EINVAL},
		{in: "s3/bkt/a//b", err: syscall.EINVAL},
		{in: "s3/../bkt/x", err: syscall.EINVAL},
		{in: "s3/./x", err: syscall.EINVAL},
		{in: "s3/bkt/a\x00b", err: syscall.EINVAL},
		{in: "s3/bk\x00t/a", err: syscall.EINVAL},
		{in: "s3/bkt/" + long + "x", err: syscall.ENAMETOOLONG},
		{in: "s3/bkt/" + strings.Repeat("d/", KeyMax/2) + "x", err: syscall.ENAMETOOLONG},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("Parse(%q) = %+v, %v; want %v", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

// TestBadInputValidName checks the names a listing shows: keys that
// cannot be paths are skipped.
func TestBadInputValidName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"a", true}, {"100%", true}, {"new\nline", true}, {"é", true},
		{strings.Repeat("n", NameMax), true},
		{"\xff", false}, {"", false}, {".", false}, {"..", false}, {"a/b", false}, {"a\x00", false},
		{strings.Repeat("n", NameMax+1), false},
	} {
		if got := validName(tt.name); got != tt.ok {
			t.Errorf("validName(%q) = %v, want %v", tt.name, got, tt.ok)
		}
	}
}
