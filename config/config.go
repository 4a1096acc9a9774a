// Package config loads trainq's configuration: regions, their allocations
// (GPU pools) with nodes and policy knobs, and the settings the worker, the
// CLI and the API share. One YAML or JSON file serves them all; without a file
// the embedded default applies.
package config

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

//go:embed default.yaml
var defaultYAML []byte

// EnvFile names the environment variable that points at a config file.
const EnvFile = "TRAINQ_CONFIG"

// Config is the whole configuration.
type Config struct {
	// DataDir holds worker logs, process state and checkpoints of the local backend.
	DataDir           string   `json:"data_dir"`
	DefaultRegion     string   `json:"default_region"`
	DefaultAllocation string   `json:"default_allocation"`
	Regions           []Region `json:"regions"`
	// ReclaimInterval is how often an allocator checks that the jobs holding
	// capacity still exist; a terminated job's capacity is reclaimed within it.
	ReclaimInterval Duration `json:"reclaim_interval"`
	// NodeTimeout is how long a node's agent may leave an activity unanswered
	// before the node counts as lost (its attempts end and rerun elsewhere).
	NodeTimeout Duration `json:"node_timeout"`
	// MetricsAddr is where trainq-worker serves Prometheus metrics ("" = off).
	MetricsAddr string `json:"metrics_addr"`
	// WorkspacesDir holds one directory per workspace (<workspaces_dir>/<workspace>)
	// inside which the REST API keeps a job's checkpoint_dir and logs_dir;
	// empty means <data_dir>/workspaces.
	WorkspacesDir string `json:"workspaces_dir"`
	// Backend is where the workers of jobs run: "local" (the default:
	// process groups on the machine of their node's agent) or "kubernetes"
	// (pods; see Kubernetes).
	Backend string `json:"backend"`
	// Kubernetes configures backend: kubernetes (see kubernetes.go).
	Kubernetes Kubernetes `json:"kubernetes"`

	source string
}

type Region struct {
	Name        string       `json:"name"`
	Allocations []Allocation `json:"allocations"`
}

