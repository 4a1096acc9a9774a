package workflows

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// This file is the client side of the workflows: what the CLI and the REST
// API call. Every function validates at the edge, so a rejected request
// starts nothing.

// ErrJobNotFound is returned for a job name no workflow has.
var ErrJobNotFound = errors.New("job not found")

// Dial connects to Temporal with the standard TEMPORAL_* environment
// variables and config profiles (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, ...).
func Dial(ctx context.Context, logger sdklog.Logger) (client.Client, error) {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		return nil, fmt.Errorf("temporal connection settings: %w", err)
	}
	opts.Logger = logger
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		addr := opts.HostPort
		if addr == "" {
			addr = client.DefaultHostPort
		}
		return nil, fmt.Errorf("cannot reach Temporal at %s (set TEMPORAL_ADDRESS, or start a dev server with `make dev`): %w", addr, err)
	}
	return c, nil
}

// Namespace is the Temporal namespace the environment selects.
func Namespace() string {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil || opts.Namespace == "" {
		return client.DefaultNamespace
	}
	return opts.Namespace
}

// Submission is an accepted job.
type Submission struct {
	JobName string   `json:"job_name"`
	Status  string   `json:"status"`
	Notes   []string `json:"notes,omitempty"`
}

// Check validates spec against the configuration and fills in defaults. It
// returns a *protocol.FieldError naming the field for bad input.
func Check(cfg *config.Config, spec *protocol.JobSpec) (notes []string, err error) {
	notes, err = spec.Normalize()
	if err != nil {
		return nil, err
	}
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
	pool, err := scheduler.NewPool(alloc.Nodes, alloc.Policy())
	if err != nil {
		return nil, err
	}
	req := scheduler.Request{Job: "check", Attempt: 1, Kind: spec.Kind, Class: spec.Class(), Demand: spec.Demand(), Workers: 1}
	if err := pool.Admit(req); err != nil {
		return nil, &protocol.FieldError{Field: "instance_type", Message: err.Error()}
	}
	req.Workers = spec.NWorkers
	if err := pool.Admit(req); err != nil {
		return nil, &protocol.FieldError{Field: "n_workers", Message: err.Error()}
	}
	return notes, nil
}

// NewJobName makes an ML Space-style job name.
func NewJobName(kind scheduler.Kind) string {
	if kind == scheduler.KindNotebook {
		return protocol.NotebookNamePrefix + uuid.NewString()
	}
	return protocol.JobNamePrefix + uuid.NewString()
}

// Submit validates spec and starts its job workflow under name (a new name
// if empty). Starting the same name twice starts one workflow.
func Submit(ctx context.Context, c client.Client, cfg *config.Config, name string, spec protocol.JobSpec) (Submission, error) {
	notes, err := Check(cfg, &spec)
	if err != nil {
		return Submission{}, err
	}
	if name == "" {
		name = NewJobName(spec.Kind)
	}
	opts := client.StartWorkflowOptions{
		ID:                       name,
		TaskQueue:                protocol.TaskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			protocol.KeyState.ValueSet(string(protocol.StatePending)),
			protocol.KeyPriority.ValueSet(spec.PriorityClass),
			protocol.KeyAllocation.ValueSet(spec.AllocationName),
			protocol.KeyRegion.ValueSet(spec.Region),
			protocol.KeyAuthor.ValueSet(spec.Author),
			protocol.KeyWorkspace.ValueSet(spec.Workspace),
			protocol.KeyKind.ValueSet(string(spec.Kind)),
			protocol.KeyAttempt.ValueSet(1),
			protocol.KeyGPUs.ValueSet(int64(spec.GPUs())),
		),
		StaticSummary: Summary(spec),
		StaticDetails: Details(spec),
	}
	if _, err := c.ExecuteWorkflow(ctx, opts, protocol.JobWorkflowName, protocol.JobInput{Name: name, Spec: spec}); err != nil {
		return Submission{}, fmt.Errorf("could not start job %s: %w", name, err)
	}
	return Submission{JobName: name, Status: string(protocol.StatePending), Notes: notes}, nil
}

