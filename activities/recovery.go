package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/trainq/trainq/protocol"
)

// RegisterJobsInput asks every job of an allocation to register with a
// recovering allocator of the given epoch.
type RegisterJobsInput struct {
	Region     string `json:"region"`
	Allocation string `json:"allocation"`
	Epoch      string `json:"epoch"`
	// Settle is how long to wait before listing the jobs a second time, so
	// that a job whose start visibility had not yet recorded is found too.
	Settle time.Duration `json:"settle"`
	// Jobs, when set, are the jobs to register instead of listing them: the
	// owners of live workers a fence found on a node that the allocator does
	// not know of.
	Jobs []string `json:"jobs,omitempty"`
	// Round, when set, makes the register update's ID distinct from
	// recovery's (register/<epoch>): a job answers an update ID it has seen
	// with its first answer.
	Round int64 `json:"round,omitempty"`
}

// RegisterJobsReply is what the allocation's jobs hold or wait for, sorted by
// job name so that the allocator rebuilds its state in a stable order.
type RegisterJobsReply struct {
	Holds []protocol.JobHold `json:"holds"`
	// Listed is how many running job workflows visibility listed.
	Listed int `json:"listed"`
	// Unanswered are running jobs that did not answer the register update
	// (their workflow task cannot run, their worker is stuck): the allocator
	// keeps the nodes where they have workers fenced and asks them again,
	// rather than holding up the whole allocation for them.
	Unanswered []string `json:"unanswered,omitempty"`
}

// registerConcurrency bounds the register updates one recovery sends at once.
const registerConcurrency = 16

// RegisterJobs is the allocator's recovery: it lists the allocation's running
// job workflows through visibility and sends each the register update, whose
// answer is what that job holds or waits for; from then on the job ignores
// grants of any other allocator epoch. Because visibility lags, it lists a
// second time after in.Settle and registers the jobs the first pass missed.
// Registering is idempotent, so a retried recovery asks again.
func (a *Activities) RegisterJobs(ctx context.Context, in RegisterJobsInput) (RegisterJobsReply, error) {
	// Heartbeat all along: a register answer can take a while under load,
	// and the heartbeat timeout must catch only a lost worker.
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = sleepHeartbeating(hctx, 10*time.Minute) }()
	if in.Jobs != nil {
		jobs, err := a.jobsOf(ctx, in.Jobs, in.Region, in.Allocation)
		if err != nil {
			return RegisterJobsReply{}, err
		}
		holds, unanswered, err := a.registerAll(ctx, jobs, in.Epoch, registerUpdateID(in))
		if err != nil {
			return RegisterJobsReply{}, err
		}
		return RegisterJobsReply{Holds: holds, Listed: len(in.Jobs), Unanswered: unanswered}, nil
	}
	seen := map[string]bool{}
	var holds []protocol.JobHold
	var unanswered []string
	listed := 0
	for pass := 0; pass < 2; pass++ {
		if pass == 1 && in.Settle > 0 {
			select {
			case <-ctx.Done():
				return RegisterJobsReply{}, ctx.Err()
			case <-time.After(in.Settle):
			}
		}
		jobs, err := a.listRunningJobs(ctx, in.Region, in.Allocation)
		if err != nil {
			return RegisterJobsReply{}, err
		}
		var fresh []string
		for _, j := range jobs {
			if !seen[j] {
				seen[j] = true
				fresh = append(fresh, j)
			}
		}
		listed = len(seen)
		// A job that did not answer the first pass is not asked again
		// here: every grant of the allocation waits for this recovery, and a
		// second register timeout for one job that cannot answer would cost
		// them all another 30 s, and a recovery is already at least one
		// timeout long when a job cannot answer. The allocator asks it again
		// every reclaim_interval.
		got, missed, err := a.registerAll(ctx, fresh, in.Epoch, registerUpdateID(in))
		if err != nil {
			return RegisterJobsReply{}, err
		}
		holds, unanswered = append(holds, got...), append(unanswered, missed...)
	}
	slices.SortFunc(holds, func(x, y protocol.JobHold) int { return strings.Compare(x.Job, y.Job) })
	return RegisterJobsReply{Holds: holds, Listed: listed, Unanswered: unanswered}, nil
}

