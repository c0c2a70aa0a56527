package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestDirReadaheadFlag: --dir-readahead[=v] and FERRY_DIR_READAHEAD, on
// by default, the flag winning, bad values refused.
func TestDirReadaheadFlag(t *testing.T) {
	tests := []struct {
		args    []string
		env     string
		want    bool
		wantErr bool
	}{
		{want: true},
		{args: []string{"--dir-readahead"}, want: true},
		{args: []string{"--dir-readahead=off"}, want: false},
		{args: []string{"--dir-readahead=false"}, want: false},
		{env: "off", want: false},
		{env: "0", want: false},
		{env: "on", want: true},
		{args: []string{"--dir-readahead=on"}, env: "off", want: true},
		{args: []string{"--dir-readahead=sometimes"}, wantErr: true},
		{env: "sometimes", wantErr: true},
	}
	for _, tc := range tests {
		var out, errOut bytes.Buffer
		getenv := func(k string) string {
			if k == "FERRY_DIR_READAHEAD" {
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
		var got struct{ Config struct{ DirReadahead bool } }
		if err := json.Unmarshal(out.Bytes(), &got); err != nil || code != 0 {
			t.Fatalf("%v: exit %d, %v\n%s%s", tc.args, code, err, out.String(), errOut.String())
		}
		if got.Config.DirReadahead != tc.want {
			t.Errorf("%v env %q: %v, want %v", tc.args, tc.env, got.Config.DirReadahead, tc.want)
		}
	}
}