type Allocation struct {
	Name string `json:"name"`
	// Queueing is best-effort-fifo (default) or strict-fifo.
	Queueing scheduler.Queueing `json:"queueing"`
	// Ordering orders each class's queue: fifo (default: submission order)
	// or fair-share (the least recently used workspace, then user, first;
	// see the scheduler's package doc).
	Ordering scheduler.Ordering `json:"ordering,omitempty"`
	// FairShareHalfLife is how fast fair-share forgets usage (default
	// scheduler.DefaultFairShareHalfLife).
	FairShareHalfLife Duration `json:"fair_share_half_life,omitempty"`
	// FairShareInterval is how often fair-share ranks the workspaces by
	// their usage (default scheduler.DefaultFairShareInterval).
	FairShareInterval          Duration `json:"fair_share_interval,omitempty"`
	MinRuntimeBeforePreemption Duration `json:"min_runtime_before_preemption"`
	// StopGracePeriod is how long a stopping worker gets between SIGTERM and SIGKILL.
	StopGracePeriod Duration `json:"stop_grace_period"`
	// ReserveAfter is how long a medium or low request must have been the first of its class,
	// unable to start or preempt, before nodes are reserved (drained) for it (default 30m).
	ReserveAfter Duration `json:"reserve_after"`
	// Backfill gives reservations a start from the jobs' time limits and lets other jobs run on
	// reserved nodes only if they end by then (scheduler.Policy.Backfill; default off).
	Backfill bool `json:"backfill,omitempty"`
	// StarvationAfter: the first waiting job of a class that has been so for this long may
	// preempt lower-class jobs that max_loss_gpu_hours and min_runtime_before_preemption protect,
	// and those at max_preemptions once more (scheduler.Policy.StarvationAfter; 0, the
	// default: never).
	StarvationAfter Duration `json:"starvation_after,omitempty"`
	// LossWithinWait: where starvation_after or an overrun on a reserved node lets a job preempt
	// past max_loss_gpu_hours, it may throw away at most the GPU-hours it has waited
	// (scheduler.Policy.LossWithinWait; default off).
	LossWithinWait bool `json:"loss_within_wait,omitempty"`
	// StrictMaxPreemptions: a job that starvation_after lets preempt past the limits may not
	// preempt a job at max_preemptions once more (scheduler.Policy.StrictMaxPreemptions; default
	// off).
	StrictMaxPreemptions bool `json:"strict_max_preemptions,omitempty"`
	// MaxPreemptions: a job already preempted this many times is not preempted again (default
	// scheduler.DefaultMaxPreemptions; -1: no limit).
	MaxPreemptions int `json:"max_preemptions"`
	// MaxLossGPUHours: no job is preempted if that throws away more than this many GPU-hours of
	// work, its GPUs × the time since its attempt started or last checkpointed (default
	// scheduler.DefaultMaxLossGPUHours; -1: no limit).
	MaxLossGPUHours int `json:"max_loss_gpu_hours"`
	// MaxWaiting caps the allocation's queue: a submission past it is
	// refused (default DefaultMaxWaiting, at most MaxMaxWaiting).
	MaxWaiting int `json:"max_waiting"`
	// DefaultTimeLimit is the time limit of a job whose request names none
	// (ML Space's stop_timer); MaxTimeLimit the longest a job may ask for,
	// and the limit of one that asks for none. 0: no default, no maximum.
	// Jupyter servers have none.
	DefaultTimeLimit Duration `json:"default_time_limit,omitempty"`
	// PreemptionNotice is how long a preempted job's workers get, once
	// told through $TRAINQ_NOTICE_FILE, to save their work and exit
	// before SIGTERM (0: SIGTERM at once; at most MaxPreemptionNotice).
	PreemptionNotice Duration `json:"preemption_notice,omitempty"`
	// PreemptionNoticeByClass overrides preemption_notice for the jobs of
	// a class ({"low": "30s", "medium": "2m"}): a victim's class sets its
	// notice, and so does a job's own class for its cancel, time limit and
	// stuck stops.
	PreemptionNoticeByClass map[string]Duration `json:"preemption_notice_by_class,omitempty"`
	// NoticeSignal is a signal the workers also get with every notice
	// (one of NoticeSignals; "": none).
	NoticeSignal string   `json:"notice_signal,omitempty"`
	MaxTimeLimit Duration `json:"max_time_limit,omitempty"`
	// Topology names the levels of the allocation's network, coarsest first ([block, rack]);
	// each node names its domain at every level (its topology: {block: b1, rack: r3}; with
	// node_selector, the node's label of the level's name). Gangs are placed in the fewest
	// domains they can (scheduler.Policy.Topology).
	Topology []string `json:"topology,omitempty"`
	// RequiredTopology or PreferredTopology (one of them, a level of Topology) is how the
	// allocation's gangs share the levels unless a job names its own (required_topology,
	// preferred_topology): required, they start only inside one domain of that level; preferred,
	// in one if one has room. Neither: the finest level, preferred.
	RequiredTopology  string `json:"required_topology,omitempty"`
	PreferredTopology string `json:"preferred_topology,omitempty"`
	// DefragmentAfter is how long a gang that requires a level waits before the allocation
	// moves small jobs out of one domain for it (scheduler.Policy.DefragmentAfter; 0: 15m,
	// negative: never).
	DefragmentAfter Duration `json:"defragment_after,omitempty"`
	// MinRuntimeBeforeMove: a job is moved for a gang only once it has run this long (0: 1h).
	MinRuntimeBeforeMove Duration         `json:"min_runtime_before_move,omitempty"`
	Nodes                []scheduler.Node `json:"nodes"`
	// NodeSelector (backend kubernetes only, instead of nodes) picks the
	// allocation's nodes by their labels: every Kubernetes node with all of
	// them, its GPUs, CPU and memory read from its allocatable and its
	// family from its trainq.io/family label. trainq-worker fills Nodes
	// from it when it starts, and hands nodes that join, leave or change to
	// the allocator while it runs.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Queues are ML Space's queues inside the allocation (see Queue);
	// none: one default queue with every node, class and workspace.
	Queues []Queue `json:"queues,omitempty"`
	// Limits cap the GPUs a workspace may hold in a class (see Limit).
	Limits []Limit `json:"limits,omitempty"`
	// IdleTimeout stops a Jupyter server whose server reports no activity
	// (its /api/status last_activity) for this long (0: never; a queue's
	// idle_timeout overrides it). IdleWarning is how long before that stop
	// the user is warned (0: 5m, at most a quarter of the timeout).
	IdleTimeout Duration `json:"idle_timeout,omitempty"`
	IdleWarning Duration `json:"idle_warning,omitempty"`
}