// jobsOf keeps the jobs whose workflow runs in region/allocation, read from
// each workflow's own record: a worker found on a node can belong to a job
// of the allocation the node came from, and registering that job here would
// move it to this allocator's epoch. Such a job holds nothing here, so the
// fence stops its worker.
func (a *Activities) jobsOf(ctx context.Context, jobs []string, region, allocation string) ([]string, error) {
	other, err := a.describeEach(ctx, jobs, func(desc *workflowservice.DescribeWorkflowExecutionResponse, i int) bool {
		fields := desc.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()
		return keyword(fields[protocol.SARegion]) != region || keyword(fields[protocol.SAAllocation]) != allocation
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for i, job := range jobs {
		if !other[i] { // describeEach marks ended jobs too: they hold nothing
			out = append(out, job)
		}
	}
	return out, nil
}

func keyword(p *commonpb.Payload) string {
	var s string
	if p == nil || converter.GetDefaultDataConverter().FromPayload(p, &s) != nil {
		return ""
	}
	return s
}

// JobsQuery is the visibility query for the running job workflows of one allocation.
func JobsQuery(region, allocation string) string {
	quote := func(s string) string { return "'" + strings.NewReplacer("'", "", "\\", "", "\"", "").Replace(s) + "'" }
	return fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND %s = %s AND %s = %s",
		protocol.JobWorkflowName, protocol.SARegion, quote(region), protocol.SAAllocation, quote(allocation))
}

func (a *Activities) listRunningJobs(ctx context.Context, region, allocation string) ([]string, error) {
	var jobs []string
	var token []byte
	for {
		resp, err := a.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: JobsQuery(region, allocation), PageSize: 1000, NextPageToken: token,
		})
		if err != nil {
			return nil, fmt.Errorf("list the jobs of %s/%s: %w", region, allocation, err)
		}
		for _, e := range resp.GetExecutions() {
			if a.TestListingLag > 0 && hiddenByLag(e.GetStartTime().AsTime(), time.Now(), a.TestListingLag) {
				activity.GetLogger(ctx).Warn("test listing lag: recovery's listing leaves out a job started within the lag",
					"job", e.GetExecution().GetWorkflowId(), "started_ago", time.Since(e.GetStartTime().AsTime()).Round(time.Millisecond).String(),
					"lag", a.TestListingLag.String())
				continue
			}
			jobs = append(jobs, e.GetExecution().GetWorkflowId())
		}
		activity.RecordHeartbeat(ctx, len(jobs))
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return jobs, nil
		}
	}
}

// EnvTestListingLag names the environment variable trainq-worker reads at
// start into Activities.TestListingLag (a Go duration, e.g. 5s). Test-only:
// the chaos campaign uses it to make recovery miss just-started jobs.
const EnvTestListingLag = "TRAINQ_TEST_LISTING_LAG"

// ListingLagFromEnv reads $TRAINQ_TEST_LISTING_LAG: zero when unset.
func ListingLagFromEnv() (time.Duration, error) {
	v := os.Getenv(EnvTestListingLag)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a non-negative duration such as 5s", EnvTestListingLag, v)
	}
	return d, nil
}

// hiddenByLag says whether a listing lagging lag behind, taken at now,
// leaves out a workflow that started at started.
func hiddenByLag(started, now time.Time, lag time.Duration) bool {
	return now.Sub(started) < lag
}

// registerAll registers jobs, registerConcurrency at a time. A job that has
// ended meanwhile holds nothing and is left out; one whose update fails or
// times out is unanswered. Only the activity's own end (its context done)
// fails the whole call.
func (a *Activities) registerAll(ctx context.Context, jobs []string, epoch, updateID string) (holds []protocol.JobHold, unanswered []string, err error) {
	answers := make([]*protocol.JobHold, len(jobs))
	errs := make([]error, len(jobs))
	slots := make(chan struct{}, registerConcurrency)
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			answers[i], errs[i] = a.register(ctx, job, epoch, updateID)
		}()
		activity.RecordHeartbeat(ctx, i)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	for i, h := range answers {
		switch {
		case errs[i] != nil:
			activity.GetLogger(ctx).Warn("a job did not answer the register update", "job", jobs[i], "error", errs[i])
			unanswered = append(unanswered, jobs[i])
		case h != nil:
			holds = append(holds, *h)
		}
	}
	return holds, unanswered, nil
}

