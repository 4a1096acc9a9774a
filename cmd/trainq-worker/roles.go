package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/trainq/trainq/config"
)

// role says what one trainq-worker process runs.
type role int

const (
	// roleAll runs the workflows and control activities on the main task
	// queue and one node agent per configured node: everything on one machine.
	roleAll role = iota
	// roleWorkflows runs only the main task queue (--agents=false).
	roleWorkflows
	// roleAgent runs only the node agents of some nodes (trainq-worker agent).
	roleAgent
)

// String is the role as the log lines name it.
func (r role) String() string {
	switch r {
	case roleWorkflows:
		return "workflows"
	case roleAgent:
		return "agent"
	}
	return "workflows+agents"
}

// options are trainq-worker's command line.
type options struct {
	role       role
	configPath string
	// nodes are the --node names of an agent (in the order given, without repeats).
	nodes []string
	// nodesFromHost picks the agent's nodes by this machine's hostname.
	nodesFromHost bool
	// metricsAddr is where an agent serves /metrics ("" = nowhere). The
	// other roles take metrics_addr from the config.
	metricsAddr string
	// buildID turns on Worker Deployment versioning for the workflows (see
	// versioning.go); "" runs them unversioned.
	buildID string
}

const usage = `Usage:
  trainq-worker [--config FILE] [--agents=false] [--build-id ID]
      The workflows and control activities on the task queue "trainq", and one
      node agent per configured node (task queue trainq-node-<node>).
      --agents=false runs no node agent: the agents then run apart.
      --build-id (or $TRAINQ_BUILD_ID) runs the workflows as version ID of the
      Worker Deployment "trainq": jobs stay on the build they started on,
      allocators follow the current version (see docs/upgrading.md).
  trainq-worker agent --node NAME [--node NAME ...] [--config FILE] [--metrics-addr ADDR]
  trainq-worker agent --nodes-from-host [--config FILE] [--metrics-addr ADDR]
      Only the node agents of the named nodes: no workflows, no allocator.
      --nodes-from-host serves the configured nodes named after this host:
      the hostname itself, or the hostname followed by "-" and anything.
  trainq-worker supervise DIR
      Internal: the parent of one job worker's processes (the local backend runs
      trainq-supervise DIR instead when that binary lies next to trainq-worker).
  trainq-worker dev-server-args
      Internal: the flags "temporal server start-dev" takes for trainq (its search
      attributes and task-reader limits), one a line; scripts/dev.sh uses them.

The config comes from --config, else $TRAINQ_CONFIG, else the embedded default.
Temporal is reached through the standard TEMPORAL_* settings (TEMPORAL_ADDRESS, ...).
`

