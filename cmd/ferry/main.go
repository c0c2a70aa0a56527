package main

import (
	"context"
	"os"

	"github.com/ferry-fs/ferry/internal/cli"
)

func main() {
	// Signals are handled by the supervisor (forwarded to the task); the
	// context is only for programmatic cancellation.
	code := cli.Main(context.Background(), os.Args, cli.IO{Stdout: os.Stdout, Stderr: os.Stderr})
	os.Exit(code)
}