// registerTimeout bounds one register update: a job workflow answers it in
// one workflow task.
const registerTimeout = 30 * time.Second

// registerUpdateID is the register update's ID: one per recovery (so that a
// retried recovery is answered once), and one per round of asking again.
func registerUpdateID(in RegisterJobsInput) string {
	if in.Round != 0 {
		return fmt.Sprintf("register/%s/%d", in.Epoch, in.Round)
	}
	return "register/" + in.Epoch
}

func (a *Activities) register(ctx context.Context, job, epoch, updateID string) (*protocol.JobHold, error) {
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	handle, err := a.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   job,
		UpdateID:     updateID,
		UpdateName:   protocol.UpdateRegister,
		Args:         []any{protocol.RegisterRequest{Epoch: epoch}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var hold protocol.JobHold
	if err == nil {
		err = handle.Get(ctx, &hold)
	}
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return nil, nil // the job ended: it holds nothing
	case err != nil:
		return nil, fmt.Errorf("register job %s: %w", job, err)
	}
	if hold.Job == "" {
		hold.Job = job
	}
	return &hold, nil
}

// JobHoldInput names the job whose hold is asked, the allocator epoch that
// asks (the job's own: the answer moves it to no other allocator), and the
// register update's ID, unique to the question.
type JobHoldInput struct {
	Job      string `json:"job"`
	Epoch    string `json:"epoch"`
	UpdateID string `json:"update_id"`
}

// JobHold asks one job what it holds or waits for, with the register update
// (nil: its workflow has ended). An update, not a query, so that the answer
// counts every grant delivered to the job before it, even one the job's
// workflow has yet to take in.
func (a *Activities) JobHold(ctx context.Context, in JobHoldInput) (*protocol.JobHold, error) {
	return a.register(ctx, in.Job, in.Epoch, in.UpdateID)
}

// FindGhostRequests returns the waiting requests, among those given, whose job
// no longer waits for them: its workflow has ended, or it has moved on to a
// later attempt. Such a request can be left behind when a job is cancelled
// while its request is on its way; the allocator drops it.
func (a *Activities) FindGhostRequests(ctx context.Context, requests []protocol.WithdrawSignal) ([]protocol.WithdrawSignal, error) {
	jobs := make([]string, len(requests))
	for i, r := range requests {
		jobs[i] = r.Job
	}
	// Describe reads the workflow's own record, not visibility, so the
	// attempt is current.
	ghost, err := a.describeEach(ctx, jobs, func(desc *workflowservice.DescribeWorkflowExecutionResponse, i int) bool {
		attempt, ok := describedAttempt(desc.GetWorkflowExecutionInfo().GetSearchAttributes())
		return ok && attempt > int64(requests[i].Attempt)
	})
	if err != nil {
		return nil, err
	}
	var out []protocol.WithdrawSignal
	for i, r := range requests {
		if ghost[i] {
			out = append(out, r)
		}
	}
	return out, nil
}

// CurrentAttempts returns the attempt each job's workflow is at, read from
// the workflow's own record (not visibility), or 0 for a job whose workflow
// has ended or is gone. The allocator asks it before it takes a request for
// an attempt older than the one it has for that job as a reset of the job.
func (a *Activities) CurrentAttempts(ctx context.Context, jobs []string) ([]int, error) {
	out := make([]int, len(jobs))
	_, err := a.describeEach(ctx, jobs, func(desc *workflowservice.DescribeWorkflowExecutionResponse, i int) bool {
		if attempt, ok := describedAttempt(desc.GetWorkflowExecutionInfo().GetSearchAttributes()); ok {
			out[i] = int(attempt)
		}
		return false
	})
	return out, err
}

func describedAttempt(sa *commonpb.SearchAttributes) (int64, bool) {
	p, ok := sa.GetIndexedFields()[protocol.SAAttempt]
	if !ok {
		return 0, false
	}
	var attempt int64
	if err := converter.GetDefaultDataConverter().FromPayload(p, &attempt); err != nil {
		return 0, false
	}
	return attempt, true
}

// sleepHeartbeating waits d, heartbeating every second so that a lost
// worker is noticed by the heartbeat timeout, not the start-to-close one.
func sleepHeartbeating(ctx context.Context, d time.Duration) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		activity.RecordHeartbeat(ctx, "settling")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return nil
		case <-tick.C:
		}
	}
}
