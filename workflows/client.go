package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/singleflight"

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
	opts, err := ClientOptions(logger)
	if err != nil {
		return nil, err
	}
	return DialOptions(ctx, opts)
}

// ClientOptions reads the standard TEMPORAL_* settings and config profiles.
func ClientOptions(logger sdklog.Logger) (client.Options, error) {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		return opts, fmt.Errorf("temporal connection settings: %w", err)
	}
	opts.Logger = logger
	return opts, nil
}

// DialOptions connects with opts and says plainly what to do when Temporal
// cannot be reached.
func DialOptions(ctx context.Context, opts client.Options) (client.Client, error) {
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

// DialLazy is Dial without connecting: the connection is made on first use,
// so a server (the REST API) can start and answer 503 while Temporal is down.
func DialLazy(logger sdklog.Logger) (client.Client, error) {
	opts, err := ClientOptions(logger)
	if err != nil {
		return nil, err
	}
	return client.NewLazyClient(opts)
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
	return SubmitWith(ctx, c, cfg, spec, SubmitOptions{Name: name})
}

// SubmitOptions tune SubmitWith.
type SubmitOptions struct {
	// Name is the job name; empty means a new lm-mpi-job-<uuid>.
	Name string
	// RequestHash is recorded in the memo (MemoRequestHash) so that a
	// client retrying with an Idempotency-Key can be told apart from one
	// reusing the key for another request.
	RequestHash string
}

// jobTaskTimeout is a job workflow's task timeout.
const jobTaskTimeout = 5 * time.Second

// ErrJobExists is returned by SubmitWith when the name belongs to a closed job.
var ErrJobExists = errors.New("a job with this name exists")

// Memo fields of a job workflow.
const (
	MemoRequestHash  = "trainq_request_hash"
	MemoInstanceType = "instance_type"
	MemoJobDesc      = "job_desc"
)

// memoJobDescMax bounds the job description copied into the memo, which
// every list answer carries.
const memoJobDescMax = 1024

// SubmitWith validates spec and starts its job workflow. Starting a name whose
// workflow runs starts nothing and answers with that job;
// starting a name whose workflow has closed fails with
// ErrJobExists (a closed job is never run again under the same name).
func SubmitWith(ctx context.Context, c client.Client, cfg *config.Config, spec protocol.JobSpec, opts SubmitOptions) (Submission, error) {
	notes, err := Check(cfg, &spec)
	if err != nil {
		return Submission{}, err
	}
	if err := checkQueueRoom(ctx, c, cfg, spec); err != nil {
		return Submission{}, err
	}
	name := opts.Name
	if name == "" {
		name = NewJobName(spec.Kind)
	}
	desc := spec.JobDesc
	if len(desc) > memoJobDescMax {
		desc = strings.ToValidUTF8(desc[:memoJobDescMax], "")
	}
	memo := map[string]any{MemoInstanceType: spec.InstanceType, MemoJobDesc: desc}
	if opts.RequestHash != "" {
		memo[MemoRequestHash] = opts.RequestHash
	}
	sopts := client.StartWorkflowOptions{
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
			protocol.KeyKind.ValueSet(string(spec.Kind)),
			protocol.KeyAttempt.ValueSet(1),
			protocol.KeyGPUs.ValueSet(int64(spec.GPUs())),
		),
		StaticSummary: Summary(spec),
		StaticDetails: Details(spec),
		// A task lost with a killed trainq-worker is retried after this
		// (the default is 10s); a job's tasks take milliseconds.
		WorkflowTaskTimeout: jobTaskTimeout,
	}
	if _, err := c.ExecuteWorkflow(ctx, sopts, protocol.JobWorkflowName, protocol.JobInput{Name: name, Spec: spec}); err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return Submission{JobName: name}, fmt.Errorf("%w: %s", ErrJobExists, name)
		}
		return Submission{}, fmt.Errorf("could not start job %s: %w", name, err)
	}
	return Submission{JobName: name, Status: string(protocol.StatePending), Notes: notes}, nil
}

// JobInfo is what Temporal itself knows about a job workflow, without asking
// the workflow (and so without a running trainq-worker).
type JobInfo struct {
	JobName      string
	RunID        string
	Status       string // TrainqState
	Kind         string
	Author       string
	Workspace    string
	Running      bool // the workflow has not closed
	RequestHash  string
	InstanceType string
	JobDesc      string
}

