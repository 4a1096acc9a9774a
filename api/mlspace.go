package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// ML Space's own answer shapes, next to trainq's richer ones. A call gets
// ML Space's when it sends x-workspace-id, as ML Space's clients do on every
// call, or asks with view=mlspace; view=trainq asks for trainq's.

// viewParam is the query parameter that picks the shape.
const viewParam = "view"

// shapeParams reads which shape r asks for and refuses query parameters
// outside view and allowed.
func shapeParams(r *http.Request, allowed ...string) (mlspace bool, err error) {
	if err := checkParams(r, append([]string{viewParam}, allowed...)...); err != nil {
		return false, err
	}
	return wantsMLSpace(r)
}

// wantsMLSpace says which shape r asks for.
func wantsMLSpace(r *http.Request) (bool, error) {
	switch v := r.URL.Query().Get(viewParam); v {
	case "mlspace":
		return true, nil
	case "trainq":
		return false, nil
	case "":
		return strings.TrimSpace(r.Header.Get("x-workspace-id")) != "", nil
	default:
		return false, errorf(http.StatusBadRequest, codeInvalidParam, viewParam, fmt.Sprintf("%q is not allowed; use mlspace or trainq", v))
	}
}

// checkParams refuses query parameters outside allowed.
func checkParams(r *http.Request, allowed ...string) error {
	for k := range r.URL.Query() {
		if !slices.Contains(allowed, k) {
			return errorf(http.StatusBadRequest, codeInvalidParam, k, fmt.Sprintf("unknown query parameter %q; allowed: %s", k, strings.Join(allowed, ", ")))
		}
	}
	return nil
}

// mlspaceJob is ML Space's GET /jobs/{job_name}: the status in lower case
// and the times in epoch seconds; trainq's whole view rides along.
type mlspaceJob struct {
	UID         string   `json:"uid"`
	JobName     string   `json:"job_name"`
	Status      string   `json:"status"`
	CreatedAt   int64    `json:"created_at"`
	PendingAt   *int64   `json:"pending_at"`
	RunningAt   *int64   `json:"running_at"`
	CompletedAt *int64   `json:"completed_at"`
	Warnings    []string `json:"warnings,omitempty"`
	Trainq      *jobView `json:"trainq,omitempty"`
}

func epoch(t *time.Time) *int64 {
	if t == nil || t.IsZero() {
		return nil
	}
	s := t.Unix()
	return &s
}

func mlspaceJobOf(uid string, v *jobView) mlspaceJob {
	return mlspaceJob{UID: uid, JobName: v.JobName, Status: strings.ToLower(v.Status), CreatedAt: v.CreatedAt.Unix(),
		PendingAt: epoch(v.PendingAt), RunningAt: epoch(v.RunningAt), CompletedAt: epoch(v.CompletedAt), Warnings: v.Warnings, Trainq: v}
}

// jobNotFoundMLSpace is ML Space's answer for a job it does not know: 200
// with the status "job not found".
func jobNotFoundMLSpace(w http.ResponseWriter, name string) {
	writeJSON(w, http.StatusOK, map[string]string{"job_name": name, "status": "job not found"})
}

// params answers GET /jobs/{job_name}/params: every RunJobRequest field of
// the job, as ML Space lists them.
func (s *Server) params(w http.ResponseWriter, r *http.Request, p Principal) {
	ctx, cancel, st, ok := s.jobOfCall(w, r, p)
	defer cancel()
	if !ok {
		return
	}
	spec := st.Spec
	if spec.Region == "" {
		spec.Region = st.Region
	}
	if spec.AllocationName == "" {
		spec.AllocationName = st.Allocation
	}
	params := spec.Params()
	s.writeJobRedacted(ctx, w, r, p, st, &params)
}

// writeJobRedacted answers v, about job st, hiding in every string of it the
// names of other workspaces' jobs (a job's own texts can name them).
func (s *Server) writeJobRedacted(ctx context.Context, w http.ResponseWriter, r *http.Request, p Principal, st protocol.JobStatus, v any) {
	rd := s.redactor(p)
	rd.know(st.JobName)
	if err := rd.learn(ctx, referenced(st)); err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeRedacted(ctx, w, r, rd, v)
}

