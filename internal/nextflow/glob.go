package nextflow

import (
	"fmt"
	"regexp"
	"strings"
)

// maxAlternatives bounds brace expansion for MatchPrefix; a pattern with
// more alternatives is never used to prune (MatchPrefix says true).
const maxAlternatives = 256

// Glob is a compiled Nextflow output pattern, with the semantics of Java's
// "glob:" path matcher (which Nextflow uses):
//
//   - "*" matches any run of characters except "/";
//   - "**" matches any run of characters, "/" included;
//   - "?" matches one character except "/";
//   - "[abc]", "[a-z]", "[!a-z]" (also "[^a-z]") match one character of a
//     class, never "/";
//   - "{a,b,c}" matches any of the comma-separated sub-patterns (nesting
//     allowed);
//   - "\" escapes the next character.
//
// Names starting with "." are matched like any other name. A Glob is safe
// for concurrent use.
type Glob struct {
	pattern string
	re      *regexp.Regexp
	alts    [][]segment // brace-free alternatives split on "/"; nil = no pruning
}

// segment is one "/"-separated component of an alternative.
type segment struct {
	re       *regexp.Regexp
	globstar bool // contains "**": may span any number of components
}

// CompileGlob compiles pattern. It fails for an unterminated class or
// group, an empty class, or a class that names "/".
func CompileGlob(pattern string) (*Glob, error) {
	src, err := globRegexp(pattern)
	if err != nil {
		return nil, fmt.Errorf("glob %q: %w", pattern, err)
	}
	g := &Glob{pattern: pattern, re: regexp.MustCompile("^" + src + "$")}
	if alts, ok := expandBraces(pattern, maxAlternatives); ok {
		for _, a := range alts {
			segs, err := splitSegments(a)
			if err != nil {
				return nil, fmt.Errorf("glob %q: %w", pattern, err)
			}
			g.alts = append(g.alts, segs)
		}
	}
	return g, nil
}

// String returns the pattern as written.
func (g *Glob) String() string { return g.pattern }

// Match reports whether the slash path name (relative, no leading "/")
// matches the whole pattern.
func (g *Glob) Match(name string) bool { return g.re.MatchString(name) }

// MatchPrefix reports whether some path strictly below the directory dir
// (relative, no trailing "/") could match. It may say true when none does
// (it is used to prune a walk), never false when one does.
func (g *Glob) MatchPrefix(dir string) bool {
	if g.alts == nil {
		return true
	}
	ds := strings.Split(dir, "/")
	for _, segs := range g.alts {
		if prefixMatches(segs, ds) {
			return true
		}
	}
	return false
}

func prefixMatches(segs []segment, ds []string) bool {
	for i, d := range ds {
		if i >= len(segs) {
			return false
		}
		if segs[i].globstar {
			return true
		}
		if !segs[i].re.MatchString(d) {
			return false
		}
	}
	return len(segs) > len(ds)
}

// globRegexp translates a glob into a regular expression (unanchored).
func globRegexp(p string) (string, error) {
	var b strings.Builder
	depth := 0 // open {groups}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch c {
		case '\\':
			if i+1 < len(p) {
				i++
				b.WriteString(regexp.QuoteMeta(p[i : i+1]))
			} else {
				b.WriteString(`\\`)
			}
		case '*':
			if i+1 < len(p) && p[i+1] == '*' {
				b.WriteString(".*")
				i++
			} else {
				b.WriteString("[^/]*")
			}
		case '?':
			b.WriteString("[^/]")
		case '[':
			cls, n, err := globClass(p[i:])
			if err != nil {
				return "", err
			}
			b.WriteString(cls)
			i += n - 1
		case '{':
			depth++
			b.WriteString("(?:")
		case '}':
			if depth == 0 {
				b.WriteString(`\}`)
				continue
			}
			depth--
			b.WriteString(")")
		case ',':
			if depth > 0 {
				b.WriteString("|")
			} else {
				b.WriteString(",")
			}
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	if depth > 0 {
		return "", fmt.Errorf("unterminated {group}")
	}
	return b.String(), nil
}

