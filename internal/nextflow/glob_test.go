package nextflow

import (
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern string
		yes     []string
		no      []string
	}{
		{pattern: "out.txt", yes: []string{"out.txt"}, no: []string{"out.txtx", "a/out.txt", "outXtxt"}},
		{pattern: "*.bam", yes: []string{"a.bam", ".bam", ".hidden.bam"}, no: []string{"a.bai", "d/a.bam", "a.bam/x"}},
		{pattern: "sample_filtered*.bam", yes: []string{"sample_filtered.bam", "sample_filtered_1.bam"}, no: []string{"sample.bam"}},
		{pattern: "?.txt", yes: []string{"a.txt"}, no: []string{"ab.txt", "/.txt"}},
		{pattern: "**.txt", yes: []string{"a.txt", "d/e/a.txt"}, no: []string{"a.tsv"}},
		{pattern: "**/x", yes: []string{"a/x", "a/b/x"}, no: []string{"x", "a/y"}},
		{pattern: "dir/*.txt", yes: []string{"dir/a.txt"}, no: []string{"dir/sub/a.txt", "a.txt", "dir2/a.txt"}},
		{pattern: "*.{bam,bai}", yes: []string{"x.bam", "x.bai"}, no: []string{"x.cram", "x.{bam,bai}"}},
		{pattern: "{a,b/c}*", yes: []string{"a1", "b/c2"}, no: []string{"b/d"}},
		{pattern: "{a,{b,c}}.x", yes: []string{"a.x", "b.x", "c.x"}, no: []string{"d.x"}},
		{pattern: "[ab]*", yes: []string{"a", "b1"}, no: []string{"c"}},
		{pattern: "[!ab]*", yes: []string{"c1"}, no: []string{"a1", "/x"}},
		{pattern: "[^ab]", yes: []string{"c"}, no: []string{"a"}},
		{pattern: "[a-c]x", yes: []string{"bx"}, no: []string{"dx"}},
		{pattern: "[]a]", yes: []string{"]", "a"}, no: []string{"b"}},
		{pattern: "[-a]", yes: []string{"-"}, no: []string{"b"}},
		{pattern: `a\*b`, yes: []string{"a*b"}, no: []string{"axb"}},
		{pattern: "a.b(c)+", yes: []string{"a.b(c)+"}, no: []string{"aXb(c)+", "a.bc"}},
		{pattern: "x}", yes: []string{"x}"}},
		{pattern: "a,b", yes: []string{"a,b"}, no: []string{"a"}},
	}
	for _, tc := range tests {
		g, err := CompileGlob(tc.pattern)
		if err != nil {
			t.Fatalf("CompileGlob(%q): %v", tc.pattern, err)
		}
		for _, s := range tc.yes {
			if !g.Match(s) {
				t.Errorf("%q should match %q", tc.pattern, s)
			}
		}
		for _, s := range tc.no {
			if g.Match(s) {
				t.Errorf("%q should not match %q", tc.pattern, s)
			}
		}
	}
}

func TestGlobCompileErrors(t *testing.T) {
	tests := []struct{ pattern, errHas string }{
		{pattern: "{a,b", errHas: "unterminated {group}"},
		{pattern: "[ab", errHas: "unterminated [class]"},
		{pattern: "[a/b]", errHas: "names '/'"},
		{pattern: "[]", errHas: "unterminated [class]"},
	}
	for _, tc := range tests {
		_, err := CompileGlob(tc.pattern)
		if err == nil || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("CompileGlob(%q) = %v, want error containing %q", tc.pattern, err, tc.errHas)
		}
	}
}

func TestGlobMatchPrefix(t *testing.T) {
	tests := []struct {
		pattern string
		dir     string
		want    bool
	}{
		{pattern: "*.txt", dir: "d", want: false},
		{pattern: "dir/*.txt", dir: "dir", want: true},
		{pattern: "dir/*.txt", dir: "other", want: false},
		{pattern: "dir/*.txt", dir: "dir/sub", want: false},
		{pattern: "d*/x/*.txt", dir: "dab/x", want: true},
		{pattern: "d*/x/*.txt", dir: "dab", want: true},
		{pattern: "d*/x/*.txt", dir: "dab/y", want: false},
		{pattern: "**/x", dir: "a/b/c", want: true},
		{pattern: "a/**", dir: "a/b", want: true},
		{pattern: "a/**", dir: "b", want: false},
		{pattern: "{a,b/c}/*.txt", dir: "b/c", want: true},
		{pattern: "{a,b/c}/*.txt", dir: "b", want: true},
		{pattern: "{a,b/c}/*.txt", dir: "c", want: false},
		{pattern: "out", dir: "out", want: false}, // "out" itself matches, nothing below
	}
	for _, tc := range tests {
		g, err := CompileGlob(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.MatchPrefix(tc.dir); got != tc.want {
			t.Errorf("%q.MatchPrefix(%q) = %v, want %v", tc.pattern, tc.dir, got, tc.want)
		}
	}
}

func TestGlobTooManyAlternativesNeverPrunes(t *testing.T) {
	p := strings.Repeat("{a,b,c}", 6) + "/x" // 729 alternatives
	g, err := CompileGlob(p)
	if err != nil {
		t.Fatal(err)
	}
	if !g.MatchPrefix("zzz") {
		t.Fatal("a pattern past the expansion limit must not prune")
	}
	if !g.Match("abcabc/x") || g.Match("abcabd/x") {
		t.Fatal("Match must not depend on the expansion limit")
	}
}

func TestMatcher(t *testing.T) {
	m, err := NewMatcher([]string{"./out.txt", "res/*.csv"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		rel            string
		match, descend bool
	}{
		{rel: "out.txt", match: true},
		{rel: "res", descend: true},
		{rel: "res/a.csv", match: true},
		{rel: "other", match: false, descend: false},
	}
	for _, tc := range tests {
		if got := m.Match(tc.rel); got != tc.match {
			t.Errorf("Match(%q) = %v", tc.rel, got)
		}
		if got := m.Descend(tc.rel); got != tc.descend {
			t.Errorf("Descend(%q) = %v", tc.rel, got)
		}
	}
	var nilM *Matcher
	if nilM.Match("x") || nilM.Descend("x") || nilM.Len() != 0 {
		t.Error("a nil Matcher must match nothing")
	}
	if _, err := NewMatcher([]string{"[x"}); err == nil {
		t.Error("NewMatcher must reject a bad pattern")
	}
}
