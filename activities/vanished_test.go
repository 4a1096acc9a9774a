package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// countingClient counts the DescribeWorkflow and ListWorkflow calls that go
// through it to the client it wraps.
type countingClient struct {
	client.Client
	describes, lists atomic.Int64
}

func (c *countingClient) DescribeWorkflow(ctx context.Context, id, run string) (*client.WorkflowExecutionDescription, error) {
	c.describes.Add(1)
	return c.Client.DescribeWorkflow(ctx, id, run)
}

func (c *countingClient) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	c.lists.Add(1)
	return c.Client.ListWorkflow(ctx, req)
}

// fakeTemporal answers DescribeWorkflow from the workflows' own records
// (status, attempt) and ListWorkflow from a visibility that may differ
// from them (it lags), as Temporal does.
type fakeTemporal struct {
	client.Client
	status  map[string]enumspb.WorkflowExecutionStatus // absent: not found
	attempt map[string]int64
	visible map[string]bool // what visibility lists as running
	listErr error

	mu        sync.Mutex
	described []string
	queries   []string
}

var quotedID = regexp.MustCompile(`'([^']*)'`)

func (f *fakeTemporal) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.mu.Lock()
	f.queries = append(f.queries, req.GetQuery())
	f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	in := regexp.MustCompile(`WorkflowId IN \((.*)\)`).FindStringSubmatch(req.GetQuery())
	if in == nil {
		return nil, serviceerror.NewInvalidArgument("the fake answers only WorkflowId IN queries: " + req.GetQuery())
	}
	resp := &workflowservice.ListWorkflowExecutionsResponse{}
	for _, m := range quotedID.FindAllStringSubmatch(in[1], -1) {
		if f.visible[m[1]] {
			resp.Executions = append(resp.Executions, &workflowpb.WorkflowExecutionInfo{
				Execution: &commonpb.WorkflowExecution{WorkflowId: m[1]}, Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING})
		}
	}
	return resp, nil
}

func (f *fakeTemporal) DescribeWorkflow(ctx context.Context, id, run string) (*client.WorkflowExecutionDescription, error) {
	f.mu.Lock()
	f.described = append(f.described, id)
	f.mu.Unlock()
	st, ok := f.status[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + id)
	}
	info := &workflowpb.WorkflowExecutionInfo{Status: st}
	if a, ok := f.attempt[id]; ok {
		p, err := converter.GetDefaultDataConverter().ToPayload(a)
		if err != nil {
			return nil, err
		}
		info.SearchAttributes = &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{protocol.SAAttempt: p}}
	}
	return &client.WorkflowExecutionDescription{RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: info}}, nil
}

func (f *fakeTemporal) describedSet() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for _, id := range f.described {
		out[id] = true
	}
	return out
}

// runActivity runs the activity named name of acts in a test activity environment.
func runActivity[T any](t *testing.T, acts *Activities, name string, arg any) (T, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	var out T
	v, err := env.ExecuteActivity(name, arg)
	if err == nil {
		err = v.Get(&out)
	}
	return out, err
}

// The leak check describes only the jobs visibility does not list as
// running, and reports one only on its workflow's own record: a running job
// that visibility has not caught up with is not reported, nor one that
// visibility still lists as running.
func TestFindVanishedJobsDescribesOnlyUnlistedJobs(t *testing.T) {
	f := &fakeTemporal{status: map[string]enumspb.WorkflowExecutionStatus{}, visible: map[string]bool{}}
	var jobs, want []string
	for i := range 2345 { // more than two queries' worth
		job := fmt.Sprintf("lm-mpi-job-%04d", i)
		jobs = append(jobs, job)
		switch {
		case i%97 == 5: // ended
			f.status[job] = enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED
			want = append(want, job)
		case i%89 == 7: // gone
			want = append(want, job)
		case i%83 == 3: // running, not yet in visibility
			f.status[job] = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
		default:
			f.status[job], f.visible[job] = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, true
		}
	}
	// Visibility still lists an ended job as running: it is found next time.
	f.status[jobs[0]] = enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT
	// An id that cannot be quoted is described instead of listed.
	odd := "it's-a-job"
	jobs = append(jobs, odd)
	f.status[odd] = enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED
	want = append(want, odd)

	got, err := runActivity[[]string](t, &Activities{Client: f}, "FindVanishedJobs", jobs)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the jobs not running, in the order given")
	described := f.describedSet()
	var wrong []string
	for _, job := range jobs {
		if described[job] == f.visible[job] {
			wrong = append(wrong, job)
		}
	}
	assert.Empty(t, wrong, "jobs described although listed as running, or not described although not listed")
	assert.Len(t, described, len(jobs)-len(f.visible))
	assert.Len(t, f.described, len(described), "no job is described twice")
	assert.Len(t, f.queries, (len(jobs)+listChunk-1)/listChunk)
	for _, q := range f.queries {
		assert.NotContains(t, q, odd)
	}
}