// globClass translates the class at the start of p; it returns the regexp
// and the number of bytes of p consumed.
func globClass(p string) (string, int, error) {
	var b strings.Builder
	b.WriteString("[")
	i := 1
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		b.WriteString("^/")
		i++
	}
	start := i
	for ; i < len(p); i++ {
		c := p[i]
		switch {
		case c == ']' && i > start:
			b.WriteString("]")
			return b.String(), i + 1, nil
		case c == '/':
			return "", 0, fmt.Errorf("class %q names '/'", p)
		case c == '\\' && i+1 < len(p):
			i++
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		case c == '-' && i > start && i+1 < len(p) && p[i+1] != ']':
			b.WriteString("-")
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	return "", 0, fmt.Errorf("unterminated [class]")
}

// expandBraces expands {a,b} groups into at most limit brace-free
// patterns; ok is false when there would be more.
func expandBraces(p string, limit int) ([]string, bool) {
	open, close, commas := findGroup(p)
	if open < 0 {
		return []string{p}, true
	}
	prefix, suffix := p[:open], p[close+1:]
	var out []string
	prev := open + 1
	for _, c := range append(commas, close) {
		subs, ok := expandBraces(prefix+p[prev:c]+suffix, limit-len(out))
		if !ok {
			return nil, false
		}
		out = append(out, subs...)
		if len(out) > limit {
			return nil, false
		}
		prev = c + 1
	}
	return out, true
}

// findGroup finds the first top-level {group}: the indexes of its braces
// and of its top-level commas; open is -1 when there is none.
func findGroup(p string) (open, close int, commas []int) {
	open, depth, inClass := -1, 0, false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\':
			i++
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
			if i+1 < len(p) && (p[i+1] == '!' || p[i+1] == '^') {
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' {
				i++ // a leading ']' is a member
			}
		case c == '{':
			if depth == 0 {
				open = i
			}
			depth++
		case c == '}' && depth > 0:
			depth--
			if depth == 0 {
				return open, i, commas
			}
		case c == ',' && depth == 1:
			commas = append(commas, i)
		}
	}
	return -1, -1, nil
}

// splitSegments splits a brace-free pattern on "/" and compiles each part.
func splitSegments(p string) ([]segment, error) {
	var segs []segment
	start := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) && p[i] == '\\' {
			i++
			continue
		}
		if i < len(p) && p[i] != '/' {
			continue
		}
		part := p[start:i]
		start = i + 1
		if strings.Contains(part, "**") {
			segs = append(segs, segment{globstar: true})
			continue
		}
		src, err := globRegexp(part)
		if err != nil {
			return nil, err
		}
		segs = append(segs, segment{re: regexp.MustCompile("^" + src + "$")})
	}
	return segs, nil
}

// Matcher matches slash paths relative to a work dir against a list of
// output patterns. A nil *Matcher matches nothing.
type Matcher struct {
	globs []*Glob
}

// NewMatcher compiles patterns (e.g. from ReadOutputs). Leading "./" is
// ignored, as Nextflow resolves patterns against the work dir.
func NewMatcher(patterns []string) (*Matcher, error) {
	m := &Matcher{}
	for _, p := range patterns {
		g, err := CompileGlob(strings.TrimPrefix(p, "./"))
		if err != nil {
			return nil, err
		}
		m.globs = append(m.globs, g)
	}
	return m, nil
}

// Match reports whether rel matches any pattern.
func (m *Matcher) Match(rel string) bool {
	if m == nil {
		return false
	}
	for _, g := range m.globs {
		if g.Match(rel) {
			return true
		}
	}
	return false
}

// Descend reports whether some path below the directory rel could match a
// pattern (see Glob.MatchPrefix).
func (m *Matcher) Descend(rel string) bool {
	if m == nil {
		return false
	}
	for _, g := range m.globs {
		if g.MatchPrefix(rel) {
			return true
		}
	}
	return false
}

// Len returns the number of patterns.
func (m *Matcher) Len() int {
	if m == nil {
		return 0
	}
	return len(m.globs)
}