// MaxPreemptionNotice bounds preemption_notice: a preemptor waits that long.
const MaxPreemptionNotice = time.Hour

// NoticeSignals are the signals notice_signal may name: ones a training
// script can catch, that by default do not dump core or stop the process.
var NoticeSignals = []string{"SIGUSR1", "SIGUSR2", "SIGHUP", "SIGINT"}

// longestNotice is the longest notice any class gets: the policy counts a
// job that honours its notices as losing nothing only where there are
// notices (a job claims it only after the notices it was given).
func (a Allocation) longestNotice() time.Duration {
	d := a.PreemptionNotice.D()
	for _, c := range a.PreemptionNoticeByClass {
		d = max(d, c.D())
	}
	return d
}

// ClassNotices is preemption_notice_by_class as the allocator takes it.
func (a Allocation) ClassNotices() map[string]time.Duration {
	if len(a.PreemptionNoticeByClass) == 0 {
		return nil
	}
	out := make(map[string]time.Duration, len(a.PreemptionNoticeByClass))
	for class, d := range a.PreemptionNoticeByClass {
		out[class] = d.D()
	}
	return out
}

// DefaultReserveAfter is an allocation's reserve_after when the file gives none.
const DefaultReserveAfter = 30 * time.Minute

// Bounds of max_waiting: the allocator carries its whole queue through
// continue-as-new, which Temporal's payload limit bounds.
const (
	DefaultMaxWaiting = 10000
	MaxMaxWaiting     = 50000
)

// Policy is the scheduler policy of the allocation.
func (a Allocation) Policy() scheduler.Policy {
	return scheduler.Policy{Queueing: a.Queueing, MinRuntimeBeforePreemption: a.MinRuntimeBeforePreemption.D(), ReserveAfter: a.ReserveAfter.D(), Backfill: a.Backfill, StarvationAfter: a.StarvationAfter.D(), LossWithinWait: a.LossWithinWait, StrictMaxPreemptions: a.StrictMaxPreemptions,
		MaxPreemptions: a.MaxPreemptions, MaxLossGPUHours: a.MaxLossGPUHours, PreemptionNotice: a.longestNotice(), Limits: a.policyLimits(),
		Ordering: a.Ordering, FairShareHalfLife: a.FairShareHalfLife.D(), FairShareInterval: a.FairShareInterval.D(), Topology: a.Topology,
		GangTopology: a.gangTopology(), DefragmentAfter: a.DefragmentAfter.D(),
		MinRuntimeBeforeMove: a.MinRuntimeBeforeMove.D()}
}

// gangTopology is RequiredTopology or PreferredTopology as the policy's default.
func (a Allocation) gangTopology() scheduler.GangTopology {
	if a.RequiredTopology != "" {
		return scheduler.GangTopology{Level: a.RequiredTopology, Required: true}
	}
	return scheduler.GangTopology{Level: a.PreferredTopology}
}

// Duration is a time.Duration written as "30s" or "5m" in the file.
type Duration time.Duration

func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration such as \"30s\" or \"5m\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &badDurationError{value: s}
	}
	*d = Duration(v)
	return nil
}

// badDurationError is a duration that does not parse. The JSON decoder does
// not say which field it was in; parse finds the field by the value.
type badDurationError struct{ value string }

func (e *badDurationError) Error() string {
	return fmt.Sprintf("%q is not a duration; use a form such as \"30s\" or \"5m\"", e.value)
}