// jobOfCall reads the job a /jobs/{job_name}/... call names: visible to p,
// and in the region the call names, if it names one. It answers the error
// itself; cancel ends the call's context.
func (s *Server) jobOfCall(w http.ResponseWriter, r *http.Request, p Principal) (ctx context.Context, cancel context.CancelFunc, st protocol.JobStatus, ok bool) {
	ctx, cancel = s.call(r)
	err := checkParams(r, "region")
	var info client.JobInfo
	if err == nil {
		info, st, err = s.visibleStatus(ctx, p, r.PathValue("job_name"))
	}
	if err == nil {
		err = checkRegion(r, info, st)
	}
	if err != nil {
		s.fail(w, r, err)
		return ctx, cancel, st, false
	}
	if st.JobName == "" {
		st.JobName = r.PathValue("job_name")
	}
	return ctx, cancel, st, true
}

// currentPlacement is the placement of the job's attempt that holds
// capacity now, if any.
func currentPlacement(st protocol.JobStatus) ([]scheduler.WorkerPlacement, bool) {
	if len(st.Attempts) == 0 || st.State.Terminal() {
		return nil, false
	}
	a := st.Attempts[len(st.Attempts)-1]
	if a.StartedAt == nil || a.EndedAt != nil || len(a.Placement) == 0 {
		return nil, false
	}
	return a.Placement, true
}

// nodes answers GET /jobs/{job_name}/nodes: the nodes the job runs on now
// (404 while it waits).
func (s *Server) nodes(w http.ResponseWriter, r *http.Request, p Principal) {
	_, cancel, st, ok := s.jobOfCall(w, r, p)
	defer cancel()
	if !ok {
		return
	}
	name := st.JobName
	placement, ok := currentPlacement(st)
	if !ok {
		s.fail(w, r, errorf(http.StatusNotFound, codeNotFound, "", fmt.Sprintf("job %s runs on no node now: it is %s", name, st.State)))
		return
	}
	names := []string{}
	for _, pl := range placement {
		if !slices.Contains(names, pl.Node) {
			names = append(names, pl.Node)
		}
	}
	writeJSON(w, http.StatusOK, map[string][]string{"node_names": names})
}

// elasticPod is one worker of a pytorch_elastic job, as ML Space's
// /jobs/elastic/{job_name}/pods lists it (job_version is the attempt).
type elasticPod struct {
	UID         string `json:"uid"`
	JobName     string `json:"job_name"`
	JobVersion  int    `json:"job_version"`
	Status      string `json:"status"`
	Reason      string `json:"reason"`
	RunningAt   *int64 `json:"running_at"`
	CompletedAt *int64 `json:"completed_at"`
	UpdatedAt   *int64 `json:"updated_at"`
	Duration    int64  `json:"duration"` // seconds
}

// elasticPods answers GET /jobs/elastic/{job_name}/pods: the workers of every
// attempt of a pytorch_elastic job.
func (s *Server) elasticPods(w http.ResponseWriter, r *http.Request, p Principal) {
	ctx, cancel, st, ok := s.jobOfCall(w, r, p)
	defer cancel()
	if !ok {
		return
	}
	name := st.JobName
	if st.Spec.Type != cluster.TypePyTorchElastic {
		s.fail(w, r, errorf(http.StatusUnprocessableEntity, codeWrongKind, "", fmt.Sprintf("job %s is of type %s, not pytorch_elastic", name, st.Spec.Type)))
		return
	}
	now := time.Now()
	pods := []elasticPod{}
	for i, a := range st.Attempts {
		if a.StartedAt == nil {
			continue
		}
		status, end := "running", now
		if a.EndedAt != nil {
			status, end = "completed", *a.EndedAt
			if a.ExitCode == nil || *a.ExitCode != 0 {
				status = "failed"
			}
		} else if i < len(st.Attempts)-1 || st.State.Terminal() {
			status = strings.ToLower(string(st.State))
		}
		for _, pl := range a.Placement {
			pods = append(pods, elasticPod{
				UID: fmt.Sprintf("%s-a%d-w%d", name, a.Number, pl.Worker), JobName: name, JobVersion: a.Number,
				Status: status, Reason: a.EndReason, RunningAt: epoch(a.StartedAt), CompletedAt: epoch(a.EndedAt),
				UpdatedAt: epoch(&end), Duration: int64(end.Sub(*a.StartedAt) / time.Second),
			})
		}
	}
	out := map[string]any{"pods": pods}
	s.writeJobRedacted(ctx, w, r, p, st, &out)
}

