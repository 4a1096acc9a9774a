package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// Submission is an accepted job.
type Submission struct {
	JobName string   `json:"job_name"`
	Status  string   `json:"status"`
	Notes   []string `json:"notes,omitempty"`
}

// SubmitOptions tune Submit.
type SubmitOptions struct {
	// Name is the job name; empty means a new lm-mpi-job-<uuid>.
	Name string
	// RequestHash is recorded in the memo (MemoRequestHash) so that a
	// client retrying with an Idempotency-Key can be told apart from one
	// reusing the key for another request.
	RequestHash string
	// SentHash is recorded in the memo too (MemoSentHash): the hash of the
	// request as sent, before the config filled in its defaults, so that a
	// retry is still known after a config reload changed those defaults.
	SentHash string
	// RequestCheckInterval, when set, replaces the 30 minutes a waiting
	// attempt waits before it makes sure the allocator has its request
	// (protocol.JobInput.RequestCheckInterval). For tests that scale their
	// timeouts down; the API and the CLI never set it.
	RequestCheckInterval time.Duration
}

// ErrJobExists is returned by Submit when the name belongs to a closed job.
var ErrJobExists = errors.New("a job with this name exists")

// Memo fields of a job workflow.
const (
	MemoRequestHash  = "trainq_request_hash"
	MemoSentHash     = "trainq_sent_hash"
	MemoInstanceType = "instance_type"
	MemoJobDesc      = "job_desc"
)

// memoJobDescMax bounds the job description copied into the memo, which
// every list answer carries.
const memoJobDescMax = 1024

// Check validates spec against the configuration and fills in defaults
// (CheckSpec, for a caller that keeps the spec only).
func Check(cfg *config.Config, spec *protocol.JobSpec) (notes []string, err error) {
	checked, notes, err := CheckSpec(cfg, *spec)
	if err == nil {
		*spec = checked.JobSpec
	}
	return notes, err
}

// CheckSpec is the edge of a submission: it decodes spec's strings once
// (protocol.ParseSpec), checks its limits (protocol.CheckLimits), validates
// it against the configuration and fills in defaults, and returns the checked spec the rest of the way
// takes (SubmitChecked, DryRun). It returns a *protocol.FieldError naming
// the field for bad input.
func CheckSpec(cfg *config.Config, raw protocol.JobSpec) (checked protocol.CheckedSpec, notes []string, err error) {
	namedClass := raw.PriorityClass != ""
	c, notes, err := protocol.ParseSpec(raw)
	if err == nil {
		err = c.CheckLimits() // what cannot start anywhere, before what this configuration allows
	}
	if err != nil {
		return c, nil, err
	}
	notes, err = applyConfig(cfg, &c, notes, namedClass)
	return c, notes, err
}

