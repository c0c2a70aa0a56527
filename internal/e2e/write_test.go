package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteOps drives every file operation a pipeline uses through real
// tools, then compares every object in the bucket with a local replay of
// the same script.
func TestWriteOps(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testWriteOps)
}

func testWriteOps(t *testing.T, e *s3env) {
	big := randBytes(t, 12<<20+5)
	src := writeTemp(t, "big.bin", big)
	e.put("exist/old.bin", randBytes(t, 7<<20))
	e.put("exist/keep.txt", []byte("keep me\n"))
	// A tree to untar.
	tree := t.TempDir()
	for i := 0; i < 20; i++ {
		p := filepath.Join(tree, "t", fmt.Sprintf("d%d", i%4), fmt.Sprintf("f%d.txt", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(strings.Repeat(fmt.Sprint(i), 1000+i)), 0o644)
	}
	tarball := filepath.Join(t.TempDir(), "t.tar")
	if out, err := exec.Command("tar", "-cf", tarball, "-C", tree, "t").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	// The same script runs on a local directory (the reference) and on
	// the mount; $R is the root.
	script := `
set -e
mkdir -p $R/o/sub
cp ` + src + ` $R/o/a
echo x >> $R/o/a
mv $R/o/a $R/o/c
ln -s c $R/o/l
mkdir $R/o/e
printf 'hello world\n' > $R/o/w.txt
printf 'HELLO' | dd of=$R/o/w.txt conv=notrunc bs=1 seek=0 2>/dev/null
cp ` + src + ` $R/o/trunc.bin
truncate -s 1000 $R/o/trunc.bin
truncate -s 3000 $R/o/grow.bin
printf 'tail' >> $R/o/grow.bin
echo one > $R/o/gone.txt
rm $R/o/gone.txt
echo moved > $R/o/sub/m.txt
mv $R/o/sub $R/o/sub2
tar -xf ` + tarball + ` -C $R/o
cp $R/exist/old.bin $R/o/copy-of-old.bin
printf 'appended' >> $R/exist/old.bin
mv $R/exist/keep.txt $R/o/kept.txt
sync
`
	ref := t.TempDir()
	os.MkdirAll(filepath.Join(ref, "exist"), 0o755)
	old := e.mustGet("exist/old.bin")
	os.WriteFile(filepath.Join(ref, "exist/old.bin"), old, 0o644)
	os.WriteFile(filepath.Join(ref, "exist/keep.txt"), []byte("keep me\n"), 0o644)
	if out, err := exec.Command("sh", "-c", "R="+ref+"\n"+script).CombinedOutput(); err != nil {
		t.Fatalf("reference run: %v\n%s", err, out)
	}
	r := e.run("R=" + e.path("") + "\n" + script + "\nexit 3")
	if r.code != 3 {
		t.Fatalf("exit %d, want 3\nstderr:\n%s", r.code, r.stderr)
	}
	// Every regular file of the reference must be in the bucket, byte-identical.
	want := map[string]bool{}
	filepath.Walk(ref, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || info.Mode()&os.ModeSymlink != 0 {
			return nil
		}
		rel, _ := filepath.Rel(ref, p)
		want[rel] = true
		b, _ := os.ReadFile(p)
		got, gerr := e.get(rel)
		if gerr != nil {
			t.Errorf("%s missing in bucket: %v", rel, gerr)
		} else if sha(got) != sha(b) {
			t.Errorf("%s differs: %d bytes in bucket, %d expected", rel, len(got), len(b))
		}
		return nil
	})
	keys := e.keys("")
	for _, k := range keys {
		if strings.HasSuffix(k, "/") {
			continue // directory markers
		}
		if !want[k] && k != "o/l" {
			t.Errorf("unexpected object %q in bucket", k)
		}
	}
	joined := " " + strings.Join(keys, " ") + " "
	for _, k := range []string{"o/l", "o/e/"} {
		if !strings.Contains(joined, " "+k+" ") {
			t.Errorf("bucket lacks %q: %v", k, keys)
		}
	}
	for _, k := range []string{"o/a", "o/gone.txt", "exist/keep.txt", "o/sub/m.txt"} {
		if strings.Contains(joined, " "+k+" ") {
			t.Errorf("bucket still has %q after it was moved or removed", k)
		}
	}
	// A second run sees the same tree: symlink, sizes, content.
	out := e.mustRun(fmt.Sprintf("readlink %[1]s/o/l; cat %[1]s/o/l | sha256sum; stat -c %%s %[1]s/o/trunc.bin; cat %[1]s/o/w.txt; ls %[1]s/o/e | wc -l", e.path("")))
	want2 := []string{"c", sha(append(append([]byte{}, big...), 'x', '\n')), "1000", "HELLO world", "0"}
	for _, w := range want2 {
		if !strings.Contains(out, w) {
			t.Errorf("second run: missing %q in\n%s", w, out)
		}
	}
}

// TestPosixErrors checks the error codes of common mistakes.
func TestPosixErrors(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testPosixErrors)
}

func testPosixErrors(t *testing.T, e *s3env) {
	e.put("full/x", []byte("x"))
	out := e.mustRun(fmt.Sprintf(`
R=%s
rmdir $R/full 2>&1 | grep -q 'not empty' && echo rmdir=ENOTEMPTY
mkdir $R/full 2>&1 | grep -q 'exists' && echo mkdir=EEXIST
ln $R/full/x $R/full/hard 2>&1 | grep -qi 'not supported' && echo link=ENOTSUP
cat $R/full/nothing 2>&1 | grep -q 'No such file' && echo cat=ENOENT
mkdir $R/empty && rmdir $R/empty && echo rmdir=ok
test -e $R/empty || echo empty=gone
echo data > $R/full/y && cat $R/full/y
`, e.path("")))
	for _, w := range []string{"rmdir=ENOTEMPTY", "mkdir=EEXIST", "link=ENOTSUP", "cat=ENOENT", "rmdir=ok", "empty=gone", "data"} {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q in\n%s", w, out)
		}
	}
}

// TestReadAfterWrite checks that reads, stat and listings inside the mount
// see a file at once, before it is durable.
func TestReadAfterWrite(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testReadAfterWrite)
}

func testReadAfterWrite(t *testing.T, e *s3env) {
	out := e.mustRun(fmt.Sprintf(`
R=%s
mkdir -p $R/raw
seq 1 100000 > $R/raw/s.txt
echo size=$(stat -c %%s $R/raw/s.txt)
echo "sum=$(sha256sum < $R/raw/s.txt)"
echo ls=$(ls $R/raw)
echo more >> $R/raw/s.txt
echo tail=$(tail -n1 $R/raw/s.txt)
`, e.path("")))
	want, _ := exec.Command("sh", "-c", "seq 1 100000 | sha256sum").Output() // "<hex>  -"
	for _, w := range []string{"size=588895", "sum=" + strings.TrimSpace(string(want)), "ls=s.txt", "tail=more"} {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q in\n%s", w, out)
		}
	}
}