// Describe returns a job's search attributes and memo. A name without a job
// workflow (an allocator, say) is ErrJobNotFound.
func Describe(ctx context.Context, c client.Client, name string) (JobInfo, error) {
	resp, err := c.DescribeWorkflowExecution(ctx, name, "")
	if err != nil {
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return JobInfo{}, fmt.Errorf("%w: %s", ErrJobNotFound, name)
		}
		return JobInfo{}, err
	}
	e := resp.GetWorkflowExecutionInfo()
	if e.GetType().GetName() != protocol.JobWorkflowName {
		return JobInfo{}, fmt.Errorf("%w: %s", ErrJobNotFound, name)
	}
	sa := e.GetSearchAttributes().GetIndexedFields()
	memo := e.GetMemo().GetFields()
	str := func(m map[string]*commonpb.Payload, k string) string {
		var s string
		if p, ok := m[k]; ok {
			_ = decodePayload(p, &s)
		}
		return s
	}
	return JobInfo{
		JobName: name, RunID: e.GetExecution().GetRunId(),
		Status: str(sa, protocol.SAState), Kind: str(sa, protocol.SAKind),
		Author: str(sa, protocol.SAAuthor), Workspace: str(sa, protocol.SAWorkspace),
		Running:     e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		RequestHash: str(memo, MemoRequestHash), InstanceType: str(memo, MemoInstanceType), JobDesc: str(memo, MemoJobDesc),
	}, nil
}

// Summary is the one-line summary the Web UI shows for a job.
func Summary(s protocol.JobSpec) string {
	kind := ""
	if s.Kind == scheduler.KindNotebook {
		kind = "Jupyter · "
	}
	return fmt.Sprintf("%s%s · %d×%s · %s/%s · max_retry %d", kind, s.PriorityClass, s.NWorkers, s.InstanceType, s.Region, s.AllocationName, s.MaxRetry)
}

// Details is the Markdown spec the Web UI shows for a job. Temporal limits
// details to 20000 bytes (limit.userMetadataDetailsSize), so long values are
// cut and rows that do not fit are left out: the spec itself is in the
// workflow input, whole.
func Details(s protocol.JobSpec) string {
	const valueMax, total = 512, 16000
	var b strings.Builder
	truncated := false
	size := 2 // the JSON-encoded size so far, quotes included
	row := func(k, v string) {
		if v == "" || truncated {
			return
		}
		if len(k) > valueMax {
			k = strings.ToValidUTF8(k[:valueMax], "") + "…"
		}
		if len(v) > valueMax {
			v = strings.ToValidUTF8(v[:valueMax], "") + "…"
		}
		line := fmt.Sprintf("| %s | `%s` |\n", k, strings.ReplaceAll(v, "|", "\\|"))
		enc, _ := json.Marshal(line)
		if size+len(enc)-2 > total {
			truncated = true
			b.WriteString("| … | (more in the workflow input) |\n")
			return
		}
		size += len(enc) - 2
		b.WriteString(line)
	}
	b.WriteString("| field | value |\n|---|---|\n")
	size += 30
	for _, f := range s.Fields() {
		row(f.Name, f.Value)
	}
	return b.String()
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
			return v, &noAllocatorError{fmt.Sprintf("allocation %s/%s has no running allocator; is trainq-worker running?", region, allocation)}
		}
		return v, err
	}
	return v, resp.Get(&v)
}

// ErrNoAllocator is returned by Queue when the allocation's allocator does not run.
var ErrNoAllocator = errors.New("no allocator")

type noAllocatorError struct{ msg string }

func (e *noAllocatorError) Error() string        { return e.msg }
func (e *noAllocatorError) Is(target error) bool { return target == ErrNoAllocator }

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
	// Offset skips that many jobs of the newest-first list (the REST API's paging).
	Offset int
	// Names keeps only these job names (empty: all).
	Names []string
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
	// From the memo (jobs submitted before it existed have none).
	InstanceType string `json:"instance_type,omitempty"`
	JobDesc      string `json:"job_desc,omitempty"`
	RunID        string `json:"uid,omitempty"`
}

// VisibilityQuery turns a filter into a Temporal list-filter expression.
func VisibilityQuery(f ListFilter) string {
	q := []string{fmt.Sprintf("WorkflowType = '%s'", protocol.JobWorkflowName)}
	// Quotes and backslashes are dropped: a value cannot end its string
	// literal early or escape the closing quote.
	quote := func(s string) string { return "'" + strings.NewReplacer("'", "", "\\", "", "\"", "").Replace(s) + "'" }
	if len(f.Names) > 0 {
		var vals []string
		for _, n := range f.Names {
			vals = append(vals, quote(n))
		}
		q = append(q, fmt.Sprintf("WorkflowId IN (%s)", strings.Join(vals, ", ")))
	}
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
	want := f.Limit + max(f.Offset, 0)
	var out []JobSummary
	var token []byte
	for len(out) < want {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: VisibilityQuery(f), PageSize: int32(min(want-len(out), 1000)), NextPageToken: token,
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
				Attempt: num(protocol.SAAttempt), CreatedAt: e.GetStartTime().AsTime(), RunID: e.GetExecution().GetRunId(),
			}
			memo := e.GetMemo().GetFields()
			if p, ok := memo[MemoInstanceType]; ok {
				_ = decodePayload(p, &js.InstanceType)
			}
			if p, ok := memo[MemoJobDesc]; ok {
				_ = decodePayload(p, &js.JobDesc)
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
	if f.Offset > 0 {
		if f.Offset >= len(out) {
			return nil, nil
		}
		out = out[f.Offset:]
	}
	if len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// Count counts the jobs a filter selects (Limit and Offset do not apply).
func Count(ctx context.Context, c client.Client, f ListFilter) (int64, error) {
	resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: VisibilityQuery(f)})
	if err != nil {
		return 0, err
	}
	return resp.GetCount(), nil
}