// allocationSummary is one entry of ML Space's GET /allocations.
type allocationSummary struct {
	ID              string `json:"id"`
	Name            string `json:"name"`
	RegionKey       string `json:"region_key"`
	WorkspaceAccess bool   `json:"workspace_access"`
}

// usage is ML Space's {current, available, all}; Current and Available are
// known for GPUs only (trainq places by GPU; CPU and memory come with them).
type usage struct {
	Current   *int `json:"current,omitempty"`
	Available *int `json:"available,omitempty"`
	All       int  `json:"all"`
}

type allocationDetail struct {
	allocationSummary
	Status    string   `json:"status"`
	Nodes     []string `json:"nodes"`
	Resources struct {
		CPU         usage          `json:"cpu"`
		GPU         usage          `json:"gpu"`
		RAM         usage          `json:"ram"`
		NodesStatus map[string]int `json:"nodes_status"`
	} `json:"resources"`
}

type allocationNode struct {
	Name          string `json:"name"`
	Status        string `json:"status"` // ready, or fenced (its agent has to confirm what runs there)
	Unschedulable bool   `json:"unschedulable"`
	GPUType       string `json:"gpu_type"`
	ResourceUsage struct {
		Total     int `json:"total"`
		Allocated int `json:"allocated"`
		Available int `json:"available"`
	} `json:"resource_usage"` // GPUs
	Queue string `json:"queue"`
}

type instanceTypeCount struct {
	Key          string `json:"key"`
	Name         string `json:"name"`
	Count        int    `json:"count"`        // workers of this type that fit on free GPUs now
	Availability int    `json:"availability"` // the same, in ML Space's word
}

// allocationByID finds the allocation an id names: its name, in the region
// the query names or the only region that has it.
func (s *Server) allocationByID(r *http.Request, id string) (*config.Region, *config.Allocation, error) {
	region := r.URL.Query().Get("region")
	var found []struct {
		r *config.Region
		a *config.Allocation
	}
	for i := range s.config().Regions {
		reg := &s.config().Regions[i]
		if region != "" && reg.Name != region {
			continue
		}
		for j := range reg.Allocations {
			if reg.Allocations[j].Name == id {
				found = append(found, struct {
					r *config.Region
					a *config.Allocation
				}{reg, &reg.Allocations[j]})
			}
		}
	}
	switch len(found) {
	case 0:
		return nil, nil, errorf(http.StatusNotFound, codeNotFound, "", fmt.Sprintf("allocation %q does not exist; see /public/v2/allocations", id))
	case 1:
		return found[0].r, found[0].a, nil
	}
	return nil, nil, errorf(http.StatusBadRequest, codeInvalidParam, "region", fmt.Sprintf("allocation %q is in several regions; name one with region", id))
}