// Summary is the one-line summary the Web UI shows for a job.
func Summary(s protocol.JobSpec) string {
	kind := ""
	if s.Kind == scheduler.KindNotebook {
		kind = "Jupyter · "
	}
	return fmt.Sprintf("%s%s · %d×%s · %s/%s · max_retry %d", kind, s.PriorityClass, s.NWorkers, s.InstanceType, s.Region, s.AllocationName, s.MaxRetry)
}

// Details is the Markdown spec the Web UI shows for a job.
func Details(s protocol.JobSpec) string {
	var b strings.Builder
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "| %s | `%s` |\n", k, strings.ReplaceAll(v, "|", "\\|"))
		}
	}
	b.WriteString("| field | value |\n|---|---|\n")
	row("script", s.Script)
	row("type", s.Type)
	row("base_image", s.BaseImage)
	row("instance_type", s.InstanceType)
	row("n_workers", fmt.Sprint(s.NWorkers))
	row("processes_per_worker", fmt.Sprint(s.ProcessesPerWorker))
	row("priority_class", s.PriorityClass)
	row("max_retry", fmt.Sprint(s.MaxRetry))
	row("region", s.Region)
	row("allocation_name", s.AllocationName)
	row("job_desc", s.JobDesc)
	row("checkpoint_dir", s.CheckpointDir)
	row("author", s.Author)
	row("workspace", s.Workspace)
	for _, k := range sortedMapKeys(s.EnvVariables) {
		row("env "+k, s.EnvVariables[k])
	}
	for _, k := range sortedMapKeys(s.Flags) {
		row("flag --"+k, s.Flags[k])
	}
	return b.String()
}

func sortedMapKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Status returns a job's status; while it waits, with its place in the queue
// and the reason.
func Status(ctx context.Context, c client.Client, name string) (protocol.JobStatus, error) {
	var st protocol.JobStatus
	resp, err := c.QueryWorkflow(ctx, name, "", protocol.QueryStatus)
	if err != nil {
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return st, fmt.Errorf("%w: %s", ErrJobNotFound, name)
		}
		return st, err
	}
	if err := resp.Get(&st); err != nil {
		return st, err
	}
	if st.State == protocol.StatePending && st.Region != "" {
		if ex, err := Explain(ctx, c, st.Region, st.Allocation, name); err == nil && ex.Waiting != nil {
			st.Position, st.Reason, st.WaitingFor = ex.Waiting.Position, ex.Waiting.Reason, ex.Waiting.WaitingFor
		}
	}
	return st, nil
}

// Explain asks the allocator where a job stands.
func Explain(ctx context.Context, c client.Client, region, allocation, job string) (ExplainReply, error) {
	var ex ExplainReply
	resp, err := c.QueryWorkflow(ctx, protocol.AllocatorWorkflowID(region, allocation), "", protocol.QueryExplain, job)
	if err != nil {
		return ex, err
	}
	return ex, resp.Get(&ex)
}

// Queue returns the allocator's view of an allocation.
func Queue(ctx context.Context, c client.Client, region, allocation string) (protocol.QueueView, error) {
	var v protocol.QueueView
	resp, err := c.QueryWorkflow(ctx, protocol.AllocatorWorkflowID(region, allocation), "", protocol.QueryQueue)
	if err != nil {
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return v, fmt.Errorf("allocation %s/%s has no running allocator; is trainq-worker running?", region, allocation)
		}
		return v, err
	}
	return v, resp.Get(&v)
}

