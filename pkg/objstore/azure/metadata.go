package azure

import (
	"strings"
)

// Azure metadata names must be C# identifiers ([A-Za-z_][A-Za-z0-9_]*) and
// are case-insensitive. ferry's keys are lower case but may hold any
// character ("ferry-mode", "x.y"), so each key is stored escaped:
//
//   - a-z and 0-9 stay as they are (a leading digit is escaped);
//   - every other byte, '_' included, becomes '_' and two lower-case hex
//     digits ("-" → "_2d", "_" → "_5f").
//
// The escaped form is a valid identifier and survives lower-casing, and
// the escaping is reversible. Names written by other tools decode as
// themselves unless they contain '_' followed by two hex digits.

const hexDigits = "0123456789abcdef"

// encodeKey escapes a metadata key into a C# identifier.
func encodeKey(k string) string {
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' && i > 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// decodeKey reverses encodeKey. It lower-cases first: Azure may return
// names in any case.
func decodeKey(k string) string {
	k = strings.ToLower(k)
	if !strings.Contains(k, "_") {
		return k
	}
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		if k[i] == '_' && i+2 < len(k) {
			hi, lo := strings.IndexByte(hexDigits, k[i+1]), strings.IndexByte(hexDigits, k[i+2])
			if hi >= 0 && lo >= 0 {
				b.WriteByte(byte(hi<<4 | lo))
				i += 2
				continue
			}
		}
		b.WriteByte(k[i])
	}
	return b.String()
}

// encodeMetadata returns m with escaped, lower-case keys as the SDK wants
// it (nil when m is empty).
func encodeMetadata(m map[string]string) map[string]*string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]*string, len(m))
	for k, v := range m {
		out[encodeKey(strings.ToLower(k))] = &v
	}
	return out
}

// decodeMetadata reverses encodeMetadata (nil when m is empty).
func decodeMetadata(m map[string]*string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if v != nil {
			out[decodeKey(k)] = *v
		}
	}
	return out
}
