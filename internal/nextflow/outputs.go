package nextflow

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// maxHeaderBytes bounds how much of .command.run is read looking for the
// header (it is at the top; the rest can be a megabyte-sized stage script).
const maxHeaderBytes = 8 << 20

// ParseOutputs returns the patterns of the "### outputs:" block in the
// metadata header of a .command.run (BashWrapperBuilder.getTaskMetadata):
//
//	### ---
//	### name: 'FOO (1)'
//	### outputs:
//	### - 'sample_filtered*.bam'
//	### - 'dir/*.txt'
//	### ...
//
// Each "### - 'pattern'" line gives one pattern (the outer single quotes
// are removed; Nextflow does not escape inner ones). The block ends at the
// first line of another shape; reading stops at "### ...". A script
// without a header or without outputs gives nil patterns and no error;
// the error is a read error.
func ParseOutputs(r io.Reader) ([]string, error) {
	br := bufio.NewReader(io.LimitReader(r, maxHeaderBytes))
	var (
		out        []string
		inHeader   bool
		inOutputs  bool
		lineNumber int
	)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			lineNumber++
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "### ---":
				inHeader, inOutputs = true, false
			case !inHeader:
			case line == "### ...":
				return out, nil
			case line == "### outputs:":
				inOutputs = true
			case inOutputs && strings.HasPrefix(line, "### - "):
				if p := unquote(strings.TrimSpace(strings.TrimPrefix(line, "### - "))); p != "" {
					out = append(out, p)
				}
			default:
				inOutputs = false
			}
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s header (line %d): %w", CommandRun, lineNumber, err)
		}
	}
}

func unquote(s string) string {
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		return s[1 : len(s)-1]
	}
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}

// ReadOutputs reads the output patterns of the .command.run at key
// through st. Errors are the store's (errors.Is(err, objstore.ErrNotFound)
// when the script is missing) or read errors.
func ReadOutputs(ctx context.Context, st objstore.Store, key string) ([]string, error) {
	rd, err := st.NewReader(ctx, key, 0, maxHeaderBytes, objstore.ReadOptions{})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return ParseOutputs(rd)
}

// LaunchScript finds the Nextflow launcher in a task command: argv of the
// form "bash [options] <mount>/<scheme>/<bucket>/<dir>/.command.run …"
// (also "sh"). It returns the location of that .command.run; ok is false
// for any other command.
func LaunchScript(argv []string, mountPoint string) (Location, bool) {
	if len(argv) < 2 {
		return Location{}, false
	}
	switch path.Base(argv[0]) {
	case "bash", "sh":
	default:
		return Location{}, false
	}
	for _, a := range argv[1:] {
		if strings.HasPrefix(a, "-") {
			continue // bash options such as -ue
		}
		if !strings.HasSuffix(a, launcherArg) {
			return Location{}, false
		}
		l, err := ParsePath(a, mountPoint)
		if err != nil || l.Key == "" {
			return Location{}, false
		}
		return l, true
	}
	return Location{}, false
}

// CommandScriptOf returns the .command.sh beside the .command.run at run.
func CommandScriptOf(run Location) Location {
	return Location{Scheme: run.Scheme, Bucket: run.Bucket, Key: path.Join(path.Dir(run.Key), CommandSh)}
}
