package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestStageInputsFlag: --stage-inputs[=v] and FERRY_STAGE_INPUTS, the
// flag winning, bad values refused.
func TestStageInputsFlag(t *testing.T) {
	tests := []struct {
		args    []string
		env     string
		want    string
		wantErr bool
	}{
		{want: "auto"},
		{args: []string{"--stage-inputs"}, want: "on"},
		{args: []string{"--stage-inputs=off"}, want: "off"},
		{args: []string{"--stage-inputs=false"}, want: "off"},
		{env: "off", want: "off"},
		{env: "1", want: "on"},
		{args: []string{"--stage-inputs=auto"}, env: "off", want: "auto"},
		{args: []string{"--stage-inputs=sometimes"}, wantErr: true},
		{env: "sometimes", wantErr: true},
	}
	for _, tc := range tests {
		var out, errOut bytes.Buffer
		getenv := func(k string) string {
			if k == "FERRY_STAGE_INPUTS" {
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
		var got struct{ Config struct{ StageInputs string } }
		if err := json.Unmarshal(out.Bytes(), &got); err != nil || code != 0 {
			t.Fatalf("%v: exit %d, %v\n%s%s", tc.args, code, err, out.String(), errOut.String())
		}
		if got.Config.StageInputs != tc.want {
			t.Errorf("%v env %q: %q, want %q", tc.args, tc.env, got.Config.StageInputs, tc.want)
		}
	}
}