func applyConfig(cfg *config.Config, spec *protocol.CheckedSpec, notes []string, namedClass bool) ([]string, error) {
	if spec.Region == "" {
		spec.Region = cfg.DefaultRegion
	}
	if spec.AllocationName == "" {
		spec.AllocationName = cfg.DefaultAllocation
	}
	region, alloc, err := cfg.Allocation(spec.Region, spec.AllocationName)
	if err != nil {
		field := "allocation_name"
		if region == nil && strings.HasPrefix(err.Error(), "region") {
			field = "region"
		}
		return nil, &protocol.FieldError{Field: field, Message: err.Error()}
	}
	spec.Region = region.Name
	note, err := applyQueue(spec, alloc, namedClass)
	if err != nil {
		return nil, err
	}
	if note != "" {
		notes = append(notes, note)
	}
	if err := checkPlacementFields(cfg, &spec.JobSpec, alloc); err != nil {
		return nil, err
	}
	if note, err := applyTimeLimit(&spec.JobSpec, alloc); err != nil {
		return nil, err
	} else if note != "" {
		notes = append(notes, note)
	}
	if note := applyIdleRule(&spec.JobSpec, alloc); note != "" {
		notes = append(notes, note)
	}
	most, least := spec.GangSize()
	req := protocol.CapacityRequest{Job: "check", Attempt: 1, Kind: spec.Kind, Class: spec.Class(), Workers: most, MinWorkers: least, Topology: spec.Topology,
		Workspace: spec.Workspace}.SchedulerRequestOf(spec.Demand())
	if err := alloc.Policy().AdmitCap(req); err != nil {
		return nil, &protocol.FieldError{Field: "priority_class", Message: err.Error()}
	}
	if len(alloc.NodeSelector) > 0 && len(alloc.Nodes) == 0 {
		// The nodes are picked in the cluster by trainq-worker, which
		// refuses a request that can never fit them.
		return notes, nil
	}
	pool, err := scheduler.NewPool(alloc.Nodes, alloc.Policy())
	if err != nil {
		return nil, err
	}
	one := req
	one.Workers, one.MinWorkers, one.Topology = 1, 0, scheduler.GangTopology{}
	if err := pool.Admit(one); err != nil {
		return nil, &protocol.FieldError{Field: "instance_type", Message: err.Error()}
	}
	if err := pool.Admit(req); err != nil {
		field := "n_workers"
		if req.MinWorkers > 0 {
			field = "elastic_min_workers"
		}
		msg := err.Error()
		if te := (*scheduler.TopologyError)(nil); errors.As(err, &te) && te.Field != "" {
			field, msg = te.Field, strings.TrimPrefix(msg, te.Field+": ")
		}
		return nil, &protocol.FieldError{Field: field, Message: msg}
	}
	if req.Nodes = spec.AllowedNodes; len(req.Nodes) > 0 {
		if err := pool.Admit(req); err != nil {
			return nil, &protocol.FieldError{Field: constraintField(&spec.JobSpec), Message: err.Error()}
		}
	}
	return notes, nil
}

// constraintField names the field that narrowed a job's nodes.
func constraintField(spec *protocol.JobSpec) string {
	switch {
	case len(spec.IncludeNodes) > 0:
		return "include_nodes"
	case len(spec.ExcludeNodes) > 0:
		return "exclude_nodes"
	}
	return "queue_name"
}

// applyTimeLimit gives a job its allocation's default time limit when it
// names none, and refuses a longer one than the allocation's maximum.
func applyTimeLimit(spec *protocol.JobSpec, alloc *config.Allocation) (note string, err error) {
	if spec.Kind == scheduler.KindNotebook {
		return "", nil
	}
	def, most := alloc.DefaultTimeLimit.D(), alloc.MaxTimeLimit.D()
	switch {
	case most > 0 && spec.TimeLimit > most:
		return "", &protocol.FieldError{Field: "stop_timer", Message: fmt.Sprintf(
			"%d minutes is more than allocation %s allows: at most %d minutes (max_time_limit %s)",
			int(spec.TimeLimit/time.Minute), alloc.Name, int(most/time.Minute), most)}
	case spec.TimeLimit == 0 && def > 0:
		spec.TimeLimit = def
		return fmt.Sprintf("stop_timer is allocation %s's default: the job is stopped after %s of running", alloc.Name, def), nil
	case spec.TimeLimit == 0 && most > 0:
		spec.TimeLimit = most
		return fmt.Sprintf("stop_timer is allocation %s's maximum: the job is stopped after %s of running", alloc.Name, most), nil
	}
	return "", nil
}

// applyIdleRule gives a Jupyter server its queue's idle_timeout (else its
// allocation's), as the config says now: a server submitted again (a
// restart) takes the rule in force, not the one it was first given.
func applyIdleRule(spec *protocol.JobSpec, alloc *config.Allocation) (note string) {
	if spec.Kind != scheduler.KindNotebook {
		return ""
	}
	q, err := alloc.QueueNamed(spec.QueueName)
	if err != nil {
		return "" // applyQueue has refused it already
	}
	r := alloc.IdleRule(q)
	a := &protocol.NotebookShutdown{}
	if spec.Autoshutdown != nil {
		*a = *spec.Autoshutdown // a copy: the caller's spec may share it
	}
	a.IdleTimeout, a.IdleRule, a.Warning = r.Timeout, r.Source, r.Warning
	if !a.Any() {
		spec.Autoshutdown = nil
		return ""
	}
	spec.Autoshutdown = a
	if r.Timeout <= 0 {
		return ""
	}
	return fmt.Sprintf("idle_timeout of %s: the Jupyter server is stopped once its /api/status has shown no activity for %s, with a warning %s before",
		r.Source, r.Timeout, a.WarningFor(r.Timeout))
}