// Cancel stops a job: its workers are stopped and it ends Stopped. Stopping
// a finished job is a no-op.
func Cancel(ctx context.Context, c client.Client, name string) error {
	err := c.CancelWorkflow(ctx, name, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		if _, derr := c.DescribeWorkflowExecution(ctx, name, ""); derr != nil {
			return fmt.Errorf("%w: %s", ErrJobNotFound, name)
		}
		return nil // already finished
	}
	return err
}

// ListFilter selects jobs by their search attributes.
type ListFilter struct {
	States     []string
	Region     string
	Allocation string
	Author     string
	Workspace  string
	Since      time.Time
	Until      time.Time
	Limit      int
}

// JobSummary is one row of a job list.
type JobSummary struct {
	JobName    string     `json:"job_name"`
	Status     string     `json:"status"`
	Kind       string     `json:"type"`
	Priority   string     `json:"priority_class"`
	Region     string     `json:"region"`
	Allocation string     `json:"allocation_name"`
	Author     string     `json:"job_author,omitempty"`
	Workspace  string     `json:"workspace,omitempty"`
	GPUs       int64      `json:"gpu_count"`
	Attempt    int64      `json:"attempt"`
	CreatedAt  time.Time  `json:"created_dt"`
	ClosedAt   *time.Time `json:"completed_dt,omitempty"`
}

// VisibilityQuery turns a filter into a Temporal list-filter expression.
func VisibilityQuery(f ListFilter) string {
	q := []string{fmt.Sprintf("WorkflowType = '%s'", protocol.JobWorkflowName)}
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "") + "'" }
	if len(f.States) > 0 {
		var vals []string
		for _, s := range f.States {
			vals = append(vals, quote(s))
		}
		q = append(q, fmt.Sprintf("%s IN (%s)", protocol.SAState, strings.Join(vals, ", ")))
	}
	for _, kv := range [][2]string{{protocol.SARegion, f.Region}, {protocol.SAAllocation, f.Allocation}, {protocol.SAAuthor, f.Author}, {protocol.SAWorkspace, f.Workspace}} {
		if kv[1] != "" {
			q = append(q, fmt.Sprintf("%s = %s", kv[0], quote(kv[1])))
		}
	}
	if !f.Since.IsZero() {
		q = append(q, fmt.Sprintf("StartTime >= '%s'", f.Since.UTC().Format(time.RFC3339)))
	}
	if !f.Until.IsZero() {
		q = append(q, fmt.Sprintf("StartTime <= '%s'", f.Until.UTC().Format(time.RFC3339)))
	}
	return strings.Join(q, " AND ")
}

// List lists jobs through Temporal visibility, newest first.
func List(ctx context.Context, c client.Client, f ListFilter) ([]JobSummary, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var out []JobSummary
	var token []byte
	for len(out) < f.Limit {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: VisibilityQuery(f), PageSize: int32(min(f.Limit-len(out), 1000)), NextPageToken: token,
		})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetExecutions() {
			sa := e.GetSearchAttributes().GetIndexedFields()
			str := func(k string) string {
				var s string
				if p, ok := sa[k]; ok {
					_ = decodePayload(p, &s)
				}
				return s
			}
			num := func(k string) int64 {
				var n int64
				if p, ok := sa[k]; ok {
					_ = decodePayload(p, &n)
				}
				return n
			}
			js := JobSummary{
				JobName: e.GetExecution().GetWorkflowId(), Status: str(protocol.SAState), Kind: str(protocol.SAKind),
				Priority: str(protocol.SAPriority), Region: str(protocol.SARegion), Allocation: str(protocol.SAAllocation),
				Author: str(protocol.SAAuthor), Workspace: str(protocol.SAWorkspace), GPUs: num(protocol.SAGPUs),
				Attempt: num(protocol.SAAttempt), CreatedAt: e.GetStartTime().AsTime(),
			}
			if e.GetCloseTime() != nil {
				t := e.GetCloseTime().AsTime()
				js.ClosedAt = &t
			}
			out = append(out, js)
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			break
		}
	}
	return out, nil
}
