package nextflow

import (
	"fmt"
	"strings"
)

// A tiny reader of the bash that Nextflow writes into a staging section:
// words with quote removal (single quotes, double quotes, backslash
// escapes as Escape.path writes them), comments, and the command
// separators ";", "&&", "||", "&" and newline. It never expands anything:
// a word bash would expand (a $variable, a command substitution, a glob,
// a brace list, a leading ~) is kept with the reason in word.expands, so
// the caller can skip it rather than guess.

// word is one shell word after quote removal.
type word struct {
	text    string
	expands string // "" or what bash would expand in it ("a $variable", "a glob", ...)
}

// command is one simple command: its words, the line it starts on, and
// unsupported (non-empty) when it uses what this reader does not follow
// (pipes, redirections, subshells).
type command struct {
	words       []word
	line        int
	unsupported string
}

// shellReader splits text into commands.
type shellReader struct {
	src  string
	i    int
	line int // 1-based line of src[i]

	cmds []command
	cur  command
	w    strings.Builder
	inW  bool   // a word is open (even an empty quoted one)
	why  string // expansion seen in the open word
}

// splitCommands reads text (a staging section or a .command.stage)
// starting at line firstLine. It fails on an unterminated quote.
func splitCommands(text string, firstLine int) ([]command, error) {
	r := &shellReader{src: text, line: firstLine}
	r.cur.line = firstLine
	for r.i < len(r.src) {
		c := r.src[r.i]
		switch {
		case c == '\n':
			r.endCommand()
			r.i++
			r.line++
			r.cur.line = r.line
		case c == ' ' || c == '\t' || c == '\r':
			r.endWord()
			r.i++
		case c == '#' && !r.inW:
			for r.i < len(r.src) && r.src[r.i] != '\n' {
				r.i++
			}
		case c == '\\':
			if r.i+1 < len(r.src) && r.src[r.i+1] == '\n' { // line continuation
				r.i += 2
				r.line++
				continue
			}
			if r.i+1 < len(r.src) {
				r.w.WriteByte(r.src[r.i+1])
			}
			r.inW = true
			r.i += 2
		case c == '\'':
			end := strings.IndexByte(r.src[r.i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated single quote", r.line)
			}
			s := r.src[r.i+1 : r.i+1+end]
			r.w.WriteString(s)
			r.line += strings.Count(s, "\n")
			r.inW = true
			r.i += end + 2
		case c == '"':
			if err := r.doubleQuoted(); err != nil {
				return nil, err
			}
		case c == ';' || c == '&' || c == '|' || c == '<' || c == '>' || c == '(' || c == ')':
			r.operator()
		default:
			switch {
			case c == '$':
				r.expand("a $variable")
			case c == '`':
				r.expand("a command substitution")
			case c == '*' || c == '?' || c == '[':
				r.expand("a glob")
			case c == '{':
				r.expand("a brace expansion")
			case c == '~' && !r.inW:
				r.expand("a ~ expansion")
			}
			r.w.WriteByte(c)
			r.inW = true
			r.i++
		}
	}
	r.endCommand()
	return r.cmds, nil
}

// doubleQuoted reads "..." at r.i: a backslash escapes $ ` " \ and
// newline only; $ and ` still expand.
func (r *shellReader) doubleQuoted() error {
	start := r.line
	r.i++
	for r.i < len(r.src) {
		c := r.src[r.i]
		switch {
		case c == '"':
			r.i++
			r.inW = true
			return nil
		case c == '\\' && r.i+1 < len(r.src) && strings.IndexByte("$`\"\\\n", r.src[r.i+1]) >= 0:
			if r.src[r.i+1] == '\n' {
				r.line++
			} else {
				r.w.WriteByte(r.src[r.i+1])
			}
			r.i += 2
			continue
		case c == '$':
			r.expand("a $variable")
		case c == '`':
			r.expand("a command substitution")
		case c == '\n':
			r.line++
		}
		r.w.WriteByte(c)
		r.i++
	}
	return fmt.Errorf("line %d: unterminated double quote", start)
}

// operator ends the word at an unquoted operator character: ; && || &
// separate commands, anything else marks the command unsupported.
func (r *shellReader) operator() {
	r.endWord()
	c := r.src[r.i]
	two := r.i+1 < len(r.src) && r.src[r.i+1] == c
	switch {
	case c == ';', c == '&' && two, c == '|' && two:
		if two {
			r.i++
		}
		r.i++
		r.endCommand()
		r.cur.line = r.line
		return
	case c == '&':
		r.i++
		r.endCommand()
		r.cur.line = r.line
		return
	case c == '|':
		r.unsupported("a pipe")
	case c == '<' || c == '>':
		r.unsupported("a redirection")
	default:
		r.unsupported("a subshell")
	}
	r.i++
}

func (r *shellReader) expand(why string) {
	if r.why == "" {
		r.why = why
	}
}

func (r *shellReader) unsupported(why string) {
	if r.cur.unsupported == "" {
		r.cur.unsupported = why
	}
}

func (r *shellReader) endWord() {
	if r.inW {
		r.cur.words = append(r.cur.words, word{text: r.w.String(), expands: r.why})
	}
	r.w.Reset()
	r.inW = false
	r.why = ""
}

func (r *shellReader) endCommand() {
	r.endWord()
	if len(r.cur.words) > 0 || r.cur.unsupported != "" {
		r.cmds = append(r.cmds, r.cur)
	}
	r.cur = command{line: r.line}
}

// text renders a command's words for a log line.
func (c command) text() string {
	var b strings.Builder
	for i, w := range c.words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w.text)
	}
	return b.String()
}