// parseArgs reads the command line (without the program name). A request
// for help is flag.ErrHelp; every other error is a plain sentence.
func parseArgs(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("trainq-worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.configPath, "config", "", "config file")
	agents := boolValue{v: true}
	fs.Var(&agents, "agents", "run one node agent per configured node (default true)")
	fs.StringVar(&o.buildID, "build-id", os.Getenv(EnvBuildID), "the build ID of this worker's workflow code")
	if err := fs.Parse(args); err != nil {
		return o, flagError(err, "")
	}
	if err := validBuildID(o.buildID); err != nil {
		return o, err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		if !agents.v {
			o.role = roleWorkflows
		}
		return o, nil
	}
	if rest[0] != "agent" {
		return o, fmt.Errorf("%q is not a trainq-worker role: use `trainq-worker agent --node NAME` for node agents alone, or no role for the workflows; run `trainq-worker --help` for usage", rest[0])
	}
	if agents.set {
		return o, errors.New("--agents is not a flag of `trainq-worker agent`: an agent runs node agents only; run `trainq-worker --help` for usage")
	}
	o.role = roleAgent
	afs := flag.NewFlagSet("trainq-worker agent", flag.ContinueOnError)
	afs.SetOutput(io.Discard)
	afs.StringVar(&o.configPath, "config", o.configPath, "config file")
	afs.Func("node", "a node whose agent this process runs (repeatable)", func(s string) error {
		for _, n := range strings.Split(s, ",") {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			if !slices.Contains(o.nodes, n) {
				o.nodes = append(o.nodes, n)
			}
		}
		return nil
	})
	afs.BoolVar(&o.nodesFromHost, "nodes-from-host", false, "serve the nodes named after this host")
	afs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address")
	if err := afs.Parse(rest[1:]); err != nil {
		return o, flagError(err, "agent")
	}
	if afs.NArg() > 0 {
		return o, fmt.Errorf("agent: unexpected argument %q; name nodes with --node NAME", afs.Arg(0))
	}
	switch {
	case len(o.nodes) == 0 && !o.nodesFromHost:
		return o, errors.New("agent: say which nodes to serve, with --node NAME (repeatable) or --nodes-from-host")
	case len(o.nodes) > 0 && o.nodesFromHost:
		return o, errors.New("agent: give either --node or --nodes-from-host, not both")
	}
	return o, nil
}

var (
	reUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	reNoValue   = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
	reBadValue  = regexp.MustCompile(`^invalid (?:boolean )?value ".*" for (?:flag )?-+([^:]+): (.*)$`)
)

// flagError turns the flag package's messages into plain sentences.
func flagError(err error, sub string) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	prefix, cmd := "", "trainq-worker --help"
	if sub != "" {
		prefix = sub + ": "
	}
	msg := err.Error()
	if m := reUndefined.FindStringSubmatch(msg); m != nil {
		switch {
		case sub == "" && (m[1] == "node" || m[1] == "nodes-from-host" || m[1] == "metrics-addr"):
			return fmt.Errorf("--%s is a flag of `trainq-worker agent`; run `%s` for usage", m[1], cmd)
		case sub == "agent" && m[1] == "agents":
			return fmt.Errorf("agent: --agents is not a flag of `trainq-worker agent`: an agent runs node agents only; run `%s` for usage", cmd)
		}
		return fmt.Errorf("%sthere is no flag --%s; run `%s` for usage", prefix, m[1], cmd)
	}
	if m := reNoValue.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("%s--%s needs a value", prefix, m[1])
	}
	if m := reBadValue.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("%s--%s: %s", prefix, m[1], m[2])
	}
	return fmt.Errorf("%s%s; run `%s` for usage", prefix, msg, cmd)
}

// boolValue is a boolean flag whose bad values get a plain message, and
// which remembers whether it was given.
type boolValue struct {
	v, set bool
}

func (b *boolValue) String() string {
	if b == nil {
		return "false"
	}
	return strconv.FormatBool(b.v)
}

func (b *boolValue) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not true or false", s)
	}
	b.v, b.set = v, true
	return nil
}

func (b *boolValue) IsBoolFlag() bool { return true }

// agentNodes resolves the nodes an agent serves: the --node names, which
// must all be configured, or with fromHost the configured nodes named
// hostname or hostname-<anything>.
func agentNodes(cfg *config.Config, names []string, fromHost bool, hostname string) ([]string, error) {
	configured := cfg.Nodes()
	list := strings.Join(configured, ", ")
	if fromHost {
		var out []string
		for _, n := range configured {
			if n == hostname || strings.HasPrefix(n, hostname+"-") {
				out = append(out, n)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("no node of the config (%s) is named after this host %q (%s or %s-…); configured nodes: %s",
				cfg.Source(), hostname, hostname, hostname, list)
		}
		return out, nil
	}
	var unknown []string
	for _, n := range names {
		if !slices.Contains(configured, n) {
			unknown = append(unknown, strconv.Quote(n))
		}
	}
	switch len(unknown) {
	case 0:
		return names, nil
	case 1:
		return nil, fmt.Errorf("node %s is not in the config (%s); configured nodes: %s", unknown[0], cfg.Source(), list)
	}
	return nil, fmt.Errorf("nodes %s are not in the config (%s); configured nodes: %s", strings.Join(unknown, ", "), cfg.Source(), list)
}
