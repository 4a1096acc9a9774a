package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// ErrJobNotFound is returned for a job name no workflow has.
var ErrJobNotFound = errors.New("job not found")

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
	SentHash     string
	InstanceType string
	JobDesc      string
}

// Describe returns a job's search attributes and memo. A name without a job
// workflow (an allocator, say) is ErrJobNotFound.
func (c *Client) Describe(ctx context.Context, name string) (JobInfo, error) {
	d, err := c.Temporal.DescribeWorkflow(ctx, name, "")
	if err != nil {
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return JobInfo{}, fmt.Errorf("%w: %s", ErrJobNotFound, name)
		}
		return JobInfo{}, err
	}
	e := d.RawResponse.GetWorkflowExecutionInfo()
	if e.GetType().GetName() != protocol.JobWorkflowName {
		return JobInfo{}, fmt.Errorf("%w: %s", ErrJobNotFound, name)
	}
	sa := e.GetSearchAttributes().GetIndexedFields()
	memo := e.GetMemo().GetFields()
	return JobInfo{
		JobName: name, RunID: e.GetExecution().GetRunId(),
		Status: payloadString(sa, protocol.SAState), Kind: payloadString(sa, protocol.SAKind),
		Author: payloadString(sa, protocol.SAAuthor), Workspace: payloadString(sa, protocol.SAWorkspace),
		Running:      e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		RequestHash:  payloadString(memo, MemoRequestHash),
		SentHash:     payloadString(memo, MemoSentHash),
		InstanceType: payloadString(memo, MemoInstanceType),
		JobDesc:      payloadString(memo, MemoJobDesc),
	}, nil
}

// Status returns a job's status; while it waits, with its place in the queue
// and the reason.
func (c *Client) Status(ctx context.Context, name string) (protocol.JobStatus, error) {
	var st protocol.JobStatus
	resp, err := c.Temporal.QueryWorkflow(ctx, name, "", protocol.QueryStatus)
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
		if ex, err := c.Explain(ctx, st.Region, st.Allocation, name); err == nil && ex.Waiting != nil {
			st.Position, st.Reason, st.WaitingFor = ex.Waiting.Position, ex.Waiting.Reason, ex.Waiting.WaitingFor
		}
	}
	return st, nil
}

// Explain asks the allocator where a job stands.
func (c *Client) Explain(ctx context.Context, region, allocation, job string) (protocol.ExplainReply, error) {
	return answer[protocol.ExplainReply](c.Temporal.QueryWorkflow(ctx, protocol.AllocatorWorkflowID(region, allocation), "", protocol.QueryExplain, job))
}

// ExpectedStart asks the allocator when a waiting job is expected to start
// (nil: it does not wait there). It plays a copy of the pool forward, so it
// costs more than Explain.
func (c *Client) ExpectedStart(ctx context.Context, region, allocation, job string) (*scheduler.ExpectedStart, error) {
	return answer[*scheduler.ExpectedStart](c.Temporal.QueryWorkflow(ctx, protocol.AllocatorWorkflowID(region, allocation), "",
		protocol.QueryExpectedStart, protocol.ExpectedStartQuery{Job: job, Now: time.Now().UTC()}))
}

// Cancel stops a job: its workers are stopped and it ends Stopped. Stopping
// a finished job is a no-op.
func (c *Client) Cancel(ctx context.Context, name string) error {
	err := c.Temporal.CancelWorkflow(ctx, name, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		if _, derr := c.Temporal.DescribeWorkflow(ctx, name, ""); derr != nil {
			return fmt.Errorf("%w: %s", ErrJobNotFound, name)
		}
		return nil // already finished
	}
	return err
}
