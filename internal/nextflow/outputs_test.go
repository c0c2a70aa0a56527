package nextflow

import (
	"bytes"
	"context"
	"errors"
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
###   - s3://my-bucket/work/cc/dd
### container: 'wave.seqera.io/wt/xyz/samtools:1.17'
### outputs:
### - 'sample_filtered*.bam'
### - 'dir/*.txt'
### - 'it's.txt'
### ...
set -e
### - 'not-an-output'
`

func TestParseOutputs(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{name: "nextflow header", in: commandRun, want: []string{"sample_filtered*.bam", "dir/*.txt", "it's.txt"}},
		{name: "crlf and no end marker", in: "### ---\r\n### outputs:\r\n### - 'a'\r\n### - b\r\n", want: []string{"a", "b"}},
		{name: "block ends at another key", in: "### ---\n### outputs:\n### - 'a'\n### container: 'x'\n### - 'b'\n### ...\n", want: []string{"a"}},
		{name: "no outputs", in: "#!/bin/bash\n### ---\n### name: 'x'\n### ...\n### outputs:\n### - 'late'\n", want: nil},
		{name: "no header", in: "#!/bin/bash\n### outputs:\n### - 'a'\n", want: nil},
		{name: "empty", in: "", want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseOutputs(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseOutputsReadError(t *testing.T) {
	boom := errors.New("boom")
	r := iotest.TimeoutReader(strings.NewReader("### ---\n### outputs:\n"))
	_, err := ParseOutputs(readerThenErr{r: r, err: boom})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

type readerThenErr struct {
	r   interface{ Read([]byte) (int, error) }
	err error
}

func (r readerThenErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil {
		return n, r.err
	}
	return n, nil
}

func TestReadOutputs(t *testing.T) {
	ctx := context.Background()
	st := mem.New(mem.Options{})
	body := []byte(commandRun)
	if _, err := st.Put(ctx, "work/3f/.command.run", bytes.NewReader(body), int64(len(body)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadOutputs(ctx, st, "work/3f/.command.run")
	if err != nil || len(got) != 3 {
		t.Fatalf("ReadOutputs = %q, %v", got, err)
	}
	if _, err := ReadOutputs(ctx, st, "work/none/.command.run"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing script: err = %v, want ErrNotFound", err)
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