// A visibility store that does not answer costs the check time, not its
// answer: every job is described, as before.
func TestFindVanishedJobsWithoutVisibility(t *testing.T) {
	f := &fakeTemporal{listErr: serviceerror.NewUnavailable("visibility is down"),
		status: map[string]enumspb.WorkflowExecutionStatus{"a": enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
			"c": enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED}}
	got, err := runActivity[[]string](t, &Activities{Client: f}, "FindVanishedJobs", []string{"c", "a", "b"})
	require.NoError(t, err)
	assert.Equal(t, []string{"c", "b"}, got)
	assert.Len(t, f.described, 3)
}

// FindGhostRequests, which shares describeEach, still describes every
// request's job and drops those that ended or moved on.
func TestFindGhostRequestsStillDescribesEach(t *testing.T) {
	f := &fakeTemporal{
		status: map[string]enumspb.WorkflowExecutionStatus{
			"waiting": enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "moved-on": enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
			"ended": enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED},
		attempt: map[string]int64{"waiting": 2, "moved-on": 3},
		visible: map[string]bool{"waiting": true, "moved-on": true},
	}
	reqs := []protocol.WithdrawSignal{{Job: "ended", Attempt: 1}, {Job: "waiting", Attempt: 2}, {Job: "moved-on", Attempt: 2}, {Job: "gone", Attempt: 1}}
	got, err := runActivity[[]protocol.WithdrawSignal](t, &Activities{Client: f}, "FindGhostRequests", reqs)
	require.NoError(t, err)
	assert.Equal(t, []protocol.WithdrawSignal{reqs[0], reqs[2], reqs[3]}, got)
	assert.Len(t, f.described, 4)
	assert.Empty(t, f.queries)
}

// vanishedJobs is how many running job workflows the dev server test starts
// (TRAINQ_VANISHED_JOBS sets another number, to measure).
func vanishedJobs(t *testing.T) int {
	n := 3000
	if s := os.Getenv("TRAINQ_VANISHED_JOBS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	return n
}

// Against a real dev server: thousands of running job workflows (on a task
// queue nobody polls: they stay Running), some terminated and some never
// started. FindVanishedJobs reports exactly the terminated and missing
// ones, in order, with a describe call for about those alone.
func TestFindVanishedJobsOnDevServer(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	bin, skip, err := testenv.TemporalCLI(root)
	require.NoError(t, err)
	if skip != "" {
		t.Skip(testenv.SkipMessage("activities", skip))
	}
	srv, err := testenv.StartDevServer(bin)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	c := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	n := vanishedJobs(t)
	const every = 100 // one job in every is terminated, one is never started
	var jobs, want, terminate []string
	for i := range n {
		job := fmt.Sprintf("lm-mpi-job-vanished-%06d", i)
		jobs = append(jobs, job)
		switch i % every {
		case 17:
			terminate = append(terminate, job)
			want = append(want, job)
		case 61:
			want = append(want, job) // never started
		}
	}
	started := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(jobs))
	slots := make(chan struct{}, 32)
	for i, job := range jobs {
		if i%every == 61 {
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: job, TaskQueue: "vanished-nobody-polls"}, protocol.JobWorkflowName)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, job := range terminate {
		require.NoError(t, c.TerminateWorkflow(ctx, job, "", "vanished"))
	}
	t.Logf("started %d job workflows and terminated %d in %s", n-n/every, len(terminate), time.Since(started).Round(time.Millisecond))
	// Wait for visibility to catch up, so that the count of describes below
	// does not depend on its lag.
	running := int64(n - 2*(n/every))
	testenv.Eventually(t, 2*time.Minute, "visibility to list the running jobs", func() bool {
		resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running'", protocol.JobWorkflowName)})
		return err == nil && resp.GetCount() == running
	})

	cc := &countingClient{Client: c}
	checked := time.Now()
	got, err := runActivity[[]string](t, &Activities{Client: cc}, "FindVanishedJobs", jobs)
	took := time.Since(checked)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the terminated and never-started jobs, in the order given")
	t.Logf("FindVanishedJobs over %d jobs (%d running): %s, %d DescribeWorkflow, %d ListWorkflow calls",
		n, running, took.Round(time.Millisecond), cc.describes.Load(), cc.lists.Load())
	assert.Equal(t, int64(len(want)), cc.describes.Load(), "only the jobs visibility does not list as running are described")
	assert.LessOrEqual(t, cc.lists.Load(), int64((n+listChunk-1)/listChunk+1))
}
