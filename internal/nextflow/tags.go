package nextflow

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"strings"
)

// DefaultTags is the FUSION_TAGS value Nextflow sends unless fusion.tags
// is configured.
const DefaultTags = "[.command.*|.exitcode|.fusion.*](nextflow.io/metadata=true),[*](nextflow.io/temporary=true)"

// S3 limits on object tags.
const (
	maxTagsPerObject = 10
	maxTagKeyLen     = 128
	maxTagValueLen   = 256
)

// ErrBadTags is wrapped by ParseTags errors.
var ErrBadTags = errors.New("malformed FUSION_TAGS")

// TagRules are parsed FUSION_TAGS rules. Safe for concurrent use.
type TagRules struct {
	groups []tagGroup
}

type tagGroup struct {
	globs []*Glob
	tags  map[string]string
}

// ParseTags parses the FUSION_TAGS grammar:
//
//	rules   = group *( "," group )
//	group   = "[" pattern *( "|" pattern ) "]" "(" tag *( "," tag ) ")"
//	tag     = key "=" value
//
// Patterns are globs (see Glob) matched against an object's base name.
// Blanks around groups, patterns, keys and values are ignored; a value may
// be empty and may contain "="; keys and values cannot contain "," or ")".
// A group holds at most 10 tags (the S3 limit), keys at most 128 and values
// at most 256 characters, and a key appears once per group. Errors wrap
// ErrBadTags and name the offending position. An empty string gives nil
// rules.
func ParseTags(s string) (*TagRules, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	r := &TagRules{}
	pos := 0
	for {
		g, n, err := parseGroup(s[pos:])
		if err != nil {
			return nil, fmt.Errorf("%w: at offset %d of %q: %v", ErrBadTags, pos+n, s, err)
		}
		r.groups = append(r.groups, g)
		pos += n
		rest := strings.TrimLeft(s[pos:], " \t")
		pos = len(s) - len(rest)
		if rest == "" {
			return r, nil
		}
		if rest[0] != ',' {
			return nil, fmt.Errorf("%w: at offset %d of %q: want ',' between groups, got %q", ErrBadTags, pos, s, rest[0])
		}
		pos++
		pos = len(s) - len(strings.TrimLeft(s[pos:], " \t"))
	}
}

// parseGroup parses one group at the start of s; n is the bytes consumed
// (or the offset of the error).
func parseGroup(s string) (g tagGroup, n int, err error) {
	if s == "" || s[0] != '[' {
		return g, 0, errors.New("want '[' starting a group")
	}
	end, open := patternsEnd(s)
	if end < 0 {
		return g, 0, errors.New("unterminated '[': want '](' after the patterns")
	}
	for _, p := range splitPatterns(s[1:end]) {
		p = strings.TrimSpace(p)
		if p == "" {
			return g, 1, errors.New("empty pattern")
		}
		gl, err := CompileGlob(p)
		if err != nil {
			return g, 1, err
		}
		g.globs = append(g.globs, gl)
	}
	closeRel := strings.IndexByte(s[open:], ')')
	if closeRel < 0 {
		return g, open, errors.New("unterminated '(': want ')' after the tags")
	}
	g.tags = map[string]string{}
	body := s[open+1 : open+closeRel]
	if strings.TrimSpace(body) == "" {
		return g, open, errors.New("no tags in '()'")
	}
	for _, kv := range strings.Split(body, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return g, open, fmt.Errorf("tag %q: want key=value", strings.TrimSpace(kv))
		case k == "":
			return g, open, fmt.Errorf("tag %q: empty key", strings.TrimSpace(kv))
		case len(k) > maxTagKeyLen:
			return g, open, fmt.Errorf("tag key %q is longer than %d characters", k, maxTagKeyLen)
		case len(v) > maxTagValueLen:
			return g, open, fmt.Errorf("tag %q: value is longer than %d characters", k, maxTagValueLen)
		}
		if _, dup := g.tags[k]; dup {
			return g, open, fmt.Errorf("tag key %q repeated", k)
		}
		g.tags[k] = v
	}
	if len(g.tags) > maxTagsPerObject {
		return g, open, fmt.Errorf("%d tags, at most %d allowed", len(g.tags), maxTagsPerObject)
	}
	return g, open + closeRel + 1, nil
}

// patternsEnd returns the index of the "]" that closes the pattern list of
// the group at s[0], skipping glob classes, and of the "(" that follows it
// after optional blanks; -1, -1 if there is none.
func patternsEnd(s string) (end, open int) {
	inClass := false
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
			if i+1 < len(s) && (s[i+1] == '!' || s[i+1] == '^') {
				i++
			}
			if i+1 < len(s) && s[i+1] == ']' {
				i++
			}
		case c == ']':
			j := i + 1
			for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
				j++
			}
			if j < len(s) && s[j] == '(' {
				return i, j
			}
			return -1, -1
		}
	}
	return -1, -1
}

// splitPatterns splits on "|" outside classes.
func splitPatterns(s string) []string {
	var out []string
	start, inClass := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
		case c == '|':
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// Tags returns the tags for the object key: those of the first group with
// a pattern matching the key's base name (Fusion semantics: with the
// default rules .exitcode gets only nextflow.io/metadata=true, not also
// the catch-all's temporary=true). It returns nil when no group matches or
// r is nil. The map is a fresh copy.
func (r *TagRules) Tags(key string) map[string]string {
	if r == nil {
		return nil
	}
	name := path.Base(strings.TrimSuffix(key, "/"))
	for _, g := range r.groups {
		for _, gl := range g.globs {
			if gl.Match(name) {
				return maps.Clone(g.tags)
			}
		}
	}
	return nil
}
