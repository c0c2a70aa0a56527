package nextflow

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// wrapper renders a .command.run shaped like BashWrapperBuilder's output
// for a Fusion task (contract §4.2), with stage as the body of nxf_stage
// (indented as the template does) and extra header lines.
func wrapper(header, stage string) string {
	var b strings.Builder
	b.WriteString(`#!/bin/bash
NXF_CHDIR=/fusion/s3/bkt/work/3f/9a1c0d
### ---
### name: 'ALIGN (sample 1)'
` + header + `### container: 'quay.io/biocontainers/samtools:1.17'
### outputs:
### - 'out.bam'
### ...
set -e
set -u
NXF_DEBUG=${NXF_DEBUG:=0}; [[ $NXF_DEBUG > 1 ]] && set -x
NXF_ENTRY=${1:-nxf_main}

nxf_sleep() {
  sleep $1 2>/dev/null || sleep 1;
}

nxf_fs_copy() {
  local source=$1
  local target=$2
  local basedir=$(dirname $1)
  mkdir -p $target/$basedir
  cp -fRL $source $target/$basedir
}

on_exit() {
    exit_status=${nxf_main_ret:=$?}
    printf -- $exit_status > /fusion/s3/bkt/work/3f/9a1c0d/.exitcode
    exit $exit_status
}

nxf_launch() {
    /bin/bash -ue /fusion/s3/bkt/work/3f/9a1c0d/.command.sh
}

nxf_stage() {
    true
`)
	for _, l := range strings.Split(strings.TrimRight(stage, "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	b.WriteString(`}

nxf_unstage() {
    true
    [[ ${nxf_main_ret:=0} != 0 ]] && return
}

nxf_main() {
    trap on_exit EXIT
    [[ "${NXF_CHDIR:-}" ]] && cd "$NXF_CHDIR"
    NXF_SCRATCH=''
    touch /fusion/s3/bkt/work/3f/9a1c0d/.command.begin
    export NXF_TASK_WORKDIR="$PWD"
    nxf_stage

    set +e
    (set -o pipefail; (nxf_launch | tee .command.out) 3>&1 1>&2 2>&3 | tee .command.err) &
    pid=$!
    wait $pid || nxf_main_ret=$?
    nxf_unstage
}

$NXF_ENTRY
`)
	return b.String()
}

const workDir = "/fusion/s3/bkt/work/3f/9a1c0d"

func TestParseRunScriptStaging(t *testing.T) {
	sym := func(src, name string) StageInput { return StageInput{Source: src, Name: name, Mode: StageSymlink} }
	tests := []struct {
		name      string
		stage     string
		want      []StageInput
		stageFile string
		skipped   []string // reasons, in order
	}{
		{
			name: "symlink (current Nextflow)",
			stage: `# stage input files
rm -f sample.bam
rm -f sample.bam.bai
ln -s /fusion/s3/bkt/data/sample.bam sample.bam
ln -s /fusion/s3/bkt/data/sample.bam.bai sample.bam.bai`,
			want: []StageInput{sym("/fusion/s3/bkt/data/sample.bam", "sample.bam"), sym("/fusion/s3/bkt/data/sample.bam.bai", "sample.bam.bai")},
		},
		{
			name:  "symlink -sfn (older Nextflow, the contract's example)",
			stage: "# stage input files\nrm -f sample.bam\nln -sfn /fusion/s3/bkt/work/aa/bbcc/sample.bam sample.bam",
			want:  []StageInput{sym("/fusion/s3/bkt/work/aa/bbcc/sample.bam", "sample.bam")},
		},
		{
			name:  "copy",
			stage: "rm -f ref.fa\ncp -fRL /fusion/gs/bkt/ref/ref.fa ref.fa",
			want:  []StageInput{{Source: "/fusion/gs/bkt/ref/ref.fa", Name: "ref.fa", Mode: StageCopy}},
		},
		{
			name:  "rsync",
			stage: "rsync -rRl /fusion/az/ctr/in/x.vcf.gz x.vcf.gz",
			want:  []StageInput{{Source: "/fusion/az/ctr/in/x.vcf.gz", Name: "x.vcf.gz", Mode: StageRsync}},
		},
		{
			name:  "hard link",
			stage: "ln /fusion/s3/bkt/in/a.txt a.txt",
			want:  []StageInput{{Source: "/fusion/s3/bkt/in/a.txt", Name: "a.txt", Mode: StageLink}},
		},
		{
			name:  "rellink is relative to the link's directory",
			stage: "mkdir -p sub && ln -s ../../../../data/x.bam sub/x.bam\nln -s ../../../data/y.bam y.bam",
			want: []StageInput{
				{Source: "/fusion/s3/bkt/data/x.bam", Name: "sub/x.bam", Mode: StageRellink},
				{Source: "/fusion/s3/bkt/data/y.bam", Name: "y.bam", Mode: StageRellink},
			},
		},
		{
			name: "Escape.path of spaces and odd characters",
			stage: `rm -f my\ sample\ \(1\).bam
ln -s /fusion/s3/bkt/in/my\ sample\ \(1\).bam my\ sample\ \(1\).bam
ln -s /fusion/s3/bkt/in/it\'s\ \&\ \"q\".txt it\'s.txt
ln -s /fusion/s3/bkt/in/a\:b\|c\<d\>e\!f\` + "`" + `g.txt odd.txt
ln -s /fusion/s3/bkt/in/ünï-cödé#1.txt u.txt
ln -s '/fusion/s3/bkt/in/single quoted $x.txt' sq.txt
ln -s "/fusion/s3/bkt/in/double \"quoted\".txt" dq.txt`,
			want: []StageInput{
				sym("/fusion/s3/bkt/in/my sample (1).bam", "my sample (1).bam"),
				sym(`/fusion/s3/bkt/in/it's & "q".txt`, "it's.txt"),
				sym("/fusion/s3/bkt/in/a:b|c<d>e!f`g.txt", "odd.txt"),
				sym("/fusion/s3/bkt/in/ünï-cödé#1.txt", "u.txt"),
				sym("/fusion/s3/bkt/in/single quoted $x.txt", "sq.txt"),
				sym(`/fusion/s3/bkt/in/double "quoted".txt`, "dq.txt"),
			},
		},
		{
			name:  "directory input and a nested name",
			stage: "rm -f genome\nln -s /fusion/s3/bkt/ref/genome genome\nmkdir -p reads/r1 && ln -s /fusion/s3/bkt/reads/r1.fq.gz reads/r1/r1.fq.gz",
			want:  []StageInput{sym("/fusion/s3/bkt/ref/genome", "genome"), sym("/fusion/s3/bkt/reads/r1.fq.gz", "reads/r1/r1.fq.gz")},
		},
		{
			name:      ".command.stage",
			stage:     "# stage input files\nbash /fusion/s3/bkt/work/3f/9a1c0d/.command.stage",
			stageFile: "/fusion/s3/bkt/work/3f/9a1c0d/.command.stage",
		},
		{
			name:  "inputs outside the mount are kept for the caller",
			stage: "ln -s /data/local/x.txt x.txt\ncp -fRL relative.txt copy.txt",
			want: []StageInput{
				sym("/data/local/x.txt", "x.txt"),
				{Source: workDir + "/relative.txt", Name: "copy.txt", Mode: StageCopy},
			},
		},
		{
			name: "several sources, -t, --, continuation, separators",
			stage: "cp -fRL /fusion/s3/bkt/a /fusion/s3/bkt/b dir/\nln -s -t dir -- /fusion/s3/bkt/c\n" +
				"ln -s \\\n  /fusion/s3/bkt/d d; ln -s /fusion/s3/bkt/e e || true",
			want: []StageInput{
				{Source: "/fusion/s3/bkt/a", Name: "dir/", Mode: StageCopy},
				{Source: "/fusion/s3/bkt/b", Name: "dir/", Mode: StageCopy},
				sym("/fusion/s3/bkt/c", "dir"),
				sym("/fusion/s3/bkt/d", "d"),
				sym("/fusion/s3/bkt/e", "e"),
			},
		},
		{
			name: "what the parser does not follow is skipped, the rest kept",
			stage: `ln -s $INPUT_DIR/x.bam x.bam
ln -s /fusion/s3/bkt/in/*.bam .
ln -s /fusion/s3/bkt/in/{a,b}.txt .
ln -s "/fusion/s3/bkt/$(date)" d
ln -s ~/x x
curl -o x https://example.com/x
cat /fusion/s3/bkt/in/a | gzip > a.gz
ln -s /fusion/s3/bkt/in/ok.txt ok.txt
ln -s
bash /fusion/s3/bkt/other.sh`,
			want: []StageInput{sym("/fusion/s3/bkt/in/ok.txt", "ok.txt")},
			skipped: []string{"has a $variable", "has a glob", "has a brace expansion", "has a $variable", "has a ~ expansion",
				`unknown command "curl"`, "uses a pipe", "no source and name", "runs a script that is not .command.stage"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := ParseRunScript(strings.NewReader(wrapper("", tc.stage)), workDir)
			if err != nil {
				t.Fatal(err)
			}
			if !rs.Stage.Found {
				t.Fatal("nxf_stage not found")
			}
			if !reflect.DeepEqual(rs.Stage.Inputs, tc.want) {
				t.Errorf("inputs:\n got %q\nwant %q", rs.Stage.Inputs, tc.want)
			}
			if rs.Stage.StageFile != tc.stageFile {
				t.Errorf("stage file %q, want %q", rs.Stage.StageFile, tc.stageFile)
			}
			var reasons []string
			for _, s := range rs.Stage.Skipped {
				reasons = append(reasons, s.Reason)
				if s.Line < 38 || s.Line > 60 { // the lines of nxf_stage in wrapper()
					t.Errorf("skipped %q at line %d, not in nxf_stage", s.Text, s.Line)
				}
			}
			if !reflect.DeepEqual(reasons, tc.skipped) {
				t.Errorf("skipped:\n got %q\nwant %q", reasons, tc.skipped)
			}
		})
	}
}