// applyQueue puts the request in its queue (queue_name, else the
// allocation's default queue): the queue must be assigned to the request's
// workspace and allow its class; a request that names no class gets the
// queue's default. A caller with no workspace (an operator's CLI) may use
// any queue.
func applyQueue(spec *protocol.CheckedSpec, alloc *config.Allocation, namedClass bool) (note string, err error) {
	q, err := alloc.QueueNamed(spec.QueueName)
	if err != nil {
		return "", &protocol.FieldError{Field: "queue_name", Message: err.Error()}
	}
	if !q.AssignedTo(spec.Workspace) {
		return "", &protocol.FieldError{Field: "queue_name", Forbidden: true, Message: fmt.Sprintf(
			"workspace %s is not assigned to queue %s of allocation %s; it is assigned to %s", spec.Workspace, q.Name, alloc.Name, strings.Join(q.Workspaces, ", "))}
	}
	spec.QueueName = q.Name
	if !namedClass && spec.Kind != scheduler.KindNotebook {
		if c := q.DefaultClass(spec.Kind); c != spec.Class() {
			spec.SetClass(c)
			note = fmt.Sprintf("priority_class is queue %s's default for jobs: %s", q.Name, c)
		}
	}
	if class := spec.Class(); !q.Allows(class) {
		what := "priority_class " + class.String()
		if spec.Kind == scheduler.KindNotebook {
			what = "a Jupyter server (always high)"
		}
		return "", &protocol.FieldError{Field: "priority_class", Forbidden: true, Message: fmt.Sprintf(
			"queue %s of allocation %s does not allow %s; it allows %s", q.Name, alloc.Name, what, q.AllowedText())}
	}
	return note, nil
}

// checkPlacementFields checks queue_name, include_nodes and exclude_nodes
// against the allocation, and says in the spec's warnings what trainq does
// not do with them, and with shm_size_class and internet on this backend.
func checkPlacementFields(cfg *config.Config, spec *protocol.JobSpec, alloc *config.Allocation) error {
	if len(alloc.Nodes) > 0 {
		known := map[string]bool{}
		var names []string
		for _, n := range alloc.Nodes {
			known[n.Name] = true
			names = append(names, n.Name)
		}
		for _, l := range []struct {
			field string
			nodes []string
		}{{"include_nodes", spec.IncludeNodes}, {"exclude_nodes", spec.ExcludeNodes}} {
			for i, n := range l.nodes {
				if !known[n] {
					return &protocol.FieldError{Field: fmt.Sprintf("%s[%d]", l.field, i),
						Message: fmt.Sprintf("allocation %s has no node %s; its nodes are %s", alloc.Name, n, strings.Join(names, ", "))}
				}
			}
		}
	}
	if cfg.Backend != config.BackendKubernetes {
		if spec.ShmSizeClass != "" {
			spec.Warn(fmt.Sprintf("shm_size_class %s: the local backend's workers use the host's /dev/shm", spec.ShmSizeClass))
		}
		if spec.Internet != nil && !*spec.Internet {
			spec.Warn("internet false: the local backend does not restrict network access")
		}
	} else if spec.Internet != nil && !*spec.Internet {
		spec.Warn("internet false: the job's pods are labelled trainq.io/internet=false, which the NetworkPolicy trainq-no-internet of deploy/kubernetes keeps inside the cluster where the network plugin enforces NetworkPolicy")
	}
	return allowNodes(spec, alloc)
}

