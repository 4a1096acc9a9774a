package docscheck

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository's top directory, seen from this package's directory
// (go test runs a package's tests there).
const root = "../.."

// docCommand is one simple command of a shell code block, with where it is.
type docCommand struct {
	where string   // file:line
	text  string   // the command as shown, for messages
	words []string // its words, quotes removed, environment assignments dropped
}

// docFiles are the Markdown files whose commands are checked.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, files...)
}

var fenceRe = regexp.MustCompile("^\\s*```\\s*([A-Za-z]*)")

// extract returns the simple commands of the ```sh, ```bash and ```console
// blocks of a Markdown file. In a console block only the lines after a `$ `
// prompt are commands; the rest is output.
func extract(t *testing.T, path string) []docCommand {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rel, _ := filepath.Rel(root, path)
	var (
		out            []docCommand
		inBlock, shell bool
		console        bool
		pending        string // a line continued with a backslash
		pendingAt      int
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := fenceRe.FindStringSubmatch(line); m != nil {
			if inBlock {
				inBlock, shell, pending = false, false, ""
				continue
			}
			inBlock = true
			lang := strings.ToLower(m[1])
			shell = lang == "sh" || lang == "bash" || lang == "console" || lang == "shell"
			console = lang == "console"
			continue
		}
		if !inBlock || !shell {
			continue
		}
		if console && pending == "" {
			trimmed := strings.TrimSpace(line)
			if !strings.HasPrefix(trimmed, "$ ") {
				continue
			}
			line = strings.TrimPrefix(trimmed, "$ ")
		}
		if pending == "" {
			pendingAt = n
		}
		line = stripComment(line)
		if strings.HasSuffix(strings.TrimSpace(line), `\`) {
			pending += strings.TrimSuffix(strings.TrimSpace(line), `\`) + " "
			continue
		}
		full := strings.TrimSpace(pending + line)
		pending = ""
		for _, simple := range splitList(full) {
			words := dropAssignments(shellWords(simple))
			if len(words) == 0 {
				continue
			}
			out = append(out, docCommand{where: rel + ":" + strconv.Itoa(pendingAt), text: strings.TrimSpace(simple), words: words})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// stripComment drops a # comment that is outside quotes and starts a word.
func stripComment(line string) string {
	var quote rune
	prev := ' '
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (prev == ' ' || prev == '\t'):
			return line[:i]
		}
		prev = r
	}
	return line
}

// splitList splits a command line on ;, &&, || and | outside quotes, so that
// each part is one simple command (the parts of a for loop included).
func splitList(line string) []string {
	var (
		parts []string
		cur   strings.Builder
		quote rune
	)
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == ';' || r == '|' || (r == '&' && i+1 < len(rs) && rs[i+1] == '&'):
			parts = append(parts, cur.String())
			cur.Reset()
			if i+1 < len(rs) && (rs[i+1] == '|' || rs[i+1] == '&') {
				i++
			}
			continue
		}
		cur.WriteRune(r)
	}
	return append(parts, cur.String())
}

// shellWords splits a simple command into words, removing quotes.
func shellWords(s string) []string {
	var (
		words  []string
		cur    strings.Builder
		quote  rune
		inWord bool
	)
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

var assignRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// dropAssignments removes leading VAR=value words and the shell keywords
// that start the body of a loop or condition.
func dropAssignments(words []string) []string {
	for len(words) > 0 && (assignRe.MatchString(words[0]) || words[0] == "do" || words[0] == "then" || words[0] == "else") {
		words = words[1:]
	}
	return words
}

// binaries maps how the docs name trainq's programs to their packages.
var binaries = map[string]string{
	"trainq":        "./cmd/trainq",
	"trainq-worker": "./cmd/trainq-worker",
	"trainq-api":    "./cmd/trainq-api",
}

// subcommands lists the words that name a subcommand after a program's first
// command word; any other word there is an argument.
var subcommands = map[string][]string{
	"trainq notebook":  {"start", "stop"},
	"trainq allocator": {"recover", "drain", "undrain"},
}

// firstLevel lists the programs whose first positional word is a subcommand
// only when it is one of these (trainq-worker and trainq-api run without one).
var firstLevel = map[string][]string{
	"trainq-worker": {"agent"},
	"trainq-api":    {"token"},
}

func TestDocCommands(t *testing.T) {
	targets := makeTargets(t)
	var cmds []docCommand
	for _, f := range docFiles(t) {
		cmds = append(cmds, extract(t, f)...)
	}
	if len(cmds) == 0 {
		t.Fatal("no shell commands found in README.md and docs/*.md: the extractor is broken")
	}
	var bin string // built on the first trainq command, once
	helps := map[string]string{}
	checked, skipped := 0, 0
	for _, c := range cmds {
		t.Logf("%s: %s", c.where, c.text)
		prog := strings.TrimPrefix(strings.TrimPrefix(c.words[0], "./"), "bin/")
		switch {
		case prog == "make":
			checked++
			checkMake(t, c, targets)
		case prog == "go" && len(c.words) > 1 && c.words[1] == "test":
			checked++
			checkGoTest(t, c)
		case binaries[prog] != "":
			if bin == "" {
				bin = buildBinaries(t)
			}
			checked++
			checkBinary(t, c, prog, bin, helps)
		case slices.Contains([]string{"for", "done", "fi", "cd", "export"}, prog):
			// Shell structure, not a command to check.
		default:
			skipped++
			t.Logf("  skipped: not a make, go test or trainq command")
		}
	}
	t.Logf("%d commands checked, %d skipped", checked, skipped)
}

// makeTargets reads the Makefile's explicit targets.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	ruleRe := regexp.MustCompile(`^([A-Za-z0-9_./-]+(?:\s+[A-Za-z0-9_./-]+)*)\s*:([^=]|$)`)
	for _, line := range strings.Split(string(data), "\n") {
		if m := ruleRe.FindStringSubmatch(line); m != nil {
			for _, name := range strings.Fields(m[1]) {
				targets[name] = true
			}
		}
	}
	return targets
}

func checkMake(t *testing.T, c docCommand, targets map[string]bool) {
	for _, w := range c.words[1:] {
		if strings.HasPrefix(w, "-") || strings.Contains(w, "=") {
			continue
		}
		if !targets[w] {
			t.Errorf("%s: `%s`: the Makefile has no target %q", c.where, c.text, w)
		}
	}
}

var testNameRe = regexp.MustCompile(`(Test|Benchmark|Fuzz|Example)[A-Za-z0-9_]*`)

// checkGoTest checks that each package of a `go test` exists and that each
// test or benchmark its -run and -bench patterns name is a function there.
func checkGoTest(t *testing.T, c docCommand) {
	var patterns, pkgs []string
	args := c.words[2:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case strings.HasPrefix(a, "-") && (name == "run" || name == "bench" || name == "skip"):
			if !hasValue && i+1 < len(args) {
				i++
				value = args[i]
			}
			if name != "skip" {
				patterns = append(patterns, value)
			}
		case strings.HasPrefix(a, "-") && !hasValue && slices.Contains([]string{"timeout", "count", "benchtime", "fuzztime", "tags", "cpu", "parallel", "fuzz"}, name):
			i++ // the flag's value
		case strings.HasPrefix(a, "./"):
			pkgs = append(pkgs, a)
		}
	}
	if len(pkgs) == 0 {
		t.Logf("go test without a ./package to check: %s: %s", c.where, c.text)
		return
	}
	for _, p := range pkgs {
		if strings.HasSuffix(p, "/...") {
			p = strings.TrimSuffix(p, "/...")
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("%s: `%s`: no package directory %s", c.where, c.text, p)
			}
			continue
		}
		funcs, err := testFuncs(filepath.Join(root, p))
		if err != nil {
			t.Errorf("%s: `%s`: %v", c.where, c.text, err)
			continue
		}
		for _, pat := range patterns {
			for _, loc := range testNameRe.FindAllStringIndex(pat, -1) {
				name := pat[loc[0]:loc[1]]
				anchored := loc[1] < len(pat) && pat[loc[1]] == '$'
				if !hasTest(funcs, name, anchored) {
					t.Errorf("%s: `%s`: package %s has no func %s", c.where, c.text, p, name)
				}
			}
		}
	}
}

var funcRe = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)[A-Za-z0-9_]*)\(`)

// testFuncs lists the test, benchmark, fuzz and example functions of a
// package directory.
func testFuncs(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, &os.PathError{Op: "find tests", Path: dir, Err: os.ErrNotExist}
	}
	var funcs []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range funcRe.FindAllStringSubmatch(string(data), -1) {
			funcs = append(funcs, m[1])
		}
	}
	return funcs, nil
}