// fieldWithValue returns the path (e.g. regions[0].allocations[1].stop_grace_period)
// of the first field, in document order of keys, whose value is the string v.
func fieldWithValue(doc any, v string) string {
	switch d := doc.(type) {
	case map[string]any:
		keys := make([]string, 0, len(d))
		for k := range d {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if s, ok := d[k].(string); ok && s == v {
				return k
			}
			if p := fieldWithValue(d[k], v); p != "" {
				if strings.HasPrefix(p, "[") {
					return k + p
				}
				return k + "." + p
			}
		}
	case []any:
		for i, e := range d {
			if p := fieldWithValue(e, v); p != "" {
				if !strings.HasPrefix(p, "[") {
					p = "." + p
				}
				return fmt.Sprintf("[%d]%s", i, p)
			}
		}
	}
	return ""
}

// Default returns the embedded configuration.
func Default() *Config {
	c, err := parse(defaultYAML, "embedded default config")
	if err != nil {
		panic(err) // the embedded file is tested
	}
	return c
}

// Load reads path, or the file named by $TRAINQ_CONFIG, or falls back to the
// embedded default when both are empty.
func Load(path string) (*Config, error) {
	if path == "" {
		path = os.Getenv(EnvFile)
	}
	if path == "" {
		return Default(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parse(b, path)
}

func parse(b []byte, source string) (*Config, error) {
	c := &Config{}
	if err := yaml.UnmarshalStrict(b, c); err != nil {
		msg := strings.TrimPrefix(err.Error(), "error unmarshaling JSON: while decoding JSON: ")
		var bad *badDurationError
		var doc any
		if errors.As(err, &bad) && yaml.Unmarshal(b, &doc) == nil {
			if field := fieldWithValue(doc, bad.value); field != "" {
				msg = field + ": " + bad.Error()
			}
		}
		return nil, fmt.Errorf("config %s: %s", source, msg)
	}
	c.source = source
	c.applyDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", source, err)
	}
	return c, nil
}

func (c *Config) applyDefaults() {
	if c.DataDir == "" {
		c.DataDir = ".data/trainq"
	}
	if c.NodeTimeout == 0 {
		c.NodeTimeout = Duration(60 * time.Second)
	}
	if c.ReclaimInterval == 0 {
		c.ReclaimInterval = Duration(30 * time.Second)
	}
	for ri := range c.Regions {
		for ai := range c.Regions[ri].Allocations {
			a := &c.Regions[ri].Allocations[ai]
			if a.Queueing == "" {
				a.Queueing = scheduler.BestEffortFIFO
			}
			if a.StopGracePeriod == 0 {
				a.StopGracePeriod = Duration(30 * time.Second)
			}
			if a.ReserveAfter == 0 {
				a.ReserveAfter = Duration(DefaultReserveAfter)
			}
			if a.MaxPreemptions == 0 {
				a.MaxPreemptions = scheduler.DefaultMaxPreemptions
			}
			if a.MaxLossGPUHours == 0 {
				a.MaxLossGPUHours = scheduler.DefaultMaxLossGPUHours
			}
			if a.MaxWaiting == 0 {
				a.MaxWaiting = DefaultMaxWaiting
			}
		}
	}
	if c.DefaultRegion == "" && len(c.Regions) > 0 {
		c.DefaultRegion = c.Regions[0].Name
	}
	if c.DefaultAllocation == "" {
		c.DefaultAllocation = "default"
	}
}

func (c *Config) validate() error {
	if len(c.Regions) == 0 {
		return errors.New("regions: at least one region is required")
	}
	if c.ReclaimInterval.D() < time.Second {
		return errors.New("reclaim_interval: must be at least 1s")
	}
	if c.NodeTimeout.D() < time.Second {
		return errors.New("node_timeout: must be at least 1s")
	}
	if err := c.validateBackend(); err != nil {
		return err
	}
	if strings.ContainsRune(c.WorkspacesDir, 0) || len(c.WorkspacesDir) > 1024 {
		return errors.New("workspaces_dir: must be a directory path of at most 1024 bytes")
	}
	regions := map[string]bool{}
	nodes := map[string]string{}
	for ri, r := range c.Regions {
		field := fmt.Sprintf("regions[%d]", ri)
		if r.Name == "" {
			return fmt.Errorf("%s.name: must not be empty", field)
		}
		if regions[r.Name] {
			return fmt.Errorf("%s.name: region %q appears twice", field, r.Name)
		}
		regions[r.Name] = true
		if len(r.Allocations) == 0 {
			return fmt.Errorf("%s.allocations: region %q has no allocation", field, r.Name)
		}
		allocs := map[string]bool{}
		for ai, a := range r.Allocations {
			field := fmt.Sprintf("%s.allocations[%d]", field, ai)
			if !protocol.ValidName(a.Name) {
				return fmt.Errorf("%s.name: %q is not a valid name (letters, digits, '-', '_', '.')", field, a.Name)
			}
			if allocs[a.Name] {
				return fmt.Errorf("%s.name: allocation %q appears twice in region %q", field, a.Name, r.Name)
			}
			allocs[a.Name] = true
			if err := a.validatePolicy(field); err != nil {
				return err
			}
			if a.MaxWaiting < 1 || a.MaxWaiting > MaxMaxWaiting {
				return fmt.Errorf("%s.max_waiting: must be between 1 and %d, got %d", field, MaxMaxWaiting, a.MaxWaiting)
			}
			if err := c.checkNodeSelector(field, a); err != nil {
				return err
			}
			if err := a.validateQueues(field); err != nil {
				return err
			}
			if err := a.validateIdle(field); err != nil {
				return err
			}
			if err := a.validateLimits(field); err != nil {
				return err
			}
			if len(a.Nodes) == 0 && len(a.NodeSelector) == 0 {
				return fmt.Errorf("%s.nodes: allocation %q has no node (list nodes, or select them with node_selector when backend is kubernetes)", field, a.Name)
			}
			for ni, n := range a.Nodes {
				nf := fmt.Sprintf("%s.nodes[%d]", field, ni)
				if !protocol.ValidName(n.Name) {
					return fmt.Errorf("%s.name: %q is not a valid node name (letters, digits, '-', '_', '.')", nf, n.Name)
				}
				if owner, dup := nodes[n.Name]; dup {
					return fmt.Errorf("%s.name: node %q is already in allocation %s; node names must be unique", nf, n.Name, owner)
				}
				nodes[n.Name] = r.Name + "/" + a.Name
				if n.Family == "" {
					return fmt.Errorf("%s.family: must not be empty (for example a100plus or cpu)", nf)
				}
				if n.GPUs < 0 || n.CPU < 0 || n.RAMGB < 0 {
					return fmt.Errorf("%s: gpus, cpu and ram_gb must not be negative", nf)
				}
				if err := checkAddress(n.Address); err != nil {
					return fmt.Errorf("%s.address: %w", nf, err)
				}
			}
			if _, err := scheduler.NewPool(a.Nodes, a.Policy()); err != nil {
				return fmt.Errorf("%s: %w", field, err)
			}
		}
	}
	if _, _, err := c.Allocation(c.DefaultRegion, c.DefaultAllocation); err != nil {
		return fmt.Errorf("default_region/default_allocation: %w", err)
	}
	return nil
}

// validatePolicy checks the allocation's scheduling settings; field is the allocation's path
// in the file (regions[i].allocations[j]).
func (a Allocation) validatePolicy(field string) error {
	if a.RequiredTopology != "" && a.PreferredTopology != "" {
		return fmt.Errorf("%s.preferred_topology: set required_topology or preferred_topology, not both", field)
	}
	for _, f := range []struct{ name, level string }{{"required_topology", a.RequiredTopology}, {"preferred_topology", a.PreferredTopology}} {
		if f.level != "" && !slices.Contains(a.Topology, f.level) {
			if len(a.Topology) == 0 {
				return fmt.Errorf("%s.%s: %q names a topology level, but the allocation has no topology (set topology: [block, rack] and each node's place in it)", field, f.name, f.level)
			}
			return fmt.Errorf("%s.%s: %q is not one of the allocation's topology levels (%s)", field, f.name, f.level, strings.Join(a.Topology, ", "))
		}
	}
	if a.Queueing != scheduler.BestEffortFIFO && a.Queueing != scheduler.StrictFIFO {
		return fmt.Errorf("%s.queueing: %q is not allowed; use %q or %q", field, a.Queueing, scheduler.BestEffortFIFO, scheduler.StrictFIFO)
	}
	switch a.Ordering {
	case "", scheduler.SubmissionOrder, scheduler.FairShare:
	default:
		return fmt.Errorf("%s.ordering: %q is not allowed; use %q or %q", field, a.Ordering, scheduler.SubmissionOrder, scheduler.FairShare)
	}
	if a.FairShareHalfLife != 0 && a.FairShareHalfLife < Duration(time.Minute) {
		return fmt.Errorf("%s.fair_share_half_life: must be at least 1m (a GPU-hour used that long ago counts half), got %s", field, a.FairShareHalfLife.D())
	}
	if a.FairShareInterval < 0 || (a.FairShareInterval != 0 && a.FairShareInterval < Duration(time.Second)) {
		return fmt.Errorf("%s.fair_share_interval: must be at least 1s (how often workspaces are ranked by their usage), got %s", field, a.FairShareInterval.D())
	}
	if a.MinRuntimeBeforePreemption < 0 {
		return fmt.Errorf("%s.min_runtime_before_preemption: must not be negative, got %s", field, a.MinRuntimeBeforePreemption.D())
	}
	if a.StopGracePeriod < 0 {
		return fmt.Errorf("%s.stop_grace_period: must not be negative, got %s", field, a.StopGracePeriod.D())
	}
	if a.PreemptionNotice < 0 || a.PreemptionNotice.D() > MaxPreemptionNotice {
		return fmt.Errorf("%s.preemption_notice: must be between 0 and %s, got %s", field, MaxPreemptionNotice, a.PreemptionNotice.D())
	}
	for _, class := range slices.Sorted(maps.Keys(a.PreemptionNoticeByClass)) {
		if _, err := scheduler.ParseClass(class); err != nil || class != strings.ToLower(strings.TrimSpace(class)) || class == "" {
			return fmt.Errorf("%s.preemption_notice_by_class: %q is not a class; use low, medium or high", field, class)
		}
		if d := a.PreemptionNoticeByClass[class]; d < 0 || d.D() > MaxPreemptionNotice {
			return fmt.Errorf("%s.preemption_notice_by_class.%s: must be between 0 and %s, got %s", field, class, MaxPreemptionNotice, d.D())
		}
	}
	if a.NoticeSignal != "" && !slices.Contains(NoticeSignals, a.NoticeSignal) {
		return fmt.Errorf("%s.notice_signal: %q is not allowed; use one of %s (or leave it out for none)", field, a.NoticeSignal, strings.Join(NoticeSignals, ", "))
	}
	if a.DefaultTimeLimit < 0 || a.MaxTimeLimit < 0 {
		return fmt.Errorf("%s.default_time_limit, max_time_limit: must not be negative", field)
	}
	if a.MaxTimeLimit > 0 && a.DefaultTimeLimit > a.MaxTimeLimit {
		return fmt.Errorf("%s.default_time_limit: %s is more than max_time_limit %s", field, a.DefaultTimeLimit.D(), a.MaxTimeLimit.D())
	}
	if a.ReserveAfter < Duration(time.Minute) {
		return fmt.Errorf("%s.reserve_after: must be at least 1m (the first request of a class waits that long before nodes are drained for it), got %s", field, a.ReserveAfter.D())
	}
	if a.StarvationAfter != 0 && a.StarvationAfter < Duration(time.Hour) {
		return fmt.Errorf("%s.starvation_after: must be 0 (off) or at least 1h (the first job of a class waits that long before max_loss_gpu_hours and min_runtime_before_preemption stop protecting lower-class jobs from it), got %s", field, a.StarvationAfter.D())
	}
	if a.MaxPreemptions < -1 {
		return fmt.Errorf("%s.max_preemptions: must be at least 1 (a job preempted that many times is not preempted again), or -1 for no limit; got %d", field, a.MaxPreemptions)
	}
	if a.MaxLossGPUHours < -1 {
		return fmt.Errorf("%s.max_loss_gpu_hours: must be at least 1 (no preemption may throw away more GPU-hours of work), or -1 for no limit; got %d", field, a.MaxLossGPUHours)
	}
	return nil
}

// Source says where the config came from, for messages.
func (c *Config) Source() string { return c.source }

// Allocation finds an allocation. Empty region or name mean the defaults.
// The error names the allowed values.
func (c *Config) Allocation(region, name string) (*Region, *Allocation, error) {
	if region == "" {
		region = c.DefaultRegion
	}
	if name == "" {
		name = c.DefaultAllocation
	}
	var names []string
	for ri := range c.Regions {
		r := &c.Regions[ri]
		names = append(names, r.Name)
		if r.Name != region {
			continue
		}
		var allocs []string
		for ai := range r.Allocations {
			if r.Allocations[ai].Name == name {
				return r, &r.Allocations[ai], nil
			}
			allocs = append(allocs, r.Allocations[ai].Name)
		}
		return nil, nil, fmt.Errorf("allocation %q does not exist in region %s; allowed: %s", name, region, strings.Join(allocs, ", "))
	}
	sort.Strings(names)
	return nil, nil, fmt.Errorf("region %q does not exist; allowed: %s", region, strings.Join(names, ", "))
}

// DefaultNotebookInstance is the instance type of a Jupyter server that
// names none: one GPU of the family of the allocation's first GPU node (or a
// small CPU slice when it has none).
func (c *Config) DefaultNotebookInstance(region, alloc string) string {
	_, a, err := c.Allocation(region, alloc)
	if err != nil {
		return "a100.1gpu" // the bad region/allocation is reported by Check
	}
	for _, n := range a.Nodes {
		if n.GPUs > 0 {
			return n.Family + ".1gpu"
		}
	}
	return "cpu.1C.1G"
}

// AllocationRef names one allocation.
type AllocationRef struct {
	Region     string
	Allocation *Allocation
}

// Allocations lists every allocation in config order.
func (c *Config) Allocations() []AllocationRef {
	var out []AllocationRef
	for ri := range c.Regions {
		for ai := range c.Regions[ri].Allocations {
			out = append(out, AllocationRef{Region: c.Regions[ri].Name, Allocation: &c.Regions[ri].Allocations[ai]})
		}
	}
	return out
}

// NodeAddress is the address of the named node from the config ("" if
// it has none or is not configured).
func (c *Config) NodeAddress(node string) string {
	for _, ref := range c.Allocations() {
		for _, n := range ref.Allocation.Nodes {
			if n.Name == node {
				return n.Address
			}
		}
	}
	return ""
}

// checkAddress accepts "" (this machine), an IP address or a host name.
func checkAddress(addr string) error {
	if addr == "" || net.ParseIP(addr) != nil {
		return nil
	}
	if strings.Contains(addr, ":") {
		return fmt.Errorf("%q is not allowed; give a host name or an IP address without a port (MASTER_PORT is picked per job)", addr)
	}
	if !dnsSubdomain(strings.ToLower(addr)) {
		return fmt.Errorf("%q is not a host name or IP address (letters, digits, '-' and '.', such as gpu-7.example.com or 10.0.0.7)", addr)
	}
	return nil
}

// Nodes lists every node name across allocations, in config order.
func (c *Config) Nodes() []string {
	var out []string
	for _, ref := range c.Allocations() {
		for _, n := range ref.Allocation.Nodes {
			out = append(out, n.Name)
		}
	}
	return out
}

// AllocatorInput is the start input of the allocator of one allocation: its nodes, policy and
// limits as this config gives them.
func (c *Config) AllocatorInput(region, allocation string) (protocol.AllocatorInput, error) {
	_, a, err := c.Allocation(region, allocation)
	if err != nil {
		return protocol.AllocatorInput{}, err
	}
	return protocol.AllocatorInput{
		Region:           region,
		Allocation:       a.Name,
		Nodes:            a.Nodes,
		Policy:           a.Policy(),
		StopGracePeriod:  a.StopGracePeriod.D(),
		ReclaimInterval:  c.ReclaimInterval.D(),
		NodeTimeout:      c.NodeTimeout.D(),
		MaxWaiting:       a.MaxWaiting,
		WaitingLimits:    a.WaitingLimits(),
		PreemptionNotice: a.PreemptionNotice.D(),

		ClassPreemptionNotice: a.ClassNotices(),
		NoticeSignal:          a.NoticeSignal,
	}, nil
}