// recoverTimeout bounds an operator's recovery: listing and registering
// every job of the allocation takes seconds, not minutes.
const recoverTimeout = 2 * time.Minute

// RecoverAllocator makes the allocation's allocator rebuild its state from
// the jobs and the node agents (see AllocatorWorkflow), starting a fresh
// allocator if none runs, and answers what the recovery found.
func RecoverAllocator(ctx context.Context, c client.Client, in protocol.AllocatorInput, start client.StartWorkflowOptions) (protocol.RecoverReply, error) {
	var reply protocol.RecoverReply
	ctx, cancel := context.WithTimeout(ctx, recoverTimeout)
	defer cancel()
	op := c.NewWithStartWorkflowOperation(start, protocol.AllocatorWorkflowName, in)
	handle, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName:   protocol.UpdateRecover,
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err == nil {
		err = handle.Get(ctx, &reply)
	}
	if err != nil {
		return reply, fmt.Errorf("recover allocation %s/%s: %w", in.Region, in.Allocation, err)
	}
	return reply, nil
}

// QueueFullError says an allocation's queue holds max_waiting jobs.
type QueueFullError struct {
	Region, Allocation string
	Waiting            int
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("allocation %s/%s has %d waiting jobs (max_waiting); try later", e.Region, e.Allocation, e.Waiting)
}

// countsTimeout bounds the queue-length check of a submission: a slow or
// absent allocator must not hold up submissions (the allocator checks again).
const countsTimeout = 2 * time.Second

// Counts returns the allocator's queue counts, without rendering the queue.
func Counts(ctx context.Context, c client.Client, region, allocation string) (protocol.QueueCounts, error) {
	var out protocol.QueueCounts
	resp, err := c.QueryWorkflow(ctx, protocol.AllocatorWorkflowID(region, allocation), "", protocol.QueryCounts)
	if err != nil {
		return out, err
	}
	return out, resp.Get(&out)
}

// checkQueueRoom refuses a submission to an allocation whose queue is full,
// before anything starts.
func checkQueueRoom(ctx context.Context, c client.Client, cfg *config.Config, spec protocol.JobSpec) error {
	_, alloc, err := cfg.Allocation(spec.Region, spec.AllocationName)
	if err != nil {
		return err
	}
	counts, err := recentCounts(ctx, c, spec.Region, alloc.Name)
	if err != nil {
		return nil // no answer in time: the allocator checks again
	}
	if counts.Waiting >= alloc.MaxWaiting {
		return &QueueFullError{Region: spec.Region, Allocation: alloc.Name, Waiting: counts.Waiting}
	}
	return nil
}

// How long a process reuses an allocation's queue counts for the
// queue-length check: a burst of submissions through one API server asks the
// allocator at most once a second, and once every ten seconds while the
// queue is far from full.
const (
	countsMaxAgeNearFull = time.Second
	countsMaxAge         = 10 * time.Second
)

var countsCache = struct {
	sync.Mutex
	at     map[string]time.Time
	counts map[string]protocol.QueueCounts
	flight singleflight.Group
}{at: map[string]time.Time{}, counts: map[string]protocol.QueueCounts{}}

func recentCounts(ctx context.Context, c client.Client, region, allocation string) (protocol.QueueCounts, error) {
	id := protocol.AllocatorWorkflowID(region, allocation)
	countsCache.Lock()
	at, ok := countsCache.at[id]
	counts := countsCache.counts[id]
	countsCache.Unlock()
	maxAge := countsMaxAge
	if counts.MaxWaiting > 0 && counts.Waiting*2 >= counts.MaxWaiting {
		maxAge = countsMaxAgeNearFull
	}
	if ok && time.Since(at) < maxAge {
		return counts, nil
	}
	// Concurrent submissions share one query.
	v, err, _ := countsCache.flight.Do(id, func() (any, error) {
		qctx, cancel := context.WithTimeout(ctx, countsTimeout)
		defer cancel()
		counts, err := Counts(qctx, c, region, allocation)
		if err != nil {
			return counts, err
		}
		countsCache.Lock()
		countsCache.at[id], countsCache.counts[id] = time.Now(), counts
		countsCache.Unlock()
		return counts, nil
	})
	return v.(protocol.QueueCounts), err
}
