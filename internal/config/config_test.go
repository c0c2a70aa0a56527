package config

import "testing"

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{in: "100M", want: 100 << 20},
		{in: "20GiB", want: 20 << 30},
		{in: "1.5G", want: 3 << 29},
		{in: "4096", want: 4096},
		{in: "8k", want: 8 << 10},
		{in: "", err: true},
		{in: "abc", err: true},
		{in: "-1G", err: true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, err=%v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Defaults()
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{name: "relative mount", mod: func(c *Config) { c.MountPoint = "fusion" }},
		{name: "no cache dir", mod: func(c *Config) { c.CacheDir = "" }},
		{name: "zero timeout", mod: func(c *Config) { c.RequestTimeout = 0 }},
		{name: "bad level", mod: func(c *Config) { c.LogLevel = "loud" }},
		{name: "tiny part", mod: func(c *Config) { c.PartSize = 1 }},
		{name: "bad stage switch", mod: func(c *Config) { c.StageInputs = "sometimes" }},
	}
	for _, tt := range tests {
		c := Defaults()
		tt.mod(&c)
		if c.Validate() == nil {
			t.Errorf("%s: Validate accepted it", tt.name)
		}
	}
}

func TestParseSwitch(t *testing.T) {
	for in, want := range map[string]string{"": StageAuto, "auto": StageAuto, "ON": StageOn, "true": StageOn, "1": StageOn,
		"yes": StageOn, "off": StageOff, "False": StageOff, "0": StageOff, " no ": StageOff} {
		if got, err := ParseSwitch(in); err != nil || got != want {
			t.Errorf("ParseSwitch(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseSwitch("maybe"); err == nil {
		t.Error("ParseSwitch accepted maybe")
	}
}