// listAllocations answers GET /allocations.
func (s *Server) listAllocations(w http.ResponseWriter, r *http.Request, _ Principal) {
	if err := checkParams(r, "region"); err != nil {
		s.fail(w, r, err)
		return
	}
	out := []allocationSummary{}
	for _, reg := range s.config().Regions {
		if q := r.URL.Query().Get("region"); q != "" && q != reg.Name {
			continue
		}
		for _, a := range reg.Allocations {
			out = append(out, allocationSummary{ID: a.Name, Name: a.Name, RegionKey: reg.Name, WorkspaceAccess: true})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// liveNodes is the allocation's nodes with their GPUs in use now.
func (s *Server) liveNodes(r *http.Request, reg *config.Region, a *config.Allocation) ([]scheduler.NodeInfo, error) {
	ctx, cancel := s.call(r)
	defer cancel()
	v, err := s.backend.QueuePage(ctx, reg.Name, a.Name, protocol.QueuePage{Limit: 1})
	if err != nil {
		return nil, err
	}
	return v.Nodes, nil
}

// getAllocation answers GET /allocations/{id}.
func (s *Server) getAllocation(w http.ResponseWriter, r *http.Request, _ Principal) {
	reg, a, nodes, ok := s.allocationNow(w, r)
	if !ok {
		return
	}
	d := allocationDetail{allocationSummary: allocationSummary{ID: a.Name, Name: a.Name, RegionKey: reg.Name, WorkspaceAccess: true},
		Status: "active", Nodes: []string{}}
	d.Resources.NodesStatus = map[string]int{"ready": 0, "fenced": 0}
	gpuUsed, gpuFree := 0, 0
	for _, n := range a.Nodes {
		d.Nodes = append(d.Nodes, n.Name)
		d.Resources.CPU.All += n.CPU
		d.Resources.RAM.All += n.RAMGB
		d.Resources.GPU.All += n.GPUs
	}
	for _, n := range nodes {
		gpuUsed += n.AllocatedGPUs + n.ReleasingGPUs
		gpuFree += n.FreeGPUs
		if n.Lost {
			d.Resources.NodesStatus["fenced"]++
		} else {
			d.Resources.NodesStatus["ready"]++
		}
	}
	d.Resources.GPU.Current, d.Resources.GPU.Available = &gpuUsed, &gpuFree
	writeJSON(w, http.StatusOK, d)
}

// allocationNodes answers GET /allocations/{id}/nodes.
func (s *Server) allocationNodes(w http.ResponseWriter, r *http.Request, _ Principal) {
	_, a, nodes, ok := s.allocationNow(w, r)
	if !ok {
		return
	}
	out := []allocationNode{}
	for _, n := range nodes {
		an := allocationNode{Name: n.Name, Status: "ready", Unschedulable: n.Lost, GPUType: n.Family, Queue: nodeQueue(a, n.Name)}
		if n.Lost {
			an.Status = "fenced"
		}
		an.ResourceUsage.Total, an.ResourceUsage.Allocated, an.ResourceUsage.Available = n.GPUs, n.AllocatedGPUs+n.ReleasingGPUs, n.FreeGPUs
		out = append(out, an)
	}
	writeJSON(w, http.StatusOK, out)
}

// fitNow counts the workers of each of the allocation's instance types that
// fit on its free GPUs now (each node counted on its own).
func fitNow(a *config.Allocation, nodes []scheduler.NodeInfo) []instanceTypeCount {
	free := map[string]int{}
	for _, n := range nodes {
		if !n.Lost {
			free[n.Name] = n.FreeGPUs
		}
	}
	out := []instanceTypeCount{}
	for _, it := range instanceTypes(a.Nodes) {
		c := instanceTypeCount{Key: it.Name, Name: it.Name}
		for _, n := range a.Nodes {
			if n.Family != it.Family || n.CPU < it.CPU || n.RAMGB < it.RAMGB {
				continue
			}
			switch {
			case it.GPUs == 0:
				if f, ok := free[n.Name]; ok && f == n.GPUs {
					c.Count++
				}
			default:
				c.Count += free[n.Name] / it.GPUs
			}
		}
		c.Availability = c.Count
		out = append(out, c)
	}
	return out
}

// allocationInstanceTypes answers GET /allocations/{id}/instance-types.
func (s *Server) allocationInstanceTypes(w http.ResponseWriter, r *http.Request, _ Principal) {
	if _, a, nodes, ok := s.allocationNow(w, r); ok {
		writeJSON(w, http.StatusOK, fitNow(a, nodes))
	}
}

// allocationNow reads the allocation an /allocations/{id} call names, and
// its nodes as the allocator sees them now; it answers the error itself.
func (s *Server) allocationNow(w http.ResponseWriter, r *http.Request) (*config.Region, *config.Allocation, []scheduler.NodeInfo, bool) {
	err := checkParams(r, "region")
	var reg *config.Region
	var a *config.Allocation
	var nodes []scheduler.NodeInfo
	if err == nil {
		reg, a, err = s.allocationByID(r, r.PathValue("id"))
	}
	if err == nil {
		nodes, err = s.liveNodes(r, reg, a)
	}
	if err != nil {
		s.fail(w, r, err)
		return nil, nil, nil, false
	}
	return reg, a, nodes, true
}

// availableInstanceTypes answers GET /instance_types/{region}/available:
// the instance types of the region's allocations (or of allocation_name's)
// with how many fit now.
func (s *Server) availableInstanceTypes(w http.ResponseWriter, r *http.Request, _ Principal) {
	if err := checkParams(r, "allocation_name", "queue_name"); err != nil {
		s.fail(w, r, err)
		return
	}
	region := r.PathValue("region")
	if !validRegion(s.config(), region) {
		s.fail(w, r, errorf(http.StatusNotFound, codeNotFound, "", fmt.Sprintf("region %q does not exist; see /public/v2/allocations", region)))
		return
	}
	want := r.URL.Query().Get("allocation_name")
	queueName := r.URL.Query().Get("queue_name")
	counts := map[string]*instanceTypeCount{}
	var order []string
	matched := false
	for i := range s.config().Regions {
		reg := &s.config().Regions[i]
		if reg.Name != region {
			continue
		}
		for j := range reg.Allocations {
			a := &reg.Allocations[j]
			if want != "" && a.Name != want {
				continue
			}
			scope := a
			if queueName != "" {
				q, err := a.QueueNamed(queueName)
				if err != nil {
					if want != "" {
						s.fail(w, r, errorf(http.StatusNotFound, codeNotFound, "queue_name", err.Error()))
						return
					}
					continue // another allocation of the region may have it
				}
				scope = queueScope(a, q)
			}
			matched = true
			nodes, err := s.liveNodes(r, reg, a)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			for _, c := range fitNow(scope, nodes) {
				if counts[c.Key] == nil {
					cc := c
					counts[c.Key] = &cc
					order = append(order, c.Key)
					continue
				}
				counts[c.Key].Count += c.Count
				counts[c.Key].Availability += c.Count
			}
		}
	}
	if !matched && queueName != "" && want == "" {
		s.fail(w, r, errorf(http.StatusNotFound, codeNotFound, "queue_name", fmt.Sprintf("no allocation of region %s has a queue %q; see /public/v2/queues", region, queueName)))
		return
	}
	if !matched {
		s.fail(w, r, errorf(http.StatusNotFound, codeNotFound, "allocation_name", fmt.Sprintf("region %s has no allocation %q", region, want)))
		return
	}
	type entry struct {
		Count int    `json:"count"`
		Name  string `json:"name"`
		Key   string `json:"key"`
	}
	out := []entry{}
	for _, k := range order {
		out = append(out, entry{Count: counts[k].Count, Name: k, Key: k})
	}
	writeJSON(w, http.StatusOK, map[string]any{"instance_types": out})
}

// checkRegion refuses a region query that does not name the job's region.
func checkRegion(r *http.Request, info client.JobInfo, st protocol.JobStatus) error {
	region := r.URL.Query().Get("region")
	if region == "" || region == st.Region {
		return nil
	}
	return errors.Join(client.ErrJobNotFound, fmt.Errorf("job %s is not in region %s", info.JobName, region))
}

// nodeQueue names a node's queue as ML Space shows one per node: the first
// queue that lists it, else the default queue (which then holds every node).
func nodeQueue(a *config.Allocation, node string) string {
	for _, q := range a.QueueList() {
		if slices.Contains(q.Nodes, node) {
			return q.Name
		}
	}
	return a.DefaultQueue().Name
}
