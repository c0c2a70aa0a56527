package nextflow

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		opts    Options
		want    Location
		enabled bool
		compact bool
		tags    bool
		errHas  string // substring of the error; "" = no error
	}{
		{name: "unset", env: map[string]string{}, compact: true},
		{name: "s3 work dir", env: map[string]string{VarWork: "/fusion/s3/my-bucket/work/3f/9a1c"},
			want: Location{Scheme: "s3", Bucket: "my-bucket", Key: "work/3f/9a1c"}, enabled: true, compact: true},
		{name: "trailing slash and blanks", env: map[string]string{VarWork: " /fusion/gs/b/work/ab/ "},
			want: Location{Scheme: "gs", Bucket: "b", Key: "work/ab"}, enabled: true, compact: true},
		{name: "azure container root", env: map[string]string{VarWork: "/fusion/az/cont"},
			want: Location{Scheme: "az", Bucket: "cont"}, enabled: true, compact: true},
		{name: "custom mount point", env: map[string]string{VarWork: "/mnt/x/s3/b/w"}, opts: Options{MountPoint: "/mnt/x/"},
			want: Location{Scheme: "s3", Bucket: "b", Key: "w"}, enabled: true, compact: true},
		{name: "tags and compaction off", env: map[string]string{VarWork: "/fusion/s3/b/w", VarTags: DefaultTags, VarCompactSymlink: "false"},
			want: Location{Scheme: "s3", Bucket: "b", Key: "w"}, enabled: true, tags: true},
		{name: "not under the mount", env: map[string]string{VarWork: "/data/s3/b/w"}, errHas: "FUSION_WORK"},
		{name: "relative", env: map[string]string{VarWork: "fusion/s3/b/w"}, errHas: "not absolute"},
		{name: "unknown scheme", env: map[string]string{VarWork: "/fusion/http/host/a"}, errHas: "unknown scheme"},
		{name: "no bucket", env: map[string]string{VarWork: "/fusion/s3"}, errHas: "no bucket"},
		{name: "dot dot", env: map[string]string{VarWork: "/fusion/s3/b/../c"}, errHas: ". or .."},
		{name: "mount prefix only by name", env: map[string]string{VarWork: "/fusionx/s3/b/w"}, errHas: "FUSION_WORK"},
		{name: "bad tags", env: map[string]string{VarTags: "[*](k)"}, errHas: "FUSION_TAGS"},
		{name: "bad compaction flag", env: map[string]string{VarCompactSymlink: "maybe"}, errHas: "FUSION_COMPACT_SYMLINKS"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Parse(envOf(tc.env), tc.opts)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.WorkDir != tc.want || e.Enabled() != tc.enabled || e.CompactSymlinks != tc.compact || (e.Tags != nil) != tc.tags {
				t.Fatalf("got %+v (enabled %v), want dir %+v enabled %v compact %v tags %v", e, e.Enabled(), tc.want, tc.enabled, tc.compact, tc.tags)
			}
		})
	}
}

func TestParseClassifiesVariables(t *testing.T) {
	environ := []string{
		"PATH=/bin", "FUSION_WORK=/fusion/s3/b/w", "FUSION_LICENSE_TOKEN=jwt", "FUSION_CONFIG_PROFILE=nextflow",
		"FUSION_FOO=1", "FUSION_CACHE_SIZE=100M", "FUSION_BAR", "FUSION_FOO=2", "NOT_FUSION_X=1",
	}
	e, err := Parse(envOf(map[string]string{}), Options{Environ: environ})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"FUSION_BAR", "FUSION_FOO"}; !reflect.DeepEqual(e.Unknown, want) {
		t.Errorf("Unknown = %v, want %v", e.Unknown, want)
	}
	if want := []string{"FUSION_CONFIG_PROFILE", "FUSION_LICENSE_TOKEN"}; !reflect.DeepEqual(e.Ignored, want) {
		t.Errorf("Ignored = %v, want %v", e.Ignored, want)
	}
}

func TestParsePathSentinel(t *testing.T) {
	if _, err := ParsePath("/elsewhere/s3/b", "/fusion"); !errors.Is(err, ErrNotUnderMount) {
		t.Fatalf("err = %v, want ErrNotUnderMount", err)
	}
}

func TestLocation(t *testing.T) {
	tests := []struct {
		loc       Location
		child     string
		wantChild Location
		rel, path string
	}{
		{loc: Location{Scheme: "s3", Bucket: "b", Key: "w/x"}, child: ".fusion/trace.json",
			wantChild: Location{Scheme: "s3", Bucket: "b", Key: "w/x/.fusion/trace.json"}, rel: "s3/b/w/x", path: "/fusion/s3/b/w/x"},
		{loc: Location{Scheme: "gs", Bucket: "b"}, child: ".exitcode",
			wantChild: Location{Scheme: "gs", Bucket: "b", Key: ".exitcode"}, rel: "gs/b", path: "/fusion/gs/b"},
	}
	for _, tc := range tests {
		if got := tc.loc.Child(tc.child); got != tc.wantChild {
			t.Errorf("%v.Child(%q) = %+v, want %+v", tc.loc, tc.child, got, tc.wantChild)
		}
		if got := tc.loc.Rel(); got != tc.rel {
			t.Errorf("Rel = %q, want %q", got, tc.rel)
		}
		if got := tc.loc.Path("/fusion"); got != tc.path {
			t.Errorf("Path = %q, want %q", got, tc.path)
		}
	}
}