// allowNodes works out the nodes the job may run on: its queue's (all the
// allocation's when the queue lists none), within include_nodes, less
// exclude_nodes. None left is refused; all of them is no constraint.
func allowNodes(spec *protocol.JobSpec, alloc *config.Allocation) error {
	q, err := alloc.QueueNamed(spec.QueueName)
	if err != nil {
		return &protocol.FieldError{Field: "queue_name", Message: err.Error()}
	}
	if len(alloc.Nodes) == 0 {
		// Nodes picked by node_selector are known only in the cluster.
		switch {
		case len(spec.IncludeNodes) > 0:
			spec.AllowedNodes = slices.Clone(spec.IncludeNodes)
			if len(spec.ExcludeNodes) > 0 {
				spec.AllowedNodes = slices.DeleteFunc(spec.AllowedNodes, func(n string) bool { return slices.Contains(spec.ExcludeNodes, n) })
			}
		case len(spec.ExcludeNodes) > 0:
			spec.Warn(fmt.Sprintf("exclude_nodes: allocation %s picks its nodes by node_selector, so trainq cannot list the others; name the nodes to use in include_nodes", alloc.Name))
		}
		if len(spec.IncludeNodes) > 0 && len(spec.AllowedNodes) == 0 {
			return &protocol.FieldError{Field: "exclude_nodes", Message: "excludes every node include_nodes names: the job could run nowhere"}
		}
		return nil
	}
	inQueue := alloc.QueueNodeNames(q)
	for i, n := range spec.IncludeNodes {
		if !slices.Contains(inQueue, n) {
			return &protocol.FieldError{Field: fmt.Sprintf("include_nodes[%d]", i),
				Message: fmt.Sprintf("node %s is not in queue %s; its nodes are %s", n, q.Name, strings.Join(inQueue, ", "))}
		}
	}
	allowed := slices.DeleteFunc(slices.Clone(inQueue), func(n string) bool {
		return (len(spec.IncludeNodes) > 0 && !slices.Contains(spec.IncludeNodes, n)) || slices.Contains(spec.ExcludeNodes, n)
	})
	if len(allowed) == 0 {
		field := "exclude_nodes"
		if len(spec.ExcludeNodes) == 0 {
			field = "include_nodes"
		}
		return &protocol.FieldError{Field: field, Message: fmt.Sprintf("leaves no node of queue %s of allocation %s to run on", q.Name, alloc.Name)}
	}
	if len(allowed) < len(alloc.Nodes) {
		spec.AllowedNodes = allowed
	}
	return nil
}

// NewJobName makes an ML Space-style job name.
func NewJobName(kind scheduler.Kind) string {
	if kind == scheduler.KindNotebook {
		return protocol.NotebookNamePrefix + uuid.NewString()
	}
	return protocol.JobNamePrefix + uuid.NewString()
}

// Submit validates spec and starts its job workflow. Starting a name whose
// workflow runs starts nothing and answers with that job; starting a name
// whose workflow has closed fails with ErrJobExists (a closed job is never
// run again under the same name).
func (c *Client) Submit(ctx context.Context, spec protocol.JobSpec, opts SubmitOptions) (Submission, error) {
	if c.config() == nil {
		return Submission{}, errors.New("submit: the client has no configuration to check the job against")
	}
	checked, notes, err := CheckSpec(c.config(), spec)
	if err != nil {
		return Submission{}, err
	}
	sub, err := c.SubmitChecked(ctx, checked, opts)
	sub.Notes = append(notes, sub.Notes...)
	return sub, err
}

// SubmitChecked starts the job of a spec CheckSpec returned, after the
// queue-length check; it answers no notes of its own. A job of opts.Name
// that exists already is ErrJobExists, even where the queue is full: a
// retried submission of a job that waits must find it, not be refused for
// the room the job itself takes.
func (c *Client) SubmitChecked(ctx context.Context, spec protocol.CheckedSpec, opts SubmitOptions) (Submission, error) {
	if err := c.checkQueueRoom(ctx, spec); err != nil {
		if opts.Name != "" && c.workflowExists(ctx, opts.Name) {
			return Submission{JobName: opts.Name}, fmt.Errorf("%w: %s", ErrJobExists, opts.Name)
		}
		return Submission{}, err
	}
	name := opts.Name
	if name == "" {
		name = NewJobName(spec.Kind)
	}
	_, err := c.Temporal.ExecuteWorkflow(ctx, jobStartOptions(name, spec, opts), protocol.JobWorkflowName, protocol.JobInput{Name: name, Spec: spec.JobSpec, RequestCheckInterval: opts.RequestCheckInterval})
	if err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return Submission{JobName: name}, fmt.Errorf("%w: %s", ErrJobExists, name)
		}
		return Submission{}, fmt.Errorf("could not start job %s: %w", name, err)
	}
	return Submission{JobName: name, Status: string(protocol.StatePending)}, nil
}

