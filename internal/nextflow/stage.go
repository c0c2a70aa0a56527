package nextflow

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
)

// CommandStage is the file nxf_stage runs instead of inline staging
// commands when they are large (BashWrapperBuilder.stageCommand).
const CommandStage = ".command.stage"

// MaxScriptBytes bounds how much of a .command.run or .command.stage
// ParseRunScript and ParseStageScript read; a longer script is cut there
// (and the cut is reported as a skipped line).
const MaxScriptBytes = 64 << 20

// Staging modes of StageInput (Nextflow's stageInMode, plus rsync).
const (
	StageSymlink = "symlink" // ln -s /fusion/... name (Nextflow's default)
	StageRellink = "rellink" // ln -s ../../relative/path name
	StageLink    = "link"    // ln /fusion/... name (hard link)
	StageCopy    = "copy"    // cp -fRL /fusion/... name
	StageRsync   = "rsync"   // rsync ... /fusion/... name
)

// StageInput is one input that a staging command links or copies into
// the work dir.
type StageInput struct {
	// Source is the absolute, cleaned path being staged (a relative source
	// is resolved against the work dir, or the link's directory for a
	// relative symlink), as bash would see it. It may lie outside the
	// mount; the caller decides.
	Source string
	// Name is the name given to it in the work dir (the last argument).
	Name string
	// Mode is one of the Stage* constants.
	Mode string
}

// Skipped is a staging command, or an argument of one, that the parser
// did not follow.
type Skipped struct {
	Line   int    // 1-based line in the script
	Text   string // the command or argument, quotes removed
	Reason string
}

// Staging is what a staging section (nxf_stage's body, or a whole
// .command.stage) names, without running it.
type Staging struct {
	// Found is true when the script had an nxf_stage function (always
	// true for ParseStageScript).
	Found bool
	// Inputs are the staged paths, in script order (duplicates kept).
	Inputs []StageInput
	// StageFile is the absolute path of the .command.stage that the
	// section runs ("bash /fusion/.../.command.stage"), "" when none.
	StageFile string
	// Skipped are the commands and arguments not followed: a $variable,
	// a glob, an unknown command, a pipe, a malformed line.
	Skipped []Skipped
}

// ArrayHeader is the "### array:" block of a job array's own
// .command.run: the environment variable holding the index, its first
// value and the tasks' work dirs (URIs such as s3://bucket/work/aa/bb).
type ArrayHeader struct {
	IndexName  string
	IndexStart int
	WorkDirs   []string
}

// RunScript is what ParseRunScript reads in a .command.run.
type RunScript struct {
	Stage Staging
	Array ArrayHeader // zero unless the script is a job array's
}

// ParseRunScript reads a .command.run (at most MaxScriptBytes): the
// "### array:" header and the commands of its nxf_stage function.
// workDir is the absolute path of the script's directory, used for
// relative sources. Commands the parser does not follow are reported in
// Stage.Skipped, never an error; the error is a read error, or an
// unterminated quote in the staging section.
func ParseRunScript(r io.Reader, workDir string) (RunScript, error) {
	var rs RunScript
	br := bufio.NewReader(io.LimitReader(r, MaxScriptBytes))
	var (
		body     strings.Builder
		bodyLine int  // line of the first body line
		inStage  bool // inside nxf_stage() { ... }
		inHeader bool
		inArray  bool
		workDirs bool
		lineNo   int
		read     int
	)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			lineNo++
			read += len(line)
			t := strings.TrimSpace(line)
			switch {
			case inStage && t == "}":
				inStage = false
			case inStage:
				body.WriteString(strings.TrimRight(line, "\r\n") + "\n")
			case isStageFunc(t):
				inStage, rs.Stage.Found, bodyLine = true, true, lineNo+1
				body.Reset()
			case t == "### ---":
				inHeader = true
			case !inHeader:
			case t == "### ...":
				inHeader, inArray = false, false
			case t == "### array:":
				inArray = true
			case inArray && strings.HasPrefix(t, "###   index-name:"):
				rs.Array.IndexName = strings.TrimSpace(strings.TrimPrefix(t, "###   index-name:"))
				workDirs = false
			case inArray && strings.HasPrefix(t, "###   index-start:"):
				rs.Array.IndexStart, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(t, "###   index-start:")))
				workDirs = false
			case inArray && strings.HasPrefix(t, "###   work-dirs:"):
				workDirs = true
			case inArray && workDirs && strings.HasPrefix(t, "###   - "):
				if d := unescape(strings.TrimSpace(strings.TrimPrefix(t, "###   - "))); d != "" {
					rs.Array.WorkDirs = append(rs.Array.WorkDirs, d)
				}
			default:
				inArray, workDirs = false, false
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return RunScript{}, fmt.Errorf("reading %s (line %d): %w", CommandRun, lineNo, err)
		}
	}
	if !rs.Stage.Found {
		return rs, nil
	}
	st, err := parseStaging(body.String(), bodyLine, workDir)
	if err != nil {
		return RunScript{}, err
	}
	st.Found = true
	if read >= MaxScriptBytes {
		st.Skipped = append(st.Skipped, Skipped{Line: lineNo, Reason: fmt.Sprintf("script longer than %d bytes, cut there", MaxScriptBytes)})
	}
	rs.Stage = st
	return rs, nil
}

// isStageFunc matches the opening line of the nxf_stage function.
func isStageFunc(t string) bool {
	t = strings.TrimPrefix(t, "function ")
	rest, ok := strings.CutPrefix(t, "nxf_stage")
	if !ok {
		return false
	}
	rest = strings.TrimSpace(rest)
	rest = strings.TrimSpace(strings.TrimPrefix(rest, "()"))
	return rest == "{"
}

