// Command trainq is trainq's CLI: it submits training jobs and
// Jupyter servers, shows their status, logs and the queue of an allocation,
// and cancels them. It talks to Temporal with the standard TEMPORAL_*
// environment variables (see client.Dial).
//
//	trainq [--config FILE] [--output text|json] COMMAND [ARGS]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Output formats.
const (
	outputText = "text"
	outputJSON = "json"
)

// globals holds the global flags and the lazily created config and Temporal
// client shared by every command.
type globals struct {
	// ConfigPath is --config ("" = $TRAINQ_CONFIG, else the embedded default).
	ConfigPath string
	// Output is --output: "text" or "json".
	Output string

	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// TTY says whether Stdout is a terminal (watch draws a progress line).
	TTY bool

	// Dial connects to Temporal; tests replace it. Default: client.Dial
	// with a quiet logger ($TRAINQ_DEBUG=1 shows the SDK's logs).
	Dial func(ctx context.Context) (sdkclient.Client, error)
	// PollInterval is how often watch and logs --follow poll (default 1s).
	PollInterval time.Duration

	cfg    *config.Config
	client *client.Client
}

func newGlobals(stdin io.Reader, stdout, stderr io.Writer) *globals {
	g := &globals{Output: outputText, Stdin: stdin, Stdout: stdout, Stderr: stderr, PollInterval: time.Second}
	if f, ok := stdout.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			g.TTY = true
		}
	}
	g.Dial = func(ctx context.Context) (sdkclient.Client, error) {
		h := slog.Handler(slog.DiscardHandler)
		if os.Getenv("TRAINQ_DEBUG") != "" {
			h = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug})
		}
		return client.Dial(ctx, sdklog.NewStructuredLogger(slog.New(h)))
	}
	return g
}

// addFlags registers the global flags on a command's flag set, so that they
// may come before or after the command.
func (g *globals) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&g.ConfigPath, "config", g.ConfigPath, "config `file` (default: $TRAINQ_CONFIG, else the embedded default)")
	fs.Func("output", "output format: text or json", func(s string) error {
		switch strings.ToLower(s) {
		case outputText, outputJSON:
			g.Output = strings.ToLower(s)
			return nil
		}
		return fmt.Errorf("%q is not an output format; use text or json", s)
	})
	fs.Func("o", "short for --output", fs.Lookup("output").Value.Set)
}

func (g *globals) json() bool { return g.Output == outputJSON }

// Config loads the configuration once.
func (g *globals) Config() (*config.Config, error) {
	if g.cfg != nil {
		return g.cfg, nil
	}
	cfg, err := config.Load(g.ConfigPath)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	g.cfg = cfg
	return cfg, nil
}

// Client loads the configuration and dials Temporal, once.
func (g *globals) Client(ctx context.Context) (*client.Client, error) {
	if g.client != nil {
		return g.client, nil
	}
	cfg, err := g.Config()
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := g.Dial(dctx)
	if err != nil {
		return nil, err
	}
	g.client = client.New(c, cfg)
	return g.client, nil
}

func (g *globals) close() {
	if g.client != nil {
		g.client.Close()
		g.client = nil
	}
}

