package nextflow

import (
	"errors"
	"io"
	"os"
	"sync"
)

// CmdLog collects the task's combined stdout and stderr in a local file
// (later uploaded as .command.log) while echoing each stream to a writer
// of the caller (ferry's own stdout/stderr, so that container logs keep
// working). Writes from both streams are serialized, so lines keep their
// arrival order in the file.
//
// A failing log file or echo writer never fails the task's write: the
// task must not see EPIPE or EIO because of our bookkeeping. The first
// file error is reported by Close.
type CmdLog struct {
	path string

	mu     sync.Mutex // guards f and err
	f      *os.File   // nil once closed; guarded by mu
	err    error      // first write error; guarded by mu
	closed bool       // guarded by mu
}

// CreateCmdLog creates (truncates) the log file at path, mode 0600.
func CreateCmdLog(path string) (*CmdLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	return &CmdLog{path: path, f: f}, nil
}

// Path returns the local file's path.
func (c *CmdLog) Path() string { return c.path }

// Tee returns a writer for one of the task's streams: what is written
// goes to the log file and then to echo (nil: nowhere). It always reports
// len(p), nil.
func (c *CmdLog) Tee(echo io.Writer) io.Writer {
	return &teeWriter{log: c, echo: echo}
}

func (c *CmdLog) write(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil || c.err != nil {
		return
	}
	if _, err := c.f.Write(p); err != nil {
		c.err = err
	}
}

// Close closes the file; later writes only echo. It returns the first
// write error and the close error, joined; closing twice returns nil.
func (c *CmdLog) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.f.Close()
	c.f = nil
	return errors.Join(c.err, err)
}

type teeWriter struct {
	log  *CmdLog
	echo io.Writer
}

func (t *teeWriter) Write(p []byte) (int, error) {
	t.log.write(p)
	if t.echo != nil {
		_, _ = t.echo.Write(p) // a closed stdout must not kill the task
	}
	return len(p), nil
}
