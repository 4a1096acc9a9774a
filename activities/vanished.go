package activities

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"

	"github.com/trainq/trainq/protocol"
)

// listChunk is how many job IDs one visibility query of a leak check names:
// a page at most (the server's default largest page is 1000), in a query of
// some 50 kB. Few queries matter: the server allows a namespace 10
// visibility calls a second by default, for everyone (the API's lists, the
// Web UI), and 20,000 jobs take 20.
const listChunk = 1000

// listConcurrency bounds the visibility queries one leak check runs at once.
const listConcurrency = 2

// RunningJobsQuery is the visibility query for those of the job workflows
// ids that are running. Ids that cannot be quoted safely are left out: their
// callers describe them instead.
func RunningJobsQuery(ids []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "WorkflowType = '%s' AND ExecutionStatus = 'Running' AND WorkflowId IN (", protocol.JobWorkflowName)
	n := 0
	for _, id := range ids {
		if !quotable(id) {
			continue
		}
		if n > 0 {
			b.WriteString(", ")
		}
		b.WriteString("'" + id + "'")
		n++
	}
	if n == 0 {
		return ""
	}
	b.WriteString(")")
	return b.String()
}

// quotable says whether id can stand in a visibility query between single
// quotes as it is.
func quotable(id string) bool {
	return id != "" && !strings.ContainsAny(id, "'\"\\\n\r")
}

// listedRunning returns the jobs among jobs that visibility lists as
// running job workflows, listChunk ids a query, listConcurrency queries at
// a time, heartbeating after each. Visibility lags the workflows' own
// records, so a job left out may still be running (and one listed may have
// just ended): callers describe the jobs left out, and trust the listing
// only to skip a job until the next check. A query that fails leaves its
// jobs out, so that they are described as before (a visibility store that
// is down costs time, not leak detection).
func (a *Activities) listedRunning(ctx context.Context, jobs []string) (map[string]bool, error) {
	listed := make(map[string]bool, len(jobs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, listConcurrency)
	done := 0
	for start := 0; start < len(jobs); start += listChunk {
		chunk := jobs[start:min(start+listChunk, len(jobs))]
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return nil, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			ids, err := a.listRunningIDs(ctx, chunk)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if ctx.Err() == nil {
					activity.GetLogger(ctx).Warn("could not list running jobs through visibility; describing them one by one",
						"jobs", len(chunk), "error", err)
				}
			}
			for _, id := range ids {
				listed[id] = true
			}
			done += len(chunk)
			activity.RecordHeartbeat(ctx, done)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return listed, nil
}

// listRunningIDs lists which of ids visibility has as running job workflows.
func (a *Activities) listRunningIDs(ctx context.Context, ids []string) ([]string, error) {
	query := RunningJobsQuery(ids)
	if query == "" {
		return nil, nil
	}
	var out []string
	var token []byte
	for {
		resp, err := a.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: query, PageSize: int32(len(ids)), NextPageToken: token,
		})
		if err != nil {
			return out, err
		}
		for _, e := range resp.GetExecutions() {
			out = append(out, e.GetExecution().GetWorkflowId())
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return out, nil
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
	}
}
