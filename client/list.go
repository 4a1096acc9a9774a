package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/trainq/trainq/protocol"
)

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
	// Queue keeps only the jobs of this queue; DefaultQueue says it is the
	// allocation's default queue, which also holds the jobs submitted
	// before queues (they carry none).
	Queue        string
	DefaultQueue bool
	// ActiveSince keeps only the jobs still open or closed at or after it
	// (the jobs that may have run then: the UI's timeline).
	ActiveSince time.Time
	// HasRun keeps only the jobs past waiting for their first attempt: the
	// ones that may have held GPUs. A timeline lists these, so that a queue
	// of waiting jobs, newer than every running one, does not take its
	// place in the newest-first list.
	HasRun bool
}

// JobSummary is one row of a job list.
type JobSummary struct {
	JobName    string `json:"job_name"`
	Status     string `json:"status"`
	Kind       string `json:"type"`
	Priority   string `json:"priority_class"`
	Region     string `json:"region"`
	Allocation string `json:"allocation_name"`
	Author     string `json:"job_author,omitempty"`
	Workspace  string `json:"workspace,omitempty"`
	// Queue is the job's queue ("" for jobs submitted before queues).
	Queue     string     `json:"queue_name,omitempty"`
	GPUs      int64      `json:"gpu_count"`
	Attempt   int64      `json:"attempt"`
	CreatedAt time.Time  `json:"created_dt"`
	ClosedAt  *time.Time `json:"completed_dt,omitempty"`
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
	in := func(vals []string) string {
		quoted := make([]string, len(vals))
		for i, v := range vals {
			quoted[i] = quote(v)
		}
		return "(" + strings.Join(quoted, ", ") + ")"
	}
	if len(f.Names) > 0 {
		q = append(q, "WorkflowId IN "+in(f.Names))
	}
	if len(f.States) > 0 {
		q = append(q, protocol.SAState+" IN "+in(f.States))
	}
	for _, kv := range [][2]string{{protocol.SARegion, f.Region}, {protocol.SAAllocation, f.Allocation}, {protocol.SAAuthor, f.Author}, {protocol.SAWorkspace, f.Workspace}} {
		if kv[1] != "" {
			q = append(q, fmt.Sprintf("%s = %s", kv[0], quote(kv[1])))
		}
	}
	switch {
	case f.Queue != "" && f.DefaultQueue:
		q = append(q, fmt.Sprintf("(%s = %s OR %s IS NULL)", protocol.SAQueue, quote(f.Queue), protocol.SAQueue))
	case f.Queue != "":
		q = append(q, fmt.Sprintf("%s = %s", protocol.SAQueue, quote(f.Queue)))
	}
	if !f.Since.IsZero() {
		q = append(q, fmt.Sprintf("StartTime >= '%s'", f.Since.UTC().Format(time.RFC3339)))
	}
	if !f.Until.IsZero() {
		q = append(q, fmt.Sprintf("StartTime <= '%s'", f.Until.UTC().Format(time.RFC3339)))
	}
	if !f.ActiveSince.IsZero() {
		q = append(q, fmt.Sprintf("(ExecutionStatus = 'Running' OR CloseTime >= '%s')", f.ActiveSince.UTC().Format(time.RFC3339)))
	}
	if f.HasRun {
		q = append(q, fmt.Sprintf("(%s != '%s' OR %s > 1)", protocol.SAState, protocol.StatePending, protocol.SAAttempt))
	}
	return strings.Join(q, " AND ")
}

// List lists jobs through Temporal visibility, newest first.
func (c *Client) List(ctx context.Context, f ListFilter) ([]JobSummary, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	want := f.Limit + max(f.Offset, 0)
	var out []JobSummary
	var token []byte
	for len(out) < want {
		resp, err := c.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: VisibilityQuery(f), PageSize: int32(min(want-len(out), 1000)), NextPageToken: token,
		})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetExecutions() {
			out = append(out, jobSummary(e))
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

// jobSummary reads a list row from a job workflow's search attributes and memo.
func jobSummary(e *workflowpb.WorkflowExecutionInfo) JobSummary {
	sa := e.GetSearchAttributes().GetIndexedFields()
	memo := e.GetMemo().GetFields()
	js := JobSummary{
		JobName: e.GetExecution().GetWorkflowId(), Status: payloadString(sa, protocol.SAState), Kind: payloadString(sa, protocol.SAKind),
		Priority: payloadString(sa, protocol.SAPriority), Region: payloadString(sa, protocol.SARegion),
		Allocation: payloadString(sa, protocol.SAAllocation), Author: payloadString(sa, protocol.SAAuthor),
		Workspace: payloadString(sa, protocol.SAWorkspace), Queue: payloadString(sa, protocol.SAQueue), GPUs: payloadInt(sa, protocol.SAGPUs),
		Attempt: payloadInt(sa, protocol.SAAttempt), CreatedAt: e.GetStartTime().AsTime(), RunID: e.GetExecution().GetRunId(),
		InstanceType: payloadString(memo, MemoInstanceType), JobDesc: payloadString(memo, MemoJobDesc),
	}
	if e.GetCloseTime() != nil {
		t := e.GetCloseTime().AsTime()
		js.ClosedAt = &t
	}
	return js
}

// Count counts the jobs a filter selects (Limit and Offset do not apply).
func (c *Client) Count(ctx context.Context, f ListFilter) (int64, error) {
	resp, err := c.Temporal.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: VisibilityQuery(f)})
	if err != nil {
		return 0, err
	}
	return resp.GetCount(), nil
}
