package api

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// awaitingItem is one waiting job of GET /queues/{id}/awaiting-launch-resources,
// in ML Space's words. A job of another workspace shows its class, size and
// place, without its name, workspace or author.
type awaitingItem struct {
	LaunchOrder  int    `json:"launch_order"`
	Name         string `json:"name"`
	Type         string `json:"type"`
	WorkspaceID  string `json:"workspace_id"`
	InstanceType string `json:"instance_type"`
	QueueID      string `json:"queue_id"`
	Priority     string `json:"priority"`
	Author       string `json:"author"`
	Status       string `json:"status"`
	NWorkers     int    `json:"n_workers"`
	GPUCount     int    `json:"gpu_count"`
	// UnschedulableWorkerCount is how many of its workers cannot be placed
	// now: all of them, as a gang starts whole (an elastic one: its least size).
	UnschedulableWorkerCount int       `json:"unschedulable_worker_count"`
	CreatedAt                time.Time `json:"created_at"`
	// Reason is trainq's: why it waits.
	Reason string `json:"reason"`
}

// awaitingQuery is the decoded query of awaiting-launch-resources.
type awaitingQuery struct {
	class               scheduler.Class
	limit, offset       int
	types               []string
	gpuMin, gpuMax      int
	workspaces, authors []string
	search, orderBy     string
	descending          bool
}

// awaitingOrders are the values of order_by (a leading "-" sorts descending).
var awaitingOrders = []string{"launch_order", "created_at", "gpu_count", "n_workers"}

func parseAwaiting(r *http.Request) (awaitingQuery, error) {
	if err := checkParams(r, "region", "priority", "limit", "offset", "type", "gpu_count_min", "gpu_count_max",
		"workspace_ids", "authors", "search_by_name", "order_by"); err != nil {
		return awaitingQuery{}, err
	}
	v := r.URL.Query()
	q := awaitingQuery{gpuMax: -1, orderBy: "launch_order"}
	bad := func(field, msg string) error { return errorf(http.StatusBadRequest, codeInvalidParam, field, msg) }
	p := v.Get("priority")
	if p == "" {
		return q, bad("priority", "is required: low, medium or high")
	}
	c, err := config.ParseQueueClass(p)
	if err != nil {
		return q, bad("priority", err.Error())
	}
	q.class = c
	num := func(field string, required bool, lo, hi int) (int, error) {
		s := v.Get(field)
		if s == "" {
			if required {
				return 0, bad(field, fmt.Sprintf("is required: a whole number from %d to %d", lo, hi))
			}
			return -1, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			return 0, bad(field, fmt.Sprintf("%q is not a whole number from %d to %d", s, lo, hi))
		}
		return n, nil
	}
	if q.limit, err = num("limit", true, 1, 200); err != nil {
		return q, err
	}
	if q.offset, err = num("offset", true, 0, config.MaxMaxWaiting); err != nil {
		return q, err
	}
	if q.gpuMin, err = num("gpu_count_min", false, 0, 1<<20); err != nil {
		return q, err
	}
	if q.gpuMax, err = num("gpu_count_max", false, 0, 1<<20); err != nil {
		return q, err
	}
	if q.gpuMin >= 0 && q.gpuMax >= 0 && q.gpuMin > q.gpuMax {
		return q, bad("gpu_count_min", fmt.Sprintf("%d is more than gpu_count_max (%d)", q.gpuMin, q.gpuMax))
	}
	list := func(field string) []string {
		var out []string
		for _, s := range v[field] {
			for _, x := range strings.Split(s, ",") {
				if x = strings.TrimSpace(x); x != "" {
					out = append(out, x)
				}
			}
		}
		return out
	}
	q.types, q.workspaces, q.authors = list("type"), list("workspace_ids"), list("authors")
	for _, t := range q.types {
		if t != string(scheduler.KindJob) && t != string(scheduler.KindNotebook) {
			return q, bad("type", fmt.Sprintf("%q is not job or notebook", t))
		}
	}
	q.search = v.Get("search_by_name")
	if o := v.Get("order_by"); o != "" {
		q.orderBy, q.descending = strings.CutPrefix(o, "-")
		if !slices.Contains(awaitingOrders, q.orderBy) {
			return q, bad("order_by", fmt.Sprintf("%q is not allowed; use %s (a leading - sorts descending)", o, strings.Join(awaitingOrders, ", ")))
		}
	}
	return q, nil
}