// printJSON writes v as indented JSON to stdout.
func (g *globals) printJSON(v any) error {
	enc := json.NewEncoder(g.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printJSONLine writes v as one line of JSON (for streams: watch, logs).
func (g *globals) printJSONLine(v any) error {
	return json.NewEncoder(g.Stdout).Encode(v)
}

// note prints an informational line to stderr (text mode only), so that
// stdout stays parseable.
func (g *globals) note(format string, args ...any) {
	fmt.Fprintf(g.Stderr, "note: "+format+"\n", args...)
}

type command struct {
	name    string
	args    string
	summary string
	run     func(ctx context.Context, g *globals, args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"submit", "[-f job.json] [flags]", "submit a training job (flags mirror ML Space's RunJobRequest)", runSubmit},
		{"notebook", "start [flags] | stop NAME", "start or stop a Jupyter server (always high priority)", runNotebook},
		{"status", "JOB", "show a job's state, timestamps, queue position and attempts", runStatus},
		{"list", "[--status S]... [--allocation A] [--region R] [--author U] [--limit N]", "list jobs, newest first", runList},
		{"cancel", "JOB", "stop a job (its workers get SIGTERM, then SIGKILL)", runCancel},
		{"restart", "JOB [--wait]", "submit a new job with JOB's spec (JOB itself is left as it is)", runRestart},
		{"logs", "JOB [--tail N] [--follow] [--attempt N] [--worker N]", "print a job's logs (latest attempt, all workers)", runLogs},
		{"queue", "[ALLOCATION] [--region R] [--limit N] [--offset M]", "show an allocation's nodes, running jobs and a page of its waiting jobs in launch order", runQueue},
		{"top", "[ALLOCATION] [--region R] [--once]", "live view of an allocation: GPU bars per node, running and waiting jobs (plain snapshot on a non-TTY)", runTop},
		{"checkpoint", "[JOB] [--attempt N] [--progress SHARE]", "record that a running job just saved its progress, so a preemption loses only the work since, and with --progress how much is done, so expected starts follow it (inside a worker: no arguments)", runCheckpoint},
		{"notice", "[--wait] [--timeout D]", "inside a worker: print its stop notice (why: preempted, cancelled, time_limit, stuck, node_drain; and the deadline); exit 1 while there is none", runNotice},
		{"watch", "JOB", "print each state change until the job ends; exit 0 only if it completed", runWatch},
		{"allocator", "recover [ALLOCATION] [--region R] | drain NODE [--allocation A] [--reason TEXT] | undrain NODE", "rebuild an allocator's state from its jobs and node agents; take a node out of service (its jobs get a notice and move) or put it back", runAllocator},
		{"simulate", "[--trace DIR --pods default|multigpu50 | --workload FILE] [--nodes N] [--policy SPEC]...", "replay a workload through the scheduler under each policy and print the tables side by side", runSimulate},
		{"demo", "", "run the worked example of the priorities page on the demo allocation", runDemo},
		{"version", "", "print trainq's version", runVersion},
		{"help", "[COMMAND]", "show help", runHelp},
	}
}

func findCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// run runs the CLI with args (without the program name) and returns the
// exit code: 0 success, 1 runtime failure, 2 usage or validation error.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runWith(ctx, newGlobals(stdin, stdout, stderr), args)
}

// runWith runs the CLI with prepared globals (tests replace Dial).
func runWith(ctx context.Context, g *globals, args []string) int {
	defer g.close()
	return report(g, dispatch(ctx, g, args))
}

func dispatch(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("trainq", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return runHelp(ctx, g, nil)
		}
		return usageErr("%v; run `trainq help` for usage", err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		printUsage(g.Stderr)
		return usageErr("no command given")
	}
	cmd := findCommand(rest[0])
	if cmd == nil {
		return usageErr("%q is not a trainq command; run `trainq help` for the list", rest[0])
	}
	return cmd.run(ctx, g, rest[1:])
}

// Errors and exit codes.

// usageError is bad usage or bad input: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErr(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitError ends the CLI with a code; msg (if any) goes to stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func report(g *globals, err error) int {
	if err == nil {
		return 0
	}
	var ex *exitError
	if errors.As(err, &ex) {
		if ex.msg != "" {
			fmt.Fprintln(g.Stderr, "trainq: "+sentence(ex.msg))
		}
		return ex.code
	}
	code := 1
	var ue *usageError
	var fe *protocol.FieldError
	switch {
	case errors.As(err, &ue):
		code = 2
	case errors.As(err, &fe):
		code = 2
		err = fmt.Errorf("bad value for %s: %s", fe.Field, fe.Message)
	case errors.Is(err, context.Canceled):
		err = errors.New("interrupted")
		code = 130
	}
	fmt.Fprintln(g.Stderr, "trainq: "+sentence(err.Error()))
	return code
}

// sentence ends a message with a full stop.
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || strings.HasSuffix(s, ".") || strings.HasSuffix(s, "?") || strings.HasSuffix(s, "!") {
		return s
	}
	return s + "."
}

// notFound turns client.ErrJobNotFound into the CLI's sentence.
func notFound(job string, err error) error {
	if errors.Is(err, client.ErrJobNotFound) {
		return fmt.Errorf("job %s does not exist", job)
	}
	return err
}