func TestParseRunScriptMalformed(t *testing.T) {
	tests := []struct {
		name, script string
		wantErr      bool
		found        bool
	}{
		{name: "unterminated quote", script: wrapper("", "ln -s '/fusion/s3/bkt/x x"), wantErr: true, found: true},
		{name: "no nxf_stage", script: "#!/bin/bash\necho hello\nln -s /fusion/s3/bkt/x x\n"},
		{name: "empty", script: ""},
		{name: "binary junk", script: "\x00\x01\xff\xfe{{{}}}\n", found: false},
		{name: "unclosed function", script: "nxf_stage() {\n  ln -s /fusion/s3/bkt/x x\n", found: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := ParseRunScript(strings.NewReader(tc.script), workDir)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && rs.Stage.Found != tc.found {
				t.Errorf("found = %v, want %v", rs.Stage.Found, tc.found)
			}
		})
	}
	if _, err := ParseRunScript(iotest.ErrReader(errTest), workDir); err == nil {
		t.Error("a read error is not reported")
	}
}

var errTest = errorString("boom")

type errorString string

func (e errorString) Error() string { return string(e) }

func TestParseStageScript(t *testing.T) {
	var b strings.Builder
	b.WriteString("# stage input files\n")
	var want []StageInput
	for i := range 3000 { // large enough for Nextflow to write a .command.stage
		name := "chunk " + strings.Repeat("x", i%7) + "_" + strconv.Itoa(i) + ".fq"
		esc := strings.ReplaceAll(name, " ", `\ `)
		b.WriteString("rm -f " + esc + "\nln -s /fusion/s3/bkt/chunks/" + esc + " " + esc + "\n")
		want = append(want, StageInput{Source: "/fusion/s3/bkt/chunks/" + name, Name: name, Mode: StageSymlink})
	}
	st, err := ParseStageScript(strings.NewReader(b.String()), workDir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Inputs, want) || len(st.Skipped) != 0 || !st.Found {
		t.Errorf("got %d inputs (%d skipped), want %d", len(st.Inputs), len(st.Skipped), len(want))
	}
}