// ParseStageScript reads a .command.stage (at most MaxScriptBytes): every
// line is a staging command, as in nxf_stage. workDir is as for
// ParseRunScript.
func ParseStageScript(r io.Reader, workDir string) (Staging, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxScriptBytes+1))
	if err != nil {
		return Staging{}, fmt.Errorf("reading %s: %w", CommandStage, err)
	}
	cut := len(b) > MaxScriptBytes
	if cut {
		b = b[:strings.LastIndexByte(string(b[:MaxScriptBytes]), '\n')+1]
	}
	st, err := parseStaging(string(b), 1, workDir)
	if err != nil {
		return Staging{}, err
	}
	st.Found = true
	if cut {
		st.Skipped = append(st.Skipped, Skipped{Reason: fmt.Sprintf("script longer than %d bytes, cut there", MaxScriptBytes)})
	}
	return st, nil
}

// parseStaging interprets the commands of a staging section.
func parseStaging(text string, firstLine int, workDir string) (Staging, error) {
	var st Staging
	cmds, err := splitCommands(text, firstLine)
	if err != nil {
		return Staging{}, fmt.Errorf("staging section: %w", err)
	}
	for _, c := range cmds {
		st.command(c, workDir)
	}
	return st, nil
}

// command records what one staging command stages.
func (st *Staging) command(c command, workDir string) {
	skip := func(text, reason string) {
		st.Skipped = append(st.Skipped, Skipped{Line: c.line, Text: text, Reason: reason})
	}
	if c.unsupported != "" {
		skip(c.text(), "uses "+c.unsupported)
		return
	}
	if len(c.words) == 0 {
		return
	}
	if c.words[0].expands != "" {
		skip(c.text(), "the command is "+c.words[0].expands)
		return
	}
	name := path.Base(c.words[0].text)
	opts, args := splitOptions(c.words[1:])
	switch name {
	case "true", ":", "rm", "mkdir", "set", "cd", "echo", "printf", "export":
		// Nextflow's own housekeeping: nothing is read.
	case "ln":
		mode := StageLink
		for _, o := range opts {
			if o == "--symbolic" || (o[0] == '-' && !strings.HasPrefix(o, "--") && strings.Contains(o, "s")) {
				mode = StageSymlink
			}
		}
		st.sources(c, opts, args, mode, workDir, skip)
	case "cp":
		st.sources(c, opts, args, StageCopy, workDir, skip)
	case "rsync":
		st.sources(c, opts, args, StageRsync, workDir, skip)
	case "bash", "sh", "source", ".":
		if len(args) == 1 && args[0].expands == "" && path.Base(args[0].text) == CommandStage {
			st.StageFile = resolve(workDir, "", args[0].text)
			return
		}
		skip(c.text(), "runs a script that is not "+CommandStage)
	default:
		skip(c.text(), "unknown command "+strconv.Quote(name))
	}
}

// sources records the sources of an ln/cp/rsync command: every argument
// but the last (the name), or all of them with -t DIR.
func (st *Staging) sources(c command, opts []string, args []word, mode, workDir string, skip func(string, string)) {
	target := ""
	for i, o := range opts {
		if o == "-t" && i+1 < len(opts) {
			target = opts[i+1]
		} else if v, ok := strings.CutPrefix(o, "--target-directory="); ok {
			target = v
		}
	}
	srcs := args
	if target == "" {
		if len(args) < 2 {
			skip(c.text(), "no source and name")
			return
		}
		srcs, target = args[:len(args)-1], args[len(args)-1].text
	}
	for _, s := range srcs {
		if s.expands != "" {
			skip(s.text, "has "+s.expands)
			continue
		}
		m := mode
		if m == StageSymlink && !path.IsAbs(s.text) {
			m = StageRellink
		}
		linkDir := ""
		if m == StageRellink {
			linkDir = path.Dir(target)
		}
		st.Inputs = append(st.Inputs, StageInput{Source: resolve(workDir, linkDir, s.text), Name: target, Mode: m})
	}
}

// splitOptions separates leading options (and the value of -t, -S) from
// the operands.
func splitOptions(ws []word) (opts []string, args []word) {
	for i := 0; i < len(ws); i++ {
		t := ws[i].text
		switch {
		case t == "--":
			return opts, append(args, ws[i+1:]...)
		case len(t) > 1 && t[0] == '-' && len(args) == 0:
			opts = append(opts, t)
			if (t == "-t" || t == "-S") && i+1 < len(ws) {
				opts = append(opts, ws[i+1].text)
				i++
			}
		default:
			args = append(args, ws[i])
		}
	}
	return opts, args
}

// resolve makes p absolute: relative paths are taken from workDir/linkDir.
func resolve(workDir, linkDir, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(workDir, linkDir, p)
}

// ChildRunScript returns the location of the .command.run of the array
// task this process runs: the work dir at index $IndexName - IndexStart.
// It fails when the variable is unset or not a number, or the index is
// out of range, or the work dir is not an s3://, gs:// or az:// URI.
func (a ArrayHeader) ChildRunScript(getenv func(string) string) (Location, error) {
	v := strings.TrimSpace(getenv(a.IndexName))
	n, err := strconv.Atoi(v)
	if a.IndexName == "" || err != nil {
		return Location{}, fmt.Errorf("array index variable %q is %q, not a number", a.IndexName, v)
	}
	i := n - a.IndexStart
	if i < 0 || i >= len(a.WorkDirs) {
		return Location{}, fmt.Errorf("array index %d (%s=%d) is outside the %d work dirs", i, a.IndexName, n, len(a.WorkDirs))
	}
	l, ok := ParseURI(a.WorkDirs[i])
	if !ok {
		return Location{}, fmt.Errorf("array work dir %q is not an object-storage URI", a.WorkDirs[i])
	}
	return l.Child(CommandRun), nil
}
