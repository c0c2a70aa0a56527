package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// commandRun is a Nextflow-shaped .command.run (after BashWrapperBuilder):
// header with declared outputs, staging by symlink, .command.out/.err tees,
// .exitcode written last by on_exit.
const commandRun = `#!/bin/bash
NXF_CHDIR=%[1]s
### ---
### name: 'FILTER (s1)'
### outputs:
### - 'result.txt'
### - 'linked_*.bam'
### - 'outdir'
### ...
set -e
set -u
on_exit() { exit_status=${nxf_main_ret:=$?}; printf -- $exit_status > %[1]s/.exitcode; exit $exit_status; }
nxf_launch() { /bin/bash -ue %[1]s/.command.sh; }
nxf_stage() {
    rm -f input.bam
    ln -sfn %[2]s input.bam
}
nxf_main() {
    trap on_exit EXIT
    [[ "${NXF_CHDIR:-}" ]] && cd "$NXF_CHDIR"
    touch %[1]s/.command.begin
    nxf_stage
    (set -o pipefail; (nxf_launch | tee .command.out) 3>&1 1>&2 2>&3 | tee .command.err) 3>&1 1>&2 2>&3 &
    pid=$!; wait $pid || nxf_main_ret=$?
}
nxf_main
`

const commandSh = `#!/bin/bash -ue
echo "hello from the task"
echo "to stderr" >&2
cat input.bam | wc -c > result.txt
ln -s input.bam linked_1.bam
ln -s input.bam notdeclared.bam
mkdir -p real && echo inside > real/f.txt
ln -s real outdir
exit 3
`

// TestNextflowTask runs a Nextflow-shaped task through "fusion": the
// work-dir contract (.command.log, .exitcode last, trace.json, tags,
// symlink compaction of declared outputs).
func TestNextflowTask(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	input := randBytes(t, 3<<20+7)
	e.put("inputs/sample.bam", input)
	work := "work/3f/9a1c0d"
	wd := e.path(work)
	e.put(work+"/.command.run", []byte(fmt.Sprintf(commandRun, wd, e.path("inputs/sample.bam"))))
	e.put(work+"/.command.sh", []byte(commandSh))
	fusion := filepath.Join(t.TempDir(), "fusion")
	if err := os.Symlink(ferryBin, fusion); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, fusion, fusion, "bash", wd+"/.command.run")
	cmd.Env = append(append([]string{}, e.env...),
		"FERRY_MOUNT_POINT="+e.mnt, "FUSION_CACHE_LOCATION="+e.cache, "FUSION_WORK="+wd,
		"FUSION_TAGS=[.command.*|.exitcode|.fusion.*](nextflow.io/metadata=true),[*](nextflow.io/temporary=true)",
		"FUSION_LICENSE_TOKEN=x", "FUSION_SOMETHING_NEW=1")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("exit %d, want 3\n%s", code, out)
	}
	if !strings.Contains(string(out), "hello from the task") {
		t.Errorf("task output not echoed:\n%s", out)
	}
	// .command.log holds the combined output.
	log := string(e.mustGet(work + "/.command.log"))
	if !strings.Contains(log, "hello from the task") || !strings.Contains(log, "to stderr") {
		t.Errorf(".command.log = %q", log)
	}
	if got := string(e.mustGet(work + "/.exitcode")); got != "3" {
		t.Errorf(".exitcode = %q", got)
	}
	if got := strings.TrimSpace(string(e.mustGet(work + "/result.txt"))); got != fmt.Sprint(len(input)) {
		t.Errorf("result.txt = %q", got)
	}
	// Declared symlink outputs became real copies; others stay links.
	if got := e.mustGet(work + "/linked_1.bam"); sha(got) != sha(input) {
		t.Errorf("linked_1.bam is not a copy of its target (%d bytes)", len(got))
	}
	if got := e.mustGet(work + "/outdir/f.txt"); string(got) != "inside\n" {
		t.Errorf("outdir/f.txt = %q", got)
	}
	if info, err := e.stat(work + "/notdeclared.bam"); err != nil || info.Size != 0 || info.Metadata["ferry-symlink"] == "" {
		t.Errorf("notdeclared.bam should stay a link object: %+v %v", info, err)
	}
	// trace.json parses and has the proc block.
	var trace map[string]any
	if err := json.Unmarshal(e.mustGet(work+"/.fusion/trace.json"), &trace); err != nil {
		t.Errorf("trace.json: %v", err)
	} else if _, ok := trace["proc"]; !ok {
		t.Errorf("trace.json lacks proc: %v", trace)
	}
	var sum map[string]any
	if err := json.Unmarshal(e.mustGet(work+"/.fusion/summary.json"), &sum); err != nil || sum["exit_code"] != float64(3) {
		t.Errorf("summary.json: %v %v", sum, err)
	}
	if _, err := e.stat(work + "/.fusion.log"); err != nil {
		t.Errorf(".fusion.log missing: %v", err)
	}
	// .exitcode became durable after every other output of the work dir.
	exitInfo, _ := e.stat(work + "/.exitcode")
	for _, k := range []string{"result.txt", ".command.out", ".command.err", ".command.begin", "linked_1.bam"} {
		info, err := e.stat(work + "/" + k)
		if err != nil {
			t.Errorf("%s missing: %v", k, err)
			continue
		}
		if info.ModTime.After(exitInfo.ModTime) {
			t.Errorf("%s (%v) became durable after .exitcode (%v)", k, info.ModTime, exitInfo.ModTime)
		}
	}
	// Tags: metadata files vs the rest.
	for key, want := range map[string]string{work + "/.exitcode": "nextflow.io/metadata", work + "/result.txt": "nextflow.io/temporary"} {
		resp, err := e.srv.Do(context.Background(), "GET", "/"+e.bucket+"/"+key, url.Values{"tagging": {""}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 4096)
		n, _ := resp.Body.Read(b)
		resp.Body.Close()
		if !strings.Contains(string(b[:n]), want) {
			t.Errorf("tags of %s: %s", key, b[:n])
		}
	}
}

// TestNextflowMissingScript checks exit 127 when .command.sh never appears.
func TestNextflowMissingScript(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	wd := e.path("work/aa/missing")
	e.put("work/aa/missing/.command.run", []byte("#!/bin/bash\necho never\n"))
	fusion := filepath.Join(t.TempDir(), "fusion")
	os.Symlink(ferryBin, fusion)
	cmd := exec.Command(fusion, "bash", wd+"/.command.run")
	cmd.Env = append(append([]string{}, e.env...), "FERRY_MOUNT_POINT="+e.mnt, "FUSION_CACHE_LOCATION="+e.cache,
		"FUSION_WORK="+wd, "FUSION_MAX_MOUNT_RETRIES=2")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 127 {
		t.Fatalf("exit %d, want 127\n%s", code, out)
	}
}
