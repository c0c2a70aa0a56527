package cli

import (
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
)

func TestSetMemoryLimit(t *testing.T) {
	orig := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(orig) })
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name      string
		limit     int64
		gomemlim  string
		wantLimit int64
	}{
		{name: "default", limit: 96 << 20, wantLimit: 96 << 20},
		{name: "off", limit: 0, wantLimit: math.MaxInt64},
		{name: "GOMEMLIMIT wins", limit: 96 << 20, gomemlim: "1GiB", wantLimit: math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			setMemoryLimit(tc.limit, func(k string) string {
				if k == "GOMEMLIMIT" {
					return tc.gomemlim
				}
				return ""
			}, log)
			if got := debug.SetMemoryLimit(-1); got != tc.wantLimit {
				t.Errorf("memory limit = %d, want %d", got, tc.wantLimit)
			}
		})
	}
}

func TestSetGCPercent(t *testing.T) {
	orig := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	for _, tc := range []struct {
		name, gogc string
		want       int
	}{
		{name: "default", want: gcPercent},
		{name: "GOGC wins", gogc: "200", want: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			setGCPercent(func(k string) string {
				if k == "GOGC" {
					return tc.gogc
				}
				return ""
			})
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Errorf("GC percent = %d, want %d", got, tc.want)
			}
		})
	}
}
