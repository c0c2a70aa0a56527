package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ferry-fs/ferry/internal/config"
)

// TestSwitchFlags: the auto/on/off flags (--stage-inputs[=v] and
// FERRY_STAGE_INPUTS, --isolate-cache[=v] and FERRY_ISOLATE_CACHE), the
// flag winning, bad values refused.
func TestSwitchFlags(t *testing.T) {
	for _, sw := range []struct {
		flag, env string
		field     func(c config.Config) string
	}{
		{flag: "stage-inputs", env: "FERRY_STAGE_INPUTS", field: func(c config.Config) string { return c.StageInputs }},
		{flag: "isolate-cache", env: "FERRY_ISOLATE_CACHE", field: func(c config.Config) string { return c.IsolateCache }},
	} {
		t.Run(sw.flag, func(t *testing.T) {
			f := "--" + sw.flag
			tests := []struct {
				args    []string
				env     string
				want    string
				wantErr bool
			}{
				{want: "auto"},
				{args: []string{f}, want: "on"},
				{args: []string{f + "=off"}, want: "off"},
				{args: []string{f + "=false"}, want: "off"},
				{env: "off", want: "off"},
				{env: "1", want: "on"},
				{args: []string{f + "=auto"}, env: "off", want: "auto"},
				{args: []string{f + "=sometimes"}, wantErr: true},
				{env: "sometimes", wantErr: true},
			}
			for _, tc := range tests {
				var out, errOut bytes.Buffer
				getenv := func(k string) string {
					if k == sw.env {
						return tc.env
					}
					return ""
				}
				code := Main(context.Background(), append([]string{"ferry", "config"}, tc.args...), IO{Stdout: &out, Stderr: &errOut, Getenv: getenv})
				if tc.wantErr {
					if code == 0 || !strings.Contains(errOut.String(), "sometimes") {
						t.Errorf("%v env %q: exit %d, stderr %q; want an error naming the value", tc.args, tc.env, code, errOut.String())
					}
					continue
				}
				var got struct{ Config config.Config }
				if err := json.Unmarshal(out.Bytes(), &got); err != nil || code != 0 {
					t.Fatalf("%v: exit %d, %v\n%s%s", tc.args, code, err, out.String(), errOut.String())
				}
				if v := sw.field(got.Config); v != tc.want {
					t.Errorf("%v env %q: %q, want %q", tc.args, tc.env, v, tc.want)
				}
			}
		})
	}
}
