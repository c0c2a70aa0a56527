package nextflow

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// commandRun is shaped like BashWrapperBuilder's output for a Fusion task
// (contract §4.2), with an array block before the outputs.
const commandRun = `#!/bin/bash
#SBATCH -J nf-FOO
NXF_CHDIR=/fusion/s3/my-bucket/work/3f/9a1c0d
### ---
### name: 'FILTER_READS (sample1)'
### array:
###   index-name: AWS_BATCH_JOB_ARRAY_INDEX
###   index-start: 0
###   work-dirs:
###   - s3://my-bucket/work/aa/bb
###   - s3://my-bucket/work/cc\ dd
### container: 'wave.seqera.io/wt/xyz/samtools:1.17'
### outputs:
### - 'sample_filtered*.bam'
### - 'dir/*.txt'
### - 'it's.txt'
### ...
set -e
### - 'not-an-output'
`

func TestParseHeader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Header
	}{
		{name: "nextflow header", in: commandRun, want: Header{
			Outputs:       []string{"sample_filtered*.bam", "dir/*.txt", "it's.txt"},
			ArrayWorkDirs: []string{"s3://my-bucket/work/aa/bb", "s3://my-bucket/work/cc dd"},
		}},
		{name: "crlf and no end marker", in: "### ---\r\n### outputs:\r\n### - 'a'\r\n### - b\r\n", want: Header{Outputs: []string{"a", "b"}}},
		{name: "block ends at another key", in: "### ---\n### outputs:\n### - 'a'\n### container: 'x'\n### - 'b'\n### ...\n", want: Header{Outputs: []string{"a"}}},
		{name: "array dirs are not outputs", in: "### ---\n###   work-dirs:\n###   - gs://b/w\n### outputs:\n### - 'x'\n###   - gs://b/v\n### ...\n",
			want: Header{Outputs: []string{"x"}, ArrayWorkDirs: []string{"gs://b/w"}}},
		{name: "no outputs", in: "#!/bin/bash\n### ---\n### name: 'x'\n### ...\n### outputs:\n### - 'late'\n"},
		{name: "no header", in: "#!/bin/bash\n### outputs:\n### - 'a'\n"},
		{name: "empty", in: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHeader(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseHeaderReadError(t *testing.T) {
	boom := errors.New("boom")
	_, err := ParseHeader(io.MultiReader(strings.NewReader("### ---\n### outputs:\n"), iotest.ErrReader(boom)))
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

func TestReadHeader(t *testing.T) {
	ctx := context.Background()
	st := mem.New(mem.Options{})
	body := []byte(commandRun)
	if _, err := st.Put(ctx, "work/3f/.command.run", bytes.NewReader(body), int64(len(body)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadHeader(ctx, st, "work/3f/.command.run")
	if err != nil || len(got.Outputs) != 3 {
		t.Fatalf("ReadHeader = %+v, %v", got, err)
	}
	if _, err := ReadHeader(ctx, st, "work/none/.command.run"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing script: err = %v, want ErrNotFound", err)
	}
}

func TestParseURI(t *testing.T) {
	tests := []struct {
		in   string
		want Location
		ok   bool
	}{
		{in: "s3://b/work/aa/bb", want: Location{Scheme: "s3", Bucket: "b", Key: "work/aa/bb"}, ok: true},
		{in: "gs://b/work/aa/", want: Location{Scheme: "gs", Bucket: "b", Key: "work/aa"}, ok: true},
		{in: "az://c", want: Location{Scheme: "az", Bucket: "c"}, ok: true},
		{in: "file:///tmp/x"},
		{in: "s3:///x"},
		{in: "/fusion/s3/b/x"},
	}
	for _, tc := range tests {
		got, ok := ParseURI(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseURI(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestLaunchScript(t *testing.T) {
	run := Location{Scheme: "s3", Bucket: "b", Key: "work/ab/cd/.command.run"}
	tests := []struct {
		name string
		argv []string
		want Location
		ok   bool
	}{
		{name: "nextflow form", argv: []string{"bash", "/fusion/s3/b/work/ab/cd/.command.run"}, want: run, ok: true},
		{name: "absolute bash with options", argv: []string{"/bin/bash", "-ue", "/fusion/s3/b/work/ab/cd/.command.run"}, want: run, ok: true},
		{name: "sh", argv: []string{"sh", "/fusion/s3/b/work/ab/cd/.command.run", "nxf_trace"}, want: run, ok: true},
		{name: "other script", argv: []string{"bash", "/fusion/s3/b/work/ab/cd/run.sh"}},
		{name: "bash -c", argv: []string{"bash", "-c", "echo /fusion/s3/b/.command.run"}},
		{name: "other command", argv: []string{"python", "/fusion/s3/b/work/.command.run"}},
		{name: "outside the mount", argv: []string{"bash", "/tmp/.command.run"}},
		{name: "bare", argv: []string{"bash"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := LaunchScript(tc.argv, "/fusion")
			if ok != tc.ok || got != tc.want {
				t.Fatalf("LaunchScript = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
	if got := CommandScriptOf(run); got.Key != "work/ab/cd/.command.sh" {
		t.Errorf("CommandScriptOf = %+v", got)
	}
	if got := CommandScriptOf(Location{Scheme: "s3", Bucket: "b", Key: ".command.run"}); got.Key != ".command.sh" {
		t.Errorf("CommandScriptOf at the root = %+v", got)
	}
}
