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

// Header is what ferry uses of the metadata header of a .command.run
// (BashWrapperBuilder.getTaskMetadata):
//
//	### ---
//	### name: 'FOO (1)'
//	### array:
//	###   index-name: AWS_BATCH_JOB_ARRAY_INDEX
//	###   index-start: 0
//	###   work-dirs:
//	###   - s3://bucket/work/aa/bb
//	### container: 'image'
//	### outputs:
//	### - 'sample_filtered*.bam'
//	### - 'dir/*.txt'
//	### ...
type Header struct {
	// Outputs are the output glob patterns, in order (outer single quotes
	// removed; Nextflow does not escape inner ones).
	Outputs []string
	// ArrayWorkDirs are the work dirs of a job array's tasks (only in the
	// array's own .command.run), as written: URIs such as s3://b/work/aa.
	ArrayWorkDirs []string
}

// ParseHeader parses the header at the top of a .command.run. A script
// without a header gives a zero Header and no error; the error is a read
// error. Reading stops at "### ...".
func ParseHeader(r io.Reader) (Header, error) {
	br := bufio.NewReader(io.LimitReader(r, maxHeaderBytes))
	var (
		h          Header
		inHeader   bool
		block      string // "outputs", "work-dirs" or ""
		lineNumber int
	)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			lineNumber++
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "### ---":
				inHeader, block = true, ""
			case !inHeader:
			case line == "### ...":
				return h, nil
			case line == "### outputs:":
				block = "outputs"
			case line == "###   work-dirs:":
				block = "work-dirs"
			case block == "outputs" && strings.HasPrefix(line, "### - "):
				if p := unquote(strings.TrimSpace(strings.TrimPrefix(line, "### - "))); p != "" {
					h.Outputs = append(h.Outputs, p)
				}
			case block == "work-dirs" && strings.HasPrefix(line, "###   - "):
				if d := unescape(strings.TrimSpace(strings.TrimPrefix(line, "###   - "))); d != "" {
					h.ArrayWorkDirs = append(h.ArrayWorkDirs, d)
				}
			default:
				block = ""
			}
		}
		if err == io.EOF {
			return h, nil
		}
		if err != nil {
			return Header{}, fmt.Errorf("reading %s header (line %d): %w", CommandRun, lineNumber, err)
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

// unescape undoes Nextflow's Escape.path (a backslash before special
// characters).
func unescape(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ReadHeader reads the header of the .command.run at key through st.
// Errors are the store's (errors.Is(err, objstore.ErrNotFound) when the
// script is missing) or read errors.
func ReadHeader(ctx context.Context, st objstore.Store, key string) (Header, error) {
	rd, err := st.NewReader(ctx, key, 0, maxHeaderBytes, objstore.ReadOptions{})
	if err != nil {
		return Header{}, err
	}
	defer rd.Close()
	return ParseHeader(rd)
}

// ParseURI maps a work-dir URI (s3://bucket/key, gs://…, az://container/…)
// to its location; ok is false for other schemes or without a bucket.
func ParseURI(uri string) (Location, bool) {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return Location{}, false
	}
	switch scheme {
	case "s3", "gs", "az":
	default:
		return Location{}, false
	}
	bucket, key, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return Location{}, false
	}
	return Location{Scheme: scheme, Bucket: bucket, Key: strings.Trim(path.Clean("/"+key), "/")}, true
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
