package firstrollout

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/test/testenv"
)

// walkthroughDoc is the document TestFirstRolloutFollowsTheDoc follows, relative to the checkout.
const walkthroughDoc = "docs/first-rollout.md"

// step is one thing the document asks its reader to do, in the order it asks: write a file (a YAML
// block) or run a command (a line of a shell block).
type step struct {
	// line is where the document asks it (1-based), for the messages that name it.
	line int
	// file and content are a YAML block's: the file it names on its first line, and all of it.
	file, content string
	// command is a shell block's line, one command of it when the line chains them with &&.
	command string
	// output is what a console block shows the command printing: lines the command's output must
	// hold, in order, where <…> stands for any one word; a line … only says that lines are left out.
	output []string
}

func (s step) String() string {
	if s.command != "" {
		return fmt.Sprintf("%s:%d: %s", walkthroughDoc, s.line, s.command)
	}
	return fmt.Sprintf("%s:%d: %s", walkthroughDoc, s.line, s.file)
}

var (
	// fence opens or closes a fenced block at the start of a line, with its language.
	fence = regexp.MustCompile("^```([a-z]*)\\s*$")
	// indentedFence is a fence inside a list item or a quote: the test would not see its block.
	indentedFence = regexp.MustCompile("^\\s+```")
	// fileLine is the first line of a YAML block: the file it is.
	fileLine = regexp.MustCompile(`^# ([A-Za-z0-9._/-]+\.yaml)$`)
)

// readWalkthrough reads the document's steps: its YAML blocks and the commands of its sh and console
// blocks, in order. It fails on a block the test would not know what to do with: one indented (the
// test reads top-level blocks only), one in another language than yaml, sh, console or text
// (text is shown, never run), a YAML block that does not name its file.
func readWalkthrough(t *testing.T) []step {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), walkthroughDoc))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var steps []step
	for i := 0; i < len(lines); i++ {
		if indentedFence.MatchString(lines[i]) {
			t.Fatalf("%s:%d: an indented block; keep blocks at the start of a line, where the test reads them", walkthroughDoc, i+1)
		}
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		end := i + 1
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		if end == len(lines) {
			t.Fatalf("%s:%d: a block that is not closed", walkthroughDoc, i+1)
		}
		body, first := lines[i+1:end], i+2
		switch m[1] {
		case "yaml":
			steps = append(steps, yamlStep(t, body, first))
		case "sh":
			steps = append(steps, shellSteps(body, first)...)
		case "console":
			steps = append(steps, consoleSteps(t, body, first)...)
		case "text":
		default:
			t.Fatalf("%s:%d: a block in %q: the walkthrough's blocks are yaml (a file), sh (commands), console (commands and what they print) or text (shown only)", walkthroughDoc, i+1, m[1])
		}
		i = end
	}
	return steps
}

func yamlStep(t *testing.T, body []string, first int) step {
	t.Helper()
	if len(body) == 0 || !fileLine.MatchString(body[0]) {
		t.Fatalf("%s:%d: a yaml block must start with a comment naming its file, such as # fleetrollout.yaml", walkthroughDoc, first)
	}
	return step{line: first, file: fileLine.FindStringSubmatch(body[0])[1], content: strings.Join(body, "\n") + "\n"}
}