// hasTest reports whether a -run pattern's name selects a function: exactly
// when it is anchored with $, else as a prefix, as the regexp would.
func hasTest(funcs []string, name string, anchored bool) bool {
	for _, f := range funcs {
		if f == name || (!anchored && strings.HasPrefix(f, name)) {
			return true
		}
	}
	return false
}

// buildBinaries builds trainq, trainq-worker and trainq-api into a temporary
// directory with one go build (so the three link in parallel), and returns it.
func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, pkg := range binaries {
		args = append(args, pkg)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// go build names each binary after its package's directory.
	for name, pkg := range binaries {
		if err := os.Rename(filepath.Join(dir, filepath.Base(pkg)), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// checkBinary checks that a trainq program's subcommand exists and that it
// accepts every flag the command uses, from its --help output.
func checkBinary(t *testing.T, c docCommand, prog, bin string, helps map[string]string) {
	path := []string{prog}
	args := c.words[1:]
	var flags []string
	positional := 0
	for i, a := range args {
		if strings.HasPrefix(a, "-") && a != "-" {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			flags = append(flags, name)
			continue
		}
		// The value of the previous flag is not a subcommand; the docs put
		// the subcommand first, so only a word right after the program (or
		// after a command with subcommands) can be one.
		if i > 0 && strings.HasPrefix(args[i-1], "-") && !strings.Contains(args[i-1], "=") {
			continue
		}
		key := strings.Join(path, " ")
		switch {
		case prog == "trainq" && positional == 0:
			path = append(path, a)
		case subcommands[key] != nil && positional == 1 && slices.Contains(subcommands[key], a):
			path = append(path, a)
		case positional == 0 && firstLevel[prog] != nil && slices.Contains(firstLevel[prog], a):
			path = append(path, a)
		}
		positional++
	}
	key := strings.Join(path, " ")
	help, ok := helps[key]
	if !ok {
		cmd := exec.Command(filepath.Join(bin, prog), append(path[1:], "--help")...)
		out, _ := cmd.CombinedOutput() // some programs exit 2 after printing help
		help = string(out)
		helps[key] = help
	}
	if !strings.Contains(help, "-") || strings.Contains(help, "is not a trainq command") {
		t.Errorf("%s: `%s`: %q is not a command:\n%s", c.where, c.text, key, help)
		return
	}
	for _, f := range flags {
		if !regexp.MustCompile(`(^|[\s,])--?` + regexp.QuoteMeta(f) + `([\s=,]|$)`).MatchString(help) {
			t.Errorf("%s: `%s`: %s does not accept --%s", c.where, c.text, key, f)
		}
	}
}