// newFlagSet makes a command's flag set with the global flags registered.
func newFlagSet(g *globals, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("trainq "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g.addFlags(fs)
	return fs
}

// parseArgs parses a command's flags, which may be interspersed with its
// positional arguments, and checks the number of positional arguments.
func parseArgs(g *globals, fs *flag.FlagSet, args []string, minPos, maxPos int) ([]string, error) {
	name := strings.TrimPrefix(fs.Name(), "trainq ")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, errHelpShown(g, fs)
	}
	if err != nil {
		return nil, usageErr("%s: %v; run `trainq help %s` for usage", name, err, name)
	}
	if len(pos) < minPos {
		return nil, usageErr("%s: missing argument; usage: trainq %s %s", name, name, commandArgs(name))
	}
	if maxPos >= 0 && len(pos) > maxPos {
		return nil, usageErr("%s: unexpected argument %q; usage: trainq %s %s", name, pos[maxPos], name, commandArgs(name))
	}
	return pos, nil
}

func commandArgs(name string) string {
	first, _, _ := strings.Cut(name, " ")
	if c := findCommand(first); c != nil {
		return c.args
	}
	return ""
}

// errHelpShown prints a command's help and ends with exit code 0.
func errHelpShown(g *globals, fs *flag.FlagSet) error {
	printCommandHelp(g.Stdout, fs)
	return &exitError{code: 0}
}

func printCommandHelp(w io.Writer, fs *flag.FlagSet) {
	name := strings.TrimPrefix(fs.Name(), "trainq ")
	first, _, _ := strings.Cut(name, " ")
	if c := findCommand(first); c != nil {
		fmt.Fprintf(w, "Usage: trainq %s %s\n\n%s\n\nFlags:\n", c.name, c.args, c.summary)
	}
	tw := newTable(w)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "o" {
			return
		}
		arg, usage := flag.UnquoteUsage(f)
		switch f.Name {
		case "output":
			arg = "text|json"
		case "f":
			if name == "logs" {
				arg = ""
			}
		}
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		if arg == "value" || arg == "bool" {
			arg = ""
		}
		if arg != "" {
			arg = " " + arg
		}
		if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "-1" && f.Name != "author" {
			usage += " (default " + d + ")"
		}
		fmt.Fprintf(tw, "  %s%s%s\t%s\n", dash, f.Name, arg, usage)
	})
	tw.Flush()
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `trainq runs ML training jobs with priority classes on GPU pools.

Usage: trainq [--config FILE] [--output text|json] COMMAND [ARGS]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Global flags (before or after the command):
  --config FILE        config file (default: $TRAINQ_CONFIG, else the embedded default)
  --output text|json   output format (default text)

Temporal is reached through the TEMPORAL_* environment variables
(TEMPORAL_ADDRESS, default localhost:7233; TEMPORAL_NAMESPACE, ...).
Run "trainq help COMMAND" or "trainq COMMAND --help" for a command's flags.
`)
}

func runHelp(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "help")
	args, err := parseArgs(g, fs, args, 0, 1)
	if err != nil {
		var ex *exitError
		if errors.As(err, &ex) && ex.code == 0 { // help --help
			printUsage(g.Stdout)
			return nil
		}
		return err
	}
	if len(args) > 0 && args[0] != "help" {
		c := findCommand(args[0])
		if c == nil {
			return usageErr("%q is not a trainq command; run `trainq help` for the list", args[0])
		}
		if c.name == "demo" {
			fmt.Fprintf(g.Stdout, "Usage: trainq demo\n\n%s\n", c.summary)
			return nil
		}
		// Every other command answers --help with its usage and flags.
		return c.run(ctx, g, []string{"--help"})
	}
	if g.json() {
		type entry struct {
			Name    string `json:"name"`
			Args    string `json:"args,omitempty"`
			Summary string `json:"summary"`
		}
		var out []entry
		for _, c := range commands {
			out = append(out, entry{c.name, c.args, c.summary})
		}
		return g.printJSON(map[string]any{"commands": out})
	}
	printUsage(g.Stdout)
	return nil
}

type versionInfo struct {
	Version string `json:"version"`
	Go      string `json:"go"`
	Commit  string `json:"commit,omitempty"`
	Dirty   bool   `json:"dirty,omitempty"`
}

func runVersion(_ context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "version")
	if _, err := parseArgs(g, fs, args, 0, 0); err != nil {
		return err
	}
	v := versionInfo{Version: version, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Dirty = s.Value == "true"
			}
		}
		if v.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
	}
	if g.json() {
		return g.printJSON(v)
	}
	s := "trainq " + v.Version + " (" + v.Go
	if v.Commit != "" {
		s += ", commit " + v.Commit[:min(12, len(v.Commit))]
		if v.Dirty {
			s += "+dirty"
		}
	}
	fmt.Fprintln(g.Stdout, s+")")
	return nil
}