// shellSteps are the commands of an sh block: each line that is not blank or a comment, joined with
// the next when it ends in a backslash, cut at a comment after it ("  # …") and at each &&.
func shellSteps(body []string, first int) []step {
	var steps []step
	for i := 0; i < len(body); i++ {
		at, line := first+i, body[i]
		for strings.HasSuffix(line, `\`) && i+1 < len(body) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(body[i])
		}
		line, _, _ = strings.Cut(line, "  # ")
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, c := range strings.Split(line, " && ") {
			steps = append(steps, step{line: at, command: strings.TrimSpace(c)})
		}
	}
	return steps
}

// consoleSteps are the commands of a console block, each a line "$ command", with the lines up to
// the next command as what it prints.
func consoleSteps(t *testing.T, body []string, first int) []step {
	t.Helper()
	var steps []step
	for i, line := range body {
		if c, ok := strings.CutPrefix(line, "$ "); ok {
			if strings.Contains(c, " && ") {
				t.Fatalf("%s:%d: one command per $ line in a console block, so that what it prints is its own", walkthroughDoc, first+i)
			}
			steps = append(steps, step{line: first + i, command: strings.TrimSpace(c)})
			continue
		}
		if len(steps) == 0 {
			t.Fatalf("%s:%d: a console block must start with a command ($ …)", walkthroughDoc, first+i)
		}
		if strings.TrimSpace(line) != "" {
			steps[len(steps)-1].output = append(steps[len(steps)-1].output, line)
		}
	}
	return steps
}

// placeholder is a word in angle brackets: in a command or a file, one of placeholders; in what a
// command prints, any word.
var placeholder = regexp.MustCompile(`<[^<>]+>`)

// spaces is a run of blanks: a table's columns are as wide as their widest cell, which differs
// from run to run.
var spaces = regexp.MustCompile(`[ \t]+`)

// printed reports whether out holds the lines want shows, in order, each a whole line of out with
// <…> matching any word and a run of blanks any run of blanks; and, when not, which line it missed.
func printed(want []string, out string) (bool, string) {
	got := strings.Split(out, "\n")
	next := 0
	for _, w := range want {
		w = strings.TrimSpace(w)
		if w == "…" {
			continue
		}
		re := linePattern(w)
		for next < len(got) && !re.MatchString(strings.TrimSpace(got[next])) {
			next++
		}
		if next == len(got) {
			return false, w
		}
		next++
	}
	return true, ""
}

// linePattern is the regular expression of a line the document shows.
func linePattern(line string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for {
		loc := placeholder.FindStringIndex(line)
		if loc == nil {
			b.WriteString(spaces.ReplaceAllString(regexp.QuoteMeta(line), `\s+`))
			break
		}
		b.WriteString(spaces.ReplaceAllString(regexp.QuoteMeta(line[:loc[0]]), `\s+`))
		b.WriteString(`\S+`)
		line = line[loc[1]:]
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// words splits a command line as a shell would for the commands of the walkthrough: at blanks,
// keeping what is between single or double quotes together (without them).
func words(line string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("an unclosed quote in %q", line)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// The output the document shows matches what a command prints as the walkthrough's conventions say:
// in order, whole lines, any run of blanks for a run of blanks, <…> for one word, lines left out.
func TestPrintedMatchesAsTheConventionsSay(t *testing.T) {
	out := "NAME       PHASE       AGE\npodinfo    Completed   59s\nweb        Progressing 3m\n"
	for _, c := range []struct {
		want []string
		ok   bool
	}{
		{[]string{"NAME PHASE AGE", "podinfo Completed <age>"}, true},
		{[]string{"NAME PHASE AGE", "…", "web Progressing <age>"}, true},
		{[]string{"podinfo Completed <age>", "NAME PHASE AGE"}, false},        // out of order
		{[]string{"podinfo Completed"}, false},                                // not a whole line
		{[]string{"podinfo <phase> <age> <more>"}, false},                     // a word too many
		{[]string{"podinfo <phase and age>"}, false},                          // <…> is one word
		{[]string{"podinfo   Completed   <age>", "web Progressing 3m"}, true}, // blanks are any blanks
	} {
		if ok, missing := printed(c.want, out); ok != c.ok {
			t.Errorf("printed(%q) = %v (missing %q), want %v", c.want, ok, missing, c.ok)
		}
	}
	got, err := words(`git commit -am "podinfo 6.7.1" --from-file=value='a b'`)
	if want := []string{"git", "commit", "-am", "podinfo 6.7.1", "--from-file=value=a b"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("words = %q, %v; want %q", got, err, want)
	}
	if _, err := words(`git commit -m "unclosed`); err == nil {
		t.Errorf("words accepted an unclosed quote")
	}
}