func TestArrayHeader(t *testing.T) {
	header := "### array:\n###   index-name: AWS_BATCH_JOB_ARRAY_INDEX\n###   index-start: 1\n###   work-dirs:\n" +
		"###   - s3://bkt/work/aa/11\n###   - s3://bkt/work/bb/22\\ x\n###   - gs://bkt/work/cc/33\n"
	// The array's own .command.run stages nothing: its .command.sh picks
	// the child work dir from the index variable.
	rs, err := ParseRunScript(strings.NewReader(wrapper(header, "")), workDir)
	if err != nil {
		t.Fatal(err)
	}
	want := ArrayHeader{IndexName: "AWS_BATCH_JOB_ARRAY_INDEX", IndexStart: 1,
		WorkDirs: []string{"s3://bkt/work/aa/11", "s3://bkt/work/bb/22 x", "gs://bkt/work/cc/33"}}
	if !reflect.DeepEqual(rs.Array, want) {
		t.Fatalf("array = %+v, want %+v", rs.Array, want)
	}
	if len(rs.Stage.Inputs) != 0 || len(rs.Stage.Skipped) != 0 {
		t.Errorf("an array's own script stages %v (skipped %v)", rs.Stage.Inputs, rs.Stage.Skipped)
	}
	tests := []struct {
		index   string
		want    Location
		wantErr bool
	}{
		{index: "1", want: Location{Scheme: "s3", Bucket: "bkt", Key: "work/aa/11/.command.run"}},
		{index: "2", want: Location{Scheme: "s3", Bucket: "bkt", Key: "work/bb/22 x/.command.run"}},
		{index: " 3 ", want: Location{Scheme: "gs", Bucket: "bkt", Key: "work/cc/33/.command.run"}},
		{index: "0", wantErr: true},
		{index: "4", wantErr: true},
		{index: "", wantErr: true},
		{index: "x", wantErr: true},
	}
	for _, tc := range tests {
		got, err := rs.Array.ChildRunScript(func(k string) string {
			if k == "AWS_BATCH_JOB_ARRAY_INDEX" {
				return tc.index
			}
			return ""
		})
		if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
			t.Errorf("index %q: %+v, %v", tc.index, got, err)
		}
	}
}
