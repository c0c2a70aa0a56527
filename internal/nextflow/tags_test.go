package nextflow

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestTagsDefaultRules(t *testing.T) {
	r, err := ParseTags(DefaultTags)
	if err != nil {
		t.Fatal(err)
	}
	meta := map[string]string{"nextflow.io/metadata": "true"}
	temp := map[string]string{"nextflow.io/temporary": "true"}
	tests := []struct {
		key  string
		want map[string]string
	}{
		{key: "work/3f/9a/.exitcode", want: meta},
		{key: "work/3f/9a/.command.run", want: meta},
		{key: "work/3f/9a/.command.log", want: meta},
		{key: "work/3f/9a/.fusion.log", want: meta},
		{key: ".command.sh", want: meta},
		{key: "work/3f/9a/.fusion/trace.json", want: temp}, // base name "trace.json"
		{key: "work/3f/9a/sample.bam", want: temp},
		{key: "work/3f/9a/out/", want: temp},
		{key: "work/3f/9a/x.command.run", want: temp},
	}
	for _, tc := range tests {
		if got := r.Tags(tc.key); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Tags(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
	// The returned map is a copy.
	r.Tags(".exitcode")["x"] = "y"
	if got := r.Tags(".exitcode"); len(got) != 1 {
		t.Errorf("Tags leaked a mutation: %v", got)
	}
}

func TestParseTags(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		key    string
		want   map[string]string
		errHas string
	}{
		{name: "empty", in: "  ", key: "x", want: nil},
		{name: "no match", in: "[*.bam](k=v)", key: "a.txt", want: nil},
		{name: "first match wins", in: "[*.bam](a=1),[*](b=2)", key: "x.bam", want: map[string]string{"a": "1"}},
		{name: "second group", in: "[*.bam](a=1),[*](b=2)", key: "x.txt", want: map[string]string{"b": "2"}},
		{name: "blanks", in: " [ *.bam | *.bai ] ( a = 1 , b = 2 ) , [*](c=3) ", key: "x.bai", want: map[string]string{"a": "1", "b": "2"}},
		{name: "empty value and equals", in: "[*](a=,b=x=y)", key: "k", want: map[string]string{"a": "", "b": "x=y"}},
		{name: "class in pattern", in: "[[ab]*](k=v)", key: "dir/a1", want: map[string]string{"k": "v"}},
		{name: "braces in pattern", in: "[*.{bam,cram}](k=v)", key: "x.cram", want: map[string]string{"k": "v"}},
		{name: "no parens", in: "[*]", errHas: "'](' after the patterns"},
		{name: "no brackets", in: "*(k=v)", errHas: "want '['"},
		{name: "no equals", in: "[*](k)", errHas: "want key=value"},
		{name: "empty key", in: "[*](=v)", errHas: "empty key"},
		{name: "unterminated tags", in: "[*](k=v", errHas: "unterminated '('"},
		{name: "empty tags", in: "[*]()", errHas: "no tags"},
		{name: "trailing garbage", in: "[*](k=v)x", errHas: "want ','"},
		{name: "trailing comma", in: "[*](k=v),", errHas: "want '['"},
		{name: "empty pattern list", in: "[](k=v)", errHas: "empty pattern"},
		{name: "empty pattern", in: "[*|](k=v)", errHas: "empty pattern"},
		{name: "bad glob", in: "[{a](k=v)", errHas: "unterminated {group}"},
		{name: "repeated key", in: "[*](k=v,k=w)", errHas: "repeated"},
		{name: "too many tags", in: "[*](a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,i=9,j=10,k=11)", errHas: "at most 10"},
		{name: "long key", in: "[*](" + strings.Repeat("k", 129) + "=v)", errHas: "longer than 128"},
		{name: "long value", in: "[*](k=" + strings.Repeat("v", 257) + ")", errHas: "longer than 256"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseTags(tc.in)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) || !errors.Is(err, ErrBadTags) {
					t.Fatalf("err = %v, want ErrBadTags containing %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Tags(tc.key); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Tags(%q) = %v, want %v", tc.key, got, tc.want)
			}
		})
	}
}
