package api

import (
	"compress/gzip"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The dashboard under /ui/: static pages (embedded, no token needed: they
// hold no data) whose script asks the REST API, with the token the user
// pastes into the page, for everything it shows. The data the REST API does
// not have in one answer comes from the two routes below, /ui/api/...,
// under the same auth and redaction rules as every other route.

//go:embed ui
var uiFiles embed.FS

// uiAssets serves the embedded files of ui/ under /ui/; any other path
// there is the API's 404.
func (s *Server) uiAssets() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err)
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/ui/")
		if name == "" {
			name = "index.html"
		}
		if st, err := fs.Stat(sub, name); err != nil || st.IsDir() || name == "index.html" && r.URL.Path != "/ui/" {
			s.notFound(w, r)
			return
		}
		// The pages load nothing from elsewhere; say so to the browser.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// GPU states of the grid.
const (
	gpuFree      = "free"
	gpuHeld      = "held"      // a running job's worker holds it
	gpuReleasing = "releasing" // a stopping worker holds it
	gpuNominated = "nominated" // a preempted worker holds it while it stops, or it is free and held, for its preemptor
	gpuReserved  = "reserved"  // free, on a node draining for a big job
	gpuLost      = "lost"      // its node's agent does not answer, or the node is fenced
)

// uiGPUsView answers GET /ui/api/allocations/{name}/gpus: each node's GPUs,
// one cell each, and totals per state, class and workspace.
type uiGPUsView struct {
	Region      string             `json:"region"`
	Allocation  string             `json:"allocation_name"`
	Workspace   string             `json:"workspace"` // the asker's
	Admin       bool               `json:"admin"`
	Totals      map[string]int     `json:"totals"` // GPUs per state, and "total"
	ByClass     []uiClassTotal     `json:"by_class"`
	ByWorkspace []uiWorkspaceTotal `json:"by_workspace"`
	Nodes       []uiNode           `json:"nodes"`
	Recovering  bool               `json:"recovering,omitempty"`
}

type uiClassTotal struct {
	Class   string `json:"class"`
	GPUs    int    `json:"gpus"`    // held by running jobs of the class
	Running int    `json:"running"` // jobs
	Waiting int    `json:"waiting"` // jobs
}

type uiWorkspaceTotal struct {
	Workspace string `json:"workspace"` // otherWorkspaces for every workspace the asker may not see
	GPUs      int    `json:"gpus"`
	Running   int    `json:"running"`
}

// otherWorkspaces is the one row of totals for the workspaces a user may not see.
const otherWorkspaces = "(other workspaces)"

type uiNode struct {
	Name        string   `json:"name"`
	Family      string   `json:"family"`
	GPUs        int      `json:"gpus"`
	Lost        bool     `json:"lost,omitempty"`
	Fenced      string   `json:"fenced,omitempty"` // why it grants nothing, when fenced
	ReservedFor string   `json:"reserved_for,omitempty"`
	HeldFor     string   `json:"held_for,omitempty"` // free GPUs held for a preemptor
	HeldGPUs    int      `json:"held_gpus,omitempty"`
	Cells       []uiCell `json:"cells"`
}

// uiCell is one GPU. A cell of another workspace's job names it hiddenName
// and keeps its class and size only.
type uiCell struct {
	Index       int        `json:"index"`
	State       string     `json:"state"`
	Job         string     `json:"job,omitempty"`
	Class       string     `json:"class,omitempty"`
	Type        string     `json:"type,omitempty"`
	JobGPUs     int        `json:"job_gpus,omitempty"`
	Attempt     int        `json:"attempt,omitempty"`
	Worker      *int       `json:"worker,omitempty"`
	Since       *time.Time `json:"since,omitempty"`
	NominatedTo string     `json:"nominated_to,omitempty"`
	ReservedFor string     `json:"reserved_for,omitempty"`
	// OnLoan: its job started on another job's reservation and gives the
	// GPU back if it is still running when that job may start.
	OnLoan bool `json:"on_loan,omitempty"`
}

// uiGPUs answers the GPU grid of an allocation.
func (s *Server) uiGPUs(w http.ResponseWriter, r *http.Request, p Principal) {
	region, name, ok := s.uiAllocation(w, r, "region")
	if !ok {
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	v, err := s.backend.QueuePage(ctx, region, name, protocol.QueuePage{Limit: 1})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rd := s.redactor(p)
	// A running job's workspace is in the view: no lookup is needed for it
	// (one that came without, from an older allocator, is looked up).
	var waiting []string
	for _, run := range v.Running {
		switch {
		case run.Workspace == "":
			waiting = append(waiting, run.Job)
		case p.CanSee(run.Workspace):
			rd.know(run.Job)
		default:
			rd.hide(run.Job)
		}
		if run.PreemptedBy != nil {
			waiting = append(waiting, run.PreemptedBy.Job)
		}
		waiting = append(waiting, run.Nominees...)
	}
	for _, n := range v.Nodes {
		waiting = append(waiting, n.ReservedFor, n.HeldFor)
	}
	if err := rd.learn(ctx, waiting); err != nil {
		s.fail(w, r, err)
		return
	}
	out := gpuGrid(v, p, rd)
	writeCompactJSON(w, r, out)
}

// gpuGrid turns the allocator's view into the grid, hiding what rd hides.
func gpuGrid(v protocol.QueueView, p Principal, rd *redactor) uiGPUsView {
	out := uiGPUsView{Region: v.Region, Allocation: v.Allocation, Workspace: p.Workspace, Admin: p.Admin(),
		Totals: map[string]int{}, Nodes: make([]uiNode, 0, len(v.Nodes)), Recovering: v.Recovering}
	fenced := map[string]string{}
	for _, f := range v.Fenced {
		fenced[f.Node] = f.Reason
	}
	idx := make(map[string]int, len(v.Nodes))
	for i, n := range v.Nodes {
		idx[n.Name] = i
		un := uiNode{Name: n.Name, Family: n.Family, GPUs: n.GPUs, Lost: n.Lost, Fenced: fenced[n.Name],
			ReservedFor: optName(rd, n.ReservedFor), HeldFor: optName(rd, n.HeldFor), HeldGPUs: n.HeldGPUs, Cells: make([]uiCell, n.GPUs)}
		for g := range un.Cells {
			un.Cells[g] = uiCell{Index: g, State: gpuFree}
		}
		out.Nodes = append(out.Nodes, un)
	}
	classes := map[string]*uiClassTotal{}
	for c := scheduler.High; c >= scheduler.Low; c-- {
		classes[c.String()] = &uiClassTotal{Class: c.String(), Waiting: v.WaitingByClass[c.String()]}
	}
	spaces := map[string]*uiWorkspaceTotal{}
	for _, run := range v.Running {
		shown := rd.shows(run.Job)
		class := run.Class.String()
		if ct := classes[class]; ct != nil {
			ct.Running++
		}
		ws := run.Workspace
		switch {
		case ws == "" && shown && !p.Admin():
			ws = p.Workspace // an older allocator's job of the asker's workspace
		case ws == "" && p.Admin():
			ws = "(no workspace)"
		case !p.CanSee(ws):
			ws = otherWorkspaces
		}
		wt := spaces[ws]
		if wt == nil {
			wt = &uiWorkspaceTotal{Workspace: ws}
			spaces[ws] = wt
		}
		wt.Running++
		released := map[int]bool{}
		for _, w := range run.Released {
			released[w] = true
		}
		for _, pl := range run.Placement {
			ni, ok := idx[pl.Node]
			if !ok || released[pl.Worker] {
				continue
			}
			state, to := gpuHeld, ""
			if run.Releasing {
				state = gpuReleasing
				if pl.Worker < len(run.Nominees) && run.Nominees[pl.Worker] != "" {
					state, to = gpuNominated, rd.name(run.Nominees[pl.Worker])
				} else if run.PreemptedBy != nil {
					state, to = gpuNominated, rd.name(run.PreemptedBy.Job)
				}
			}
			for _, g := range pl.GPUs {
				if g < 0 || g >= len(out.Nodes[ni].Cells) {
					continue
				}
				c := uiCell{Index: g, State: state, Job: rd.name(run.Job), Class: class, Type: string(run.Kind), JobGPUs: run.GPUs, NominatedTo: to, OnLoan: run.OnLoan}
				if shown {
					worker, since := pl.Worker, run.StartedAt
					c.Attempt, c.Worker, c.Since = run.Attempt, &worker, &since
				}
				out.Nodes[ni].Cells[g] = c
				if ct := classes[class]; ct != nil {
					ct.GPUs++
				}
				wt.GPUs++
			}
		}
	}
	for i := range out.Nodes {
		n := &out.Nodes[i]
		held := n.HeldGPUs
		for g := range n.Cells {
			c := &n.Cells[g]
			switch {
			case c.State != gpuFree:
			case n.Lost || n.Fenced != "":
				c.State = gpuLost
			case held > 0:
				// Which of the free GPUs are held is not tracked: the first ones are shown.
				c.State, c.NominatedTo = gpuNominated, n.HeldFor
				held--
			case n.ReservedFor != "":
				c.State, c.ReservedFor = gpuReserved, n.ReservedFor
			}
			out.Totals[c.State]++
			out.Totals["total"]++
		}
	}
	for c := scheduler.High; c >= scheduler.Low; c-- {
		out.ByClass = append(out.ByClass, *classes[c.String()])
	}
	for _, wt := range spaces {
		out.ByWorkspace = append(out.ByWorkspace, *wt)
	}
	sort.Slice(out.ByWorkspace, func(i, j int) bool {
		a, b := out.ByWorkspace[i], out.ByWorkspace[j]
		if a.GPUs != b.GPUs {
			return a.GPUs > b.GPUs
		}
		return a.Workspace < b.Workspace
	})
	if out.ByWorkspace == nil {
		out.ByWorkspace = []uiWorkspaceTotal{}
	}
	return out
}

func optName(rd *redactor, n string) string {
	if n == "" {
		return ""
	}
	return rd.name(n)
}

// uiAllocation reads the allocation of a /ui/api route (its region from the
// query, default the config's), answering 4xx itself when it is unknown.
// Query parameters other than allowed are refused.
func (s *Server) uiAllocation(w http.ResponseWriter, r *http.Request, allowed ...string) (region, name string, ok bool) {
	for k := range r.URL.Query() {
		if !slices.Contains(allowed, k) {
			s.fail(w, r, errorf(http.StatusBadRequest, codeInvalidParam, k, fmt.Sprintf("unknown query parameter %q; allowed: %s", k, strings.Join(allowed, ", "))))
			return "", "", false
		}
	}
	region = r.URL.Query().Get("region")
	if region == "" {
		region = s.config().DefaultRegion
	}
	if !validRegion(s.config(), region) {
		s.fail(w, r, errorf(http.StatusUnprocessableEntity, codeInvalidParam, "region", fmt.Sprintf("region %q does not exist; see /public/v2/configs", region)))
		return "", "", false
	}
	name = r.PathValue("name")
	if _, _, err := s.config().Allocation(region, name); err != nil {
		s.fail(w, r, errorf(http.StatusNotFound, codeNotFound, "", err.Error()))
		return "", "", false
	}
	return region, name, true
}

// writeCompactJSON answers v without indentation, gzipped when the client
// takes it (the UI's answers are large and repetitive: see BenchmarkUIData).
func writeCompactJSON(w http.ResponseWriter, r *http.Request, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Add("Vary", "Accept-Encoding")
	var out io.Writer = w
	if acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		defer gz.Close()
		out = gz
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if name, q, _ := strings.Cut(strings.TrimSpace(part), ";"); strings.TrimSpace(name) == "gzip" && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}