// jobStartOptions start a job's workflow: its search attributes say what
// lists filter on, its memo what they show.
func jobStartOptions(name string, spec protocol.CheckedSpec, opts SubmitOptions) sdkclient.StartWorkflowOptions {
	desc := spec.JobDesc
	if len(desc) > memoJobDescMax {
		desc = strings.ToValidUTF8(desc[:memoJobDescMax], "")
	}
	memo := map[string]any{MemoInstanceType: spec.InstanceType, MemoJobDesc: desc}
	if opts.RequestHash != "" {
		memo[MemoRequestHash] = opts.RequestHash
	}
	if opts.SentHash != "" {
		memo[MemoSentHash] = opts.SentHash
	}
	return sdkclient.StartWorkflowOptions{
		ID:                       name,
		TaskQueue:                protocol.TaskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		Memo:                     memo,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			protocol.KeyState.ValueSet(string(protocol.StatePending)),
			protocol.KeyPriority.ValueSet(spec.PriorityClass),
			protocol.KeyAllocation.ValueSet(spec.AllocationName),
			protocol.KeyRegion.ValueSet(spec.Region),
			protocol.KeyAuthor.ValueSet(spec.Author),
			protocol.KeyWorkspace.ValueSet(spec.Workspace),
			protocol.KeyQueue.ValueSet(spec.QueueName),
			protocol.KeyKind.ValueSet(string(spec.Kind)),
			protocol.KeyAttempt.ValueSet(1),
			protocol.KeyGPUs.ValueSet(int64(spec.GPUs())),
		),
		StaticSummary: Summary(spec.JobSpec),
		StaticDetails: Details(spec.JobSpec),
		// A task lost with a killed trainq-worker is retried after this
		// (the default is 10s); a job's tasks take milliseconds.
		WorkflowTaskTimeout: protocol.JobTaskTimeout,
	}
}

// Restart submits a new job with the spec of the job name (ML Space's
// restart): same script, image, size, class and allocation, under a new
// name. The old job is left as it is.
//
// The spec is read from the input the job's current run started with, which
// needs only the Temporal server: a status query needs a worker to take it,
// and to replay the whole job if it has ended (a busy worker left `trainq
// restart` with "query timed out before a worker could process it").
func (c *Client) Restart(ctx context.Context, name string, opts SubmitOptions) (Submission, error) {
	in, err := c.startInput(ctx, name)
	if err != nil {
		return Submission{}, err
	}
	return c.Submit(ctx, in.Spec, opts)
}

// startInput is the input the job's current run started with.
func (c *Client) startInput(ctx context.Context, name string) (protocol.JobInput, error) {
	var in protocol.JobInput
	iter := c.Temporal.GetWorkflowHistory(ctx, name, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !iter.HasNext() {
		return in, fmt.Errorf("%w: %s", ErrJobNotFound, name)
	}
	first, err := iter.Next()
	if err != nil {
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return in, fmt.Errorf("%w: %s", ErrJobNotFound, name)
		}
		return in, err
	}
	started := first.GetWorkflowExecutionStartedEventAttributes()
	if started == nil || started.GetWorkflowType().GetName() != protocol.JobWorkflowName {
		return in, fmt.Errorf("%w: %s", ErrJobNotFound, name)
	}
	if err := converter.GetDefaultDataConverter().FromPayloads(started.GetInput(), &in); err != nil {
		return in, fmt.Errorf("read job %s's spec: %w", name, err)
	}
	return in, nil
}

// workflowExists says whether a workflow of that ID exists, running or
// closed; an error other than "not found" answers no.
func (c *Client) workflowExists(ctx context.Context, id string) bool {
	_, err := c.Temporal.DescribeWorkflow(ctx, id, "")
	return err == nil
}
