package azure

import (
	"strings"
	"testing"
)

func TestMetadataKeyEncoding(t *testing.T) {
	tests := []struct{ key, enc string }{
		{key: "color", enc: "color"},
		{key: "mode2", enc: "mode2"},
		{key: "ferry-mode", enc: "ferry_2dmode"},
		{key: "a_b", enc: "a_5fb"},
		{key: "1st", enc: "_31st"},
		{key: "x.y", enc: "x_2ey"},
		{key: "", enc: ""},
		{key: "ü", enc: "_c3_bc"},
	}
	for _, tt := range tests {
		if got := encodeKey(tt.key); got != tt.enc {
			t.Errorf("encodeKey(%q) = %q, want %q", tt.key, got, tt.enc)
		}
		if got := decodeKey(tt.enc); got != tt.key {
			t.Errorf("decodeKey(%q) = %q, want %q", tt.enc, got, tt.key)
		}
		// Azure names are case-insensitive: an upper-cased name decodes too.
		if got := decodeKey(strings.ToUpper(tt.enc)); got != tt.key {
			t.Errorf("decodeKey(%q) = %q, want %q", strings.ToUpper(tt.enc), got, tt.key)
		}
	}
	// Names from other tools that are no escapes stay as they are.
	for _, name := range []string{"my_key", "trailing_", "x_z1"} {
		if got := decodeKey(name); got != name {
			t.Errorf("decodeKey(%q) = %q, want it unchanged", name, got)
		}
	}
}
