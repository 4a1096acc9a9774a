package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"golang.org/x/sync/singleflight"

	"github.com/trainq/trainq/protocol"
)

// ErrNoAllocator is returned by Queue when the allocation's allocator does not run.
var ErrNoAllocator = errors.New("no allocator")

type noAllocatorError struct{ msg string }

func (e *noAllocatorError) Error() string        { return e.msg }
func (e *noAllocatorError) Is(target error) bool { return target == ErrNoAllocator }

// Queue returns the allocator's view of an allocation, with the first page
// of its waiting jobs (see QueuePage).
func (c *Client) Queue(ctx context.Context, region, allocation string) (protocol.QueueView, error) {
	return c.QueuePage(ctx, region, allocation, protocol.QueuePage{})
}

// QueuePage returns the allocator's view of an allocation, listing the
// waiting jobs of page (default: the first protocol.DefaultQueuePageLimit)
// with the totals of the whole queue. A page out of bounds is a
// *protocol.FieldError naming the field.
func (c *Client) QueuePage(ctx context.Context, region, allocation string, page protocol.QueuePage) (protocol.QueueView, error) {
	var v protocol.QueueView
	if err := page.Validate(); err != nil {
		return v, err
	}
	resp, err := c.Temporal.QueryWorkflow(ctx, protocol.AllocatorWorkflowID(region, allocation), "", protocol.QueryQueue, page)
	if err != nil {
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return v, &noAllocatorError{fmt.Sprintf("allocation %s/%s has no running allocator; is trainq-worker running?", region, allocation)}
		}
		return v, err
	}
	return answer[protocol.QueueView](resp, nil)
}

// Counts returns the allocator's queue counts, without rendering the queue.
func (c *Client) Counts(ctx context.Context, region, allocation string) (protocol.QueueCounts, error) {
	return answer[protocol.QueueCounts](c.Temporal.QueryWorkflow(ctx, protocol.AllocatorWorkflowID(region, allocation), "", protocol.QueryCounts))
}

// countsTimeout bounds the queue-length check of a submission: a slow or
// absent allocator must not hold up submissions (the allocator checks again).
const countsTimeout = 2 * time.Second

// checkQueueRoom refuses a submission to an allocation whose queue is full,
// before anything starts.
func (c *Client) checkQueueRoom(ctx context.Context, spec protocol.CheckedSpec) error {
	_, alloc, err := c.config().Allocation(spec.Region, spec.AllocationName)
	if err != nil {
		return err
	}
	class := spec.Class()
	limit := alloc.WaitingLimits().Cap(spec.Workspace, class)
	// One more job could reach the workspace's limit: ask again rather than trust a count that
	// may be a second old.
	counts, err := c.recentCounts(ctx, spec.Region, alloc.Name, func(counts protocol.QueueCounts) bool {
		return limit >= 0 && counts.WorkspaceWaiting[spec.Workspace][class.String()]+1 >= limit
	})
	if err != nil {
		return nil // no answer in time: the allocator checks again
	}
	if counts.Waiting >= alloc.MaxWaiting {
		return &protocol.QueueFullError{Region: spec.Region, Allocation: alloc.Name, Waiting: counts.Waiting}
	}
	if n := counts.WorkspaceWaiting[spec.Workspace][class.String()]; limit >= 0 && n >= limit {
		return &protocol.WorkspaceQueueFullError{Region: spec.Region, Allocation: alloc.Name, Workspace: spec.Workspace, Class: class, Waiting: n, Limit: limit}
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

// countsCache is shared by every Client of the process, so that clients
// made per request still share one query.
var countsCache = struct {
	sync.Mutex
	at     map[string]time.Time
	counts map[string]protocol.QueueCounts
	flight singleflight.Group
}{at: map[string]time.Time{}, counts: map[string]protocol.QueueCounts{}}

// recentCounts is the allocation's queue counts, reused while recent enough:
// one second when the queue is at least half full, else ten, and never when
// stale says the caller cannot decide from the counts cached.
func (c *Client) recentCounts(ctx context.Context, region, allocation string, stale func(protocol.QueueCounts) bool) (protocol.QueueCounts, error) {
	id := protocol.AllocatorWorkflowID(region, allocation)
	countsCache.Lock()
	at, ok := countsCache.at[id]
	counts := countsCache.counts[id]
	countsCache.Unlock()
	maxAge := countsMaxAge
	if counts.MaxWaiting > 0 && counts.Waiting*2 >= counts.MaxWaiting {
		maxAge = countsMaxAgeNearFull
	}
	if ok && stale(counts) {
		maxAge = 0
	}
	if ok && time.Since(at) < maxAge {
		return counts, nil
	}
	// Concurrent submissions share one query.
	v, err, _ := countsCache.flight.Do(id, func() (any, error) {
		qctx, cancel := context.WithTimeout(ctx, countsTimeout)
		defer cancel()
		counts, err := c.Counts(qctx, region, allocation)
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
