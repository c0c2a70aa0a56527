// Package archtest holds no code: its test enforces the import rules of
// DESIGN.md §2 with `go list`, so a layer cannot quietly reach past its
// neighbours (vfs must not import go-fuse, drivers are the only importers
// of their SDK, and so on).
package archtest
