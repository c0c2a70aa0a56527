// Command containertask is the task TestContainer runs in images that have
// no shell: it copies the file -in to -out (both under /fusion), prints what
// it did and the value of $TASK_MARK, and exits with -exit (2 when the copy
// fails). With -reads N it reads -in N times, each through a new open.
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	in := flag.String("in", "", "file to read")
	out := flag.String("out", "", "file to write")
	code := flag.Int("exit", 0, "exit code after a successful copy")
	reads := flag.Int("reads", 1, "times to read -in (each a new open)")
	flag.Parse()
	var data []byte
	for range *reads {
		b, err := os.ReadFile(*in)
		if err != nil || data != nil && string(b) != string(data) {
			fmt.Fprintln(os.Stderr, "task: read", *in, err)
			os.Exit(2)
		}
		data = b
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "task:", err)
		os.Exit(2)
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "task:", err)
		os.Exit(2)
	}
	fmt.Printf("task: copied %d bytes (sha256 %x) mark=%s\n", len(data), sha256.Sum256(data), os.Getenv("TASK_MARK"))
	os.Exit(*code)
}
