package api

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/scheduler"
)

// ML Space's queues (see config.Queue), under /public/v2/queues. A queue's
// id is "<allocation>:<queue>" (neither name may hold a colon); a region
// query parameter picks the region when two have an allocation of that name.

// queueSummary is one row of GET /queues.
type queueSummary struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Description  string `json:"description"`
	AllocationID string `json:"allocation_id"`
	Region       string `json:"region"`
	Active       bool   `json:"active"`
	Type         string `json:"type"`
	Default      bool   `json:"default"`
}

// queueDetail is GET /queues/{id}. Workspaces lists the assigned workspaces
// to admins; a user learns only whether its own workspace is assigned.
type queueDetail struct {
	queueSummary
	Metadata struct {
		DefaultPriority struct {
			Job      string `json:"job"`
			Notebook string `json:"notebook"`
		} `json:"default_priority"`
		JobPriorityAllowed []string `json:"job_priority_allowed"`
	} `json:"metadata"`
	Nodes      []string `json:"nodes"`
	Workspaces []string `json:"workspaces,omitempty"`
	Assigned   bool     `json:"assigned"`
}

// queueJob is one row of GET /queues/{id}/jobs, in ML Space's words.
type queueJob struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Status       string    `json:"status"`
	Priority     string    `json:"priority"`
	GPUCount     int64     `json:"gpu_count"`
	InstanceType string    `json:"instance_type,omitempty"`
	QueueName    string    `json:"queue_name"`
	Region       string    `json:"region"`
	RetryCount   int64     `json:"retry_count"`
	TryCount     int64     `json:"try_count"`
	UserEmail    string    `json:"user_email,omitempty"`
	Workspace    string    `json:"workspace,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
}

func queueID(a *config.Allocation, q config.Queue) string { return a.Name + ":" + q.Name }

func summaryOf(reg *config.Region, a *config.Allocation, q config.Queue) queueSummary {
	typ := q.Type
	if typ == "" {
		typ = "custom"
		if q.Name == config.DefaultQueueName {
			typ = "default"
		}
	}
	return queueSummary{ID: queueID(a, q), Name: q.Name, Description: q.Description, AllocationID: a.Name, Region: reg.Name,
		Active: true, Type: typ, Default: q.Name == a.DefaultQueue().Name}
}

// listQueues answers GET /queues?allocation_id=: the queues of one
// allocation, or of every allocation.
func (s *Server) listQueues(w http.ResponseWriter, r *http.Request, _ Principal) {
	if err := checkParams(r, "allocation_id", "region"); err != nil {
		s.fail(w, r, err)
		return
	}
	want, region := r.URL.Query().Get("allocation_id"), r.URL.Query().Get("region")
	if want != "" {
		if _, _, err := s.allocationByID(r, want); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	out := []queueSummary{}
	for ri := range s.config().Regions {
		reg := &s.config().Regions[ri]
		if region != "" && reg.Name != region {
			continue
		}
		for ai := range reg.Allocations {
			a := &reg.Allocations[ai]
			if want != "" && a.Name != want {
				continue
			}
			for _, q := range a.QueueList() {
				out = append(out, summaryOf(reg, a, q))
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// queueByID finds the queue an id names.
func (s *Server) queueByID(r *http.Request) (*config.Region, *config.Allocation, config.Queue, error) {
	id := r.PathValue("id")
	alloc, name, ok := strings.Cut(id, ":")
	if !ok || alloc == "" || name == "" {
		return nil, nil, config.Queue{}, errorf(http.StatusNotFound, codeNotFound, "", fmt.Sprintf("%q is not a queue id; ids are <allocation>:<queue>, see /public/v2/queues", id))
	}
	reg, a, err := s.allocationByID(r, alloc)
	if err != nil {
		return nil, nil, config.Queue{}, err
	}
	q, err := a.QueueNamed(name)
	if err != nil {
		return nil, nil, config.Queue{}, errorf(http.StatusNotFound, codeNotFound, "", err.Error())
	}
	return reg, a, q, nil
}

// getQueue answers GET /queues/{id}.
func (s *Server) getQueue(w http.ResponseWriter, r *http.Request, p Principal) {
	if err := checkParams(r, "region"); err != nil {
		s.fail(w, r, err)
		return
	}
	reg, a, q, err := s.queueByID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := queueDetail{queueSummary: summaryOf(reg, a, q), Nodes: a.QueueNodeNames(q), Assigned: q.AssignedTo(p.Workspace)}
	d.Metadata.DefaultPriority.Job = q.DefaultClass(scheduler.KindJob).String()
	d.Metadata.DefaultPriority.Notebook = scheduler.High.String()
	for _, c := range q.AllowedClasses() {
		d.Metadata.JobPriorityAllowed = append(d.Metadata.JobPriorityAllowed, c.String())
	}
	if p.Admin() {
		d.Workspaces = q.Workspaces
	}
	writeJSON(w, http.StatusOK, d)
}

// queueJobs answers GET /queues/{id}/jobs: the queue's jobs, newest first
// (a user sees its workspace's), with ML Space's status filter and paging.
func (s *Server) queueJobs(w http.ResponseWriter, r *http.Request, p Principal) {
	if err := checkParams(r, "region", "status", "offset", "limit"); err != nil {
		s.fail(w, r, err)
		return
	}
	reg, a, q, err := s.queueByID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	values := r.URL.Query()
	values.Del("region")
	f, err := s.listFilter(values, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f.Region, f.Allocation, f.Queue, f.DefaultQueue = reg.Name, a.Name, q.Name, q.Name == a.DefaultQueue().Name
	ctx, cancel := s.call(r)
	defer cancel()
	jobs, err := s.backend.List(ctx, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := struct {
		Jobs []queueJob `json:"jobs"`
	}{Jobs: []queueJob{}}
	rd := s.redactor(p)
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, queueJobOf(j, q))
		rd.know(j.JobName)
	}
	s.writeRedacted(ctx, w, r, rd, &out)
}

func queueJobOf(j client.JobSummary, q config.Queue) queueJob {
	tries := max(j.Attempt, 1)
	return queueJob{ID: j.RunID, Name: j.JobName, Status: j.Status, Priority: j.Priority, GPUCount: j.GPUs,
		InstanceType: j.InstanceType, QueueName: q.Name, Region: j.Region, RetryCount: tries - 1, TryCount: tries,
		UserEmail: j.Author, Workspace: j.Workspace, CreatedAt: j.CreatedAt}
}

// queueInstanceTypes answers GET /queues/{id}/instance-types: the
// allocation's instance types with how many fit on the queue's nodes now.
func (s *Server) queueInstanceTypes(w http.ResponseWriter, r *http.Request, _ Principal) {
	if err := checkParams(r, "region"); err != nil {
		s.fail(w, r, err)
		return
	}
	reg, a, q, err := s.queueByID(r)
	if err == nil {
		var nodes []scheduler.NodeInfo
		if nodes, err = s.liveNodes(r, reg, a); err == nil {
			writeJSON(w, http.StatusOK, fitNow(queueScope(a, q), nodes))
			return
		}
	}
	s.fail(w, r, err)
}

// queueScope is the allocation narrowed to the queue's nodes.
func queueScope(a *config.Allocation, q config.Queue) *config.Allocation {
	narrowed := *a
	narrowed.Nodes = a.QueueNodes(q)
	return &narrowed
}