// awaitingLaunch answers GET /queues/{id}/awaiting-launch-resources: the
// queue's waiting jobs of one class in launch order (the allocator's), with
// ML Space's filters, order and paging, and count of all that match. Its cost
// grows with the jobs waiting in that class of the allocation (at most
// max_waiting): the allocator is read a page of 1,000 at a time, and the
// jobs' queue, workspace and author come from visibility, 200 names a call.
func (s *Server) awaitingLaunch(w http.ResponseWriter, r *http.Request, p Principal) {
	aq, err := parseAwaiting(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reg, a, q, err := s.queueByID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	waiting, err := s.classWaiting(ctx, reg.Name, a.Name, aq.class)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	meta, err := s.summaries(ctx, waiting)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	queueID := a.Name + ":" + q.Name
	isDefault := q.Name == a.DefaultQueue().Name
	var items []awaitingItem
	rd := s.redactor(p)
	for _, wi := range waiting {
		j, ok := meta[wi.Job]
		if !ok { // not listed yet (visibility lags), or gone: not shown
			continue
		}
		if j.Queue != q.Name && (j.Queue != "" || !isDefault) {
			continue
		}
		mine := p.Admin() || j.Workspace == p.Workspace
		it := awaitingItem{LaunchOrder: wi.Position, Name: wi.Job, Type: string(wi.Kind), InstanceType: j.InstanceType, QueueID: queueID,
			Priority: wi.Class.String(), Status: j.Status, NWorkers: wi.Workers, GPUCount: wi.GPUs,
			UnschedulableWorkerCount: cmp.Or(wi.MinWorkers, wi.Workers), CreatedAt: j.CreatedAt, Reason: wi.Reason}
		if mine {
			it.WorkspaceID, it.Author = j.Workspace, j.Author
			rd.know(wi.Job)
		}
		if !aq.matches(it, j) {
			continue
		}
		items = append(items, it)
	}
	aq.sort(items)
	out := struct {
		Items []awaitingItem `json:"items"`
		Count int            `json:"count"`
	}{Items: []awaitingItem{}, Count: len(items)}
	if aq.offset < len(items) {
		out.Items = items[aq.offset:min(aq.offset+aq.limit, len(items))]
	}
	// A reason names the jobs it waits for, whatever their names look like: learn them, so that
	// another workspace's are hidden in it.
	var named []string
	for _, wi := range waiting {
		named = append(named, wi.WaitingFor...)
	}
	if err := rd.learn(ctx, named); err != nil {
		s.fail(w, r, err)
		return
	}
	for i := range out.Items {
		out.Items[i].Name = rd.name(out.Items[i].Name)
	}
	s.writeRedacted(ctx, w, r, rd, &out)
}

// matches applies the filters; workspace, author and name filters match
// only what the asker may see.
func (aq *awaitingQuery) matches(it awaitingItem, j client.JobSummary) bool {
	switch {
	case len(aq.types) > 0 && !slices.Contains(aq.types, it.Type),
		aq.gpuMin >= 0 && it.GPUCount < aq.gpuMin,
		aq.gpuMax >= 0 && it.GPUCount > aq.gpuMax,
		len(aq.workspaces) > 0 && !slices.Contains(aq.workspaces, it.WorkspaceID),
		len(aq.authors) > 0 && !slices.Contains(aq.authors, it.Author),
		aq.search != "" && (it.WorkspaceID == "" || !strings.Contains(strings.ToLower(it.Name+" "+j.JobDesc), strings.ToLower(aq.search))):
		return false
	}
	return true
}

func (aq *awaitingQuery) sort(items []awaitingItem) {
	key := func(a, b awaitingItem) int {
		switch aq.orderBy {
		case "created_at":
			return a.CreatedAt.Compare(b.CreatedAt)
		case "gpu_count":
			return cmp.Compare(a.GPUCount, b.GPUCount)
		case "n_workers":
			return cmp.Compare(a.NWorkers, b.NWorkers)
		}
		return cmp.Compare(a.LaunchOrder, b.LaunchOrder)
	}
	slices.SortStableFunc(items, func(a, b awaitingItem) int {
		c := key(a, b)
		if aq.descending {
			c = -c
		}
		return cmp.Or(c, cmp.Compare(a.LaunchOrder, b.LaunchOrder))
	})
}

// classWaiting reads the allocation's waiting jobs of one class, in launch
// order: a class's jobs are one run of the launch order, so only that run
// is read, a page at a time.
func (s *Server) classWaiting(ctx context.Context, region, allocation string, c scheduler.Class) ([]scheduler.WaitingInfo, error) {
	head, err := s.backend.QueuePage(ctx, region, allocation, protocol.QueuePage{Limit: 1})
	if err != nil {
		return nil, err
	}
	from, n := 0, head.WaitingByClass[c.String()]
	for k := c + 1; k <= scheduler.High; k++ {
		from += head.WaitingByClass[k.String()]
	}
	var out []scheduler.WaitingInfo
	for off := from; off < from+n; off += protocol.MaxQueuePageLimit {
		v, err := s.backend.QueuePage(ctx, region, allocation, protocol.QueuePage{Offset: off, Limit: min(protocol.MaxQueuePageLimit, from+n-off)})
		if err != nil {
			return nil, err
		}
		if len(v.Waiting) == 0 {
			break // the queue moved under us
		}
		for _, wi := range v.Waiting {
			if wi.Class == c {
				out = append(out, wi)
			}
		}
	}
	return out, nil
}

// summaries looks up the jobs' visibility records, 200 names a call.
func (s *Server) summaries(ctx context.Context, waiting []scheduler.WaitingInfo) (map[string]client.JobSummary, error) {
	out := make(map[string]client.JobSummary, len(waiting))
	for rest := waiting; len(rest) > 0; {
		batch := rest[:min(len(rest), 200)]
		rest = rest[len(batch):]
		names := make([]string, len(batch))
		for i, wi := range batch {
			names[i] = wi.Job
		}
		jobs, err := s.backend.List(ctx, client.ListFilter{Names: names, Limit: len(names)})
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			out[j.JobName] = j
		}
	}
	return out, nil
}
