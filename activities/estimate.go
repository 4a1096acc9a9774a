package activities

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// estimateCacheTTL is how long a worker reuses the runtimes it listed for one shape: a burst of
// submissions of one shape lists them once, and a job that completes is learned from within it.
// Too few runs to learn from are kept for less (estimateCacheTTLFew): a shape's first jobs
// complete, and the next jobs should learn from them soon.
const (
	estimateCacheTTL    = 30 * time.Second
	estimateCacheTTLFew = 5 * time.Second
)

// estimateCacheMax bounds the shapes a worker remembers; past it, the cache starts again empty.
const estimateCacheMax = 4096

// EstimateCache keeps the runtimes EstimateRuntime listed, per query, for estimateCacheTTL,
// and makes the requests that miss it together wait for one listing: a burst of thousands of
// submissions of one shape lists visibility once per worker, not once per job. The zero value
// is ready; a nil *EstimateCache lists every time.
type EstimateCache struct {
	mu      sync.Mutex
	entries map[string]cachedRuns
	// listing holds, per query being listed, a channel closed when the listing is done.
	listing map[string]chan struct{}
}

type cachedRuns struct {
	runs []time.Duration
	at   time.Time
}

// runs answers query from the cache, or from list, called once for all the callers that miss
// it at the same time (a caller whose ctx ends stops waiting; a failed listing is not cached,
// so the callers that waited for it list again).
func (c *EstimateCache) runs(ctx context.Context, query string, list func() ([]time.Duration, error)) ([]time.Duration, error) {
	if c == nil {
		return list()
	}
	for {
		c.mu.Lock()
		if runs, ok := c.fresh(query, time.Now()); ok {
			c.mu.Unlock()
			return runs, nil
		}
		wait, busy := c.listing[query]
		if !busy {
			if c.listing == nil {
				c.listing = map[string]chan struct{}{}
			}
			done := make(chan struct{})
			c.listing[query] = done
			c.mu.Unlock()
			runs, err := list()
			c.mu.Lock()
			if err == nil {
				c.put(query, runs, time.Now())
			}
			delete(c.listing, query)
			close(done)
			c.mu.Unlock()
			return runs, err
		}
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// fresh is query's cached runs if they are recent enough; c.mu is held.
func (c *EstimateCache) fresh(query string, now time.Time) ([]time.Duration, bool) {
	e, ok := c.entries[query]
	ttl := estimateCacheTTL
	if len(e.runs) < scheduler.LearnedMinRuns {
		ttl = estimateCacheTTLFew
	}
	if !ok || now.Sub(e.at) >= ttl {
		return nil, false
	}
	return e.runs, true
}

// put caches runs for query; c.mu is held.
func (c *EstimateCache) put(query string, runs []time.Duration, now time.Time) {
	if c.entries == nil || len(c.entries) >= estimateCacheMax {
		c.entries = map[string]cachedRuns{}
	}
	c.entries[query] = cachedRuns{runs: runs, at: now}
}

// RuntimeQueries are the visibility queries for the completed jobs a job's runtime is learned
// from, finest first: the jobs of its shape in its workspace, then those of its class and total
// GPUs there. Only jobs that recorded their runtime (TrainqRunSeconds) match.
func RuntimeQueries(in protocol.EstimateRuntimeInput) [2]string {
	quote := func(s string) string { return "'" + strings.NewReplacer("'", "", "\\", "", "\"", "").Replace(s) + "'" }
	common := fmt.Sprintf("WorkflowType = '%s' AND %s = %s AND %s = '%s' AND %s > 0",
		protocol.JobWorkflowName, protocol.SAWorkspace, quote(in.Workspace), protocol.SAState, protocol.StateCompleted, protocol.SARunSeconds)
	return [2]string{
		fmt.Sprintf("%s AND %s = %s", common, protocol.SAShape, quote(in.Shape)),
		fmt.Sprintf("%s AND %s = %s AND %s = %d", common, protocol.SAPriority, quote(in.Class), protocol.SAGPUs, in.GPUs),
	}
}

// EstimateRuntime learns a job's runtime estimate from the latest completed jobs like it, as
// visibility lists them (newest first): scheduler.LearnedRuntime of the jobs of its shape, or
// else of its class and size; nil when neither has enough. RequestCapacity runs it before it
// sends the request, which carries the estimate, so the allocator keeps nothing per shape.
func (a *Activities) EstimateRuntime(ctx context.Context, in protocol.EstimateRuntimeInput) (*protocol.RuntimeEstimate, error) {
	bases := [2]string{"jobs of this shape", fmt.Sprintf("%s %d-GPU jobs", in.Class, in.GPUs)}
	for i, q := range RuntimeQueries(in) {
		runs, err := a.completedRuntimes(ctx, q)
		if err != nil {
			return nil, err
		}
		if d, ok := scheduler.LearnedRuntime(runs, scheduler.LearnedPercentile); ok {
			return &protocol.RuntimeEstimate{Runtime: d, Runs: min(len(runs), scheduler.LearnedRuns), Basis: bases[i], Workspace: in.Workspace}, nil
		}
	}
	return nil, nil
}

// completedRuntimes lists the runtimes of the latest scheduler.LearnedRuns jobs query matches.
func (a *Activities) completedRuntimes(ctx context.Context, query string) ([]time.Duration, error) {
	return a.Estimates.runs(ctx, query, func() ([]time.Duration, error) {
		resp, err := a.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: scheduler.LearnedRuns})
		if err != nil {
			return nil, fmt.Errorf("list the completed jobs like this one: %w", err)
		}
		dc := converter.GetDefaultDataConverter()
		var runs []time.Duration
		for _, e := range resp.GetExecutions() {
			p := e.GetSearchAttributes().GetIndexedFields()[protocol.SARunSeconds]
			var secs int64
			if p == nil || dc.FromPayload(p, &secs) != nil || secs <= 0 {
				activity.GetLogger(ctx).Warn("a completed job without a readable runtime", "job", e.GetExecution().GetWorkflowId())
				continue
			}
			runs = append(runs, time.Duration(secs)*time.Second)
			if len(runs) == scheduler.LearnedRuns {
				break
			}
		}
		return runs, nil
	})
}
