package simulate

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// Job is one job of a workload.
type Job struct {
	ID      string           `json:"id"`
	Arrival time.Duration    `json:"arrival"` // since the start of the workload
	Class   scheduler.Class  `json:"class"`
	Kind    scheduler.Kind   `json:"kind,omitempty"` // "" or "job": a training job; "notebook": always high, never preempted
	Demand  scheduler.Demand `json:"demand"`         // per worker
	Workers int              `json:"workers"`
	Runtime time.Duration    `json:"runtime"` // the work it needs to complete, without interruptions
	Label   string           `json:"label,omitempty"`
	// Nodes, when not empty, are the only nodes its workers may run on (scheduler.Request.Nodes).
	Nodes []string `json:"nodes,omitempty"`
	// Workspace is whose job it is (scheduler.Request.Workspace): the caps of Policy.Limits apply
	// per workspace. "": nobody's, no cap applies.
	Workspace string `json:"workspace,omitempty"`
	// Allocation is the cohort allocation whose share it counts in (scheduler.Request.Allocation),
	// in a replay of one pool that a cohort's allocations share (RunCohort).
	Allocation string `json:"allocation,omitempty"`
	// Shape is what makes jobs alike for learned runtime estimates (see shapeKeys): the openb
	// loader sets it to the pod's qos and resources as the trace gives them (its GPU share
	// included); "": its class, kind, per-worker demand and workers.
	Shape string `json:"shape,omitempty"`
}

// GPUs is the job's total GPU count (all workers).
func (j *Job) GPUs() int { return j.Demand.GPUs * j.Workers }

// Workload is a pool of nodes and the jobs to run on it, in arrival order.
type Workload struct {
	Name  string           `json:"name"`
	Nodes []scheduler.Node `json:"nodes"`
	Jobs  []Job            `json:"jobs"`
	// Topology names the levels the nodes' Topology places them in (see Rack); the policies
	// place gangs by it unless they turn it off.
	Topology []string `json:"topology,omitempty"`
	// Notes say what the loader assumed (rounded GPU shares, borrowed times, units).
	Notes []string `json:"notes,omitempty"`
}

// GPUs is the pool's GPU count.
func (w *Workload) GPUs() int {
	n := 0
	for _, nd := range w.Nodes {
		n += nd.GPUs
	}
	return n
}

// DefaultClasses maps the openb trace's qos to priority classes: latency-sensitive pods are high,
// Guaranteed and Burstable are medium, best effort is low.
func DefaultClasses() map[string]scheduler.Class {
	return map[string]scheduler.Class{"LS": scheduler.High, "Guaranteed": scheduler.Medium, "Burstable": scheduler.Medium, "BE": scheduler.Low}
}

// ParseClasses parses a qos-to-class mapping such as "LS=high,Guaranteed=medium,Burstable=medium,BE=low".
func ParseClasses(s string) (map[string]scheduler.Class, error) {
	m := map[string]scheduler.Class{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not QOS=CLASS", part)
		}
		c, err := scheduler.ParseClass(v)
		if err != nil || strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("%q: class %q is not low, medium or high", part, v)
		}
		m[strings.TrimSpace(k)] = c
	}
	if len(m) == 0 {
		return nil, errors.New("the class mapping is empty")
	}
	return m, nil
}

// OpenBFamily is the instance family every openb node and pod gets: the trace's pods name no GPU
// model (gpu_spec is empty), so any pod may run on any node.
const OpenBFamily = "gpu"

// csvTable is a CSV file read by column name.
type csvTable struct {
	name string
	col  map[string]int
	rows [][]string
}

func readCSV(name string, r io.Reader, required ...string) (*csvTable, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	all, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%s: empty file", name)
	}
	t := &csvTable{name: name, col: map[string]int{}, rows: all[1:]}
	for i, h := range all[0] {
		t.col[strings.TrimSpace(h)] = i
	}
	for _, c := range required {
		if _, ok := t.col[c]; !ok {
			return nil, fmt.Errorf("%s: no column %q (it has %s)", name, c, strings.Join(all[0], ", "))
		}
	}
	return t, nil
}

func (t *csvTable) has(c string) bool { _, ok := t.col[c]; return ok }

func (t *csvTable) str(row int, c string) string {
	i, ok := t.col[c]
	if !ok || i >= len(t.rows[row]) {
		return ""
	}
	return strings.TrimSpace(t.rows[row][i])
}

func (t *csvTable) int(row int, c string) (int64, error) {
	s := t.str(row, c)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s line %d: %s %q is not a whole number", t.name, row+2, c, s)
	}
	return v, nil
}

// OpenB names the files of an Alibaba GPU v2023 openb replay.
type OpenB struct {
	Pods     io.Reader // openb_pod_list_*.csv
	PodsName string
	Nodes    io.Reader // openb_node_list_gpu_node.csv
	NodeName string
	// Times is a pod list with qos and times (openb_pod_list_default.csv), for a pod list that
	// has none (openb_pod_list_multigpu50.csv). Nil: the pod list must have them.
	Times     io.Reader
	TimesName string
	// Classes maps qos to class (nil: DefaultClasses).
	Classes map[string]scheduler.Class
}

type podTimes struct {
	qos               string
	arrival, duration int64
	found             bool
}

// LoadOpenB reads an openb pod list and node list. Each pod is a one-worker job of family
// OpenBFamily: num_gpu GPUs (a GPU share, gpu_milli < 1000, is rounded up to one whole GPU),
// cpu_milli CPU and memory_mib RAM (the scheduler's CPU and RAM counts are in milli-cores and MiB
// here, so nothing is rounded), arriving at creation_time and running for deletion_time -
// scheduled_time (deletion_time - creation_time if it was never scheduled). Nodes keep the
// trace's order.
//
// A pod list without times (multigpu50) takes them from o.Times: a pod found there by name takes
// its qos and times; the others (pods the sample added) borrow those of the rows of o.Times spread
// evenly over it (the k-th of n added pods takes row k·len/n), so they arrive over the whole trace.
func LoadOpenB(o OpenB) (*Workload, error) {
	classes := o.Classes
	if classes == nil {
		classes = DefaultClasses()
	}
	w := &Workload{Name: o.PodsName}
	var err error
	if w.Nodes, err = openBNodes(o); err != nil {
		return nil, err
	}
	pt, err := readCSV(o.PodsName, o.Pods, "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
	if err != nil {
		return nil, err
	}
	times, err := openBTimes(o, pt, w)
	if err != nil {
		return nil, err
	}
	if err := w.addOpenBPods(pt, times, classes); err != nil {
		return nil, err
	}
	w.Notes = append(w.Notes, "CPU is counted in milli-cores and RAM in MiB, as in the trace")
	sortByArrival(w.Jobs)
	return w, nil
}

// openBNodes reads the node list: every node is of the family OpenBFamily.
func openBNodes(o OpenB) ([]scheduler.Node, error) {
	nt, err := readCSV(o.NodeName, o.Nodes, "sn", "cpu_milli", "memory_mib", "gpu")
	if err != nil {
		return nil, err
	}
	var nodes []scheduler.Node
	for i := range nt.rows {
		cpu, err1 := nt.int(i, "cpu_milli")
		mem, err2 := nt.int(i, "memory_mib")
		gpu, err3 := nt.int(i, "gpu")
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, err
		}
		nodes = append(nodes, scheduler.Node{Name: nt.str(i, "sn"), Family: OpenBFamily, GPUs: int(gpu), CPU: int(cpu), RAMGB: int(mem)})
	}
	return nodes, nil
}

// readPodTimes reads one row's qos, arrival and run time (from scheduling to deletion).
func readPodTimes(t *csvTable, row int) (podTimes, error) {
	c, err := t.int(row, "creation_time")
	if err != nil {
		return podTimes{}, err
	}
	d, err := t.int(row, "deletion_time")
	if err != nil {
		return podTimes{}, err
	}
	start := c
	if t.str(row, "scheduled_time") != "" {
		if start, err = t.int(row, "scheduled_time"); err != nil {
			return podTimes{}, err
		}
	}
	return podTimes{qos: t.str(row, "qos"), arrival: c, duration: max(0, d-start), found: true}, nil
}

// openBTimes is every pod's times: from the pod list itself, or borrowed from o.Times (see
// LoadOpenB), which adds a note to w.
func openBTimes(o OpenB, pt *csvTable, w *Workload) ([]podTimes, error) {
	times := make([]podTimes, len(pt.rows))
	var err error
	if pt.has("creation_time") && pt.has("qos") {
		for i := range pt.rows {
			if times[i], err = readPodTimes(pt, i); err != nil {
				return nil, err
			}
		}
		return times, nil
	}
	if o.Times == nil {
		return nil, fmt.Errorf("%s has no qos and creation_time columns; give a pod list with times (openb_pod_list_default.csv) to borrow them from", o.PodsName)
	}
	src, err := readCSV(o.TimesName, o.Times, "name", "qos", "creation_time", "deletion_time", "scheduled_time")
	if err != nil {
		return nil, err
	}
	byName := map[string]int{}
	for i := range src.rows {
		byName[src.str(i, "name")] = i
	}
	var missing []int
	for i := range pt.rows {
		if r, ok := byName[pt.str(i, "name")]; ok {
			if times[i], err = readPodTimes(src, r); err != nil {
				return nil, err
			}
		} else {
			missing = append(missing, i)
		}
	}
	for k, i := range missing {
		r := k * len(src.rows) / len(missing)
		if times[i], err = readPodTimes(src, r); err != nil {
			return nil, err
		}
	}
	w.Notes = append(w.Notes, fmt.Sprintf("%s has no times: %d pods took the qos and times of the pod of the same name in %s, %d pods it added borrowed those of pods spread evenly over it",
		o.PodsName, len(pt.rows)-len(missing), o.TimesName, len(missing)))
	return times, nil
}

// addOpenBPods adds one 1-worker job per pod, its class from its qos, with notes on what was
// assumed.
func (w *Workload) addOpenBPods(pt *csvTable, times []podTimes, classes map[string]scheduler.Class) error {
	shared := 0
	unknownQoS := map[string]int{}
	for i := range pt.rows {
		cpu, err1 := pt.int(i, "cpu_milli")
		mem, err2 := pt.int(i, "memory_mib")
		ngpu, err3 := pt.int(i, "num_gpu")
		milli, err4 := pt.int(i, "gpu_milli")
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return err
		}
		if ngpu == 1 && milli < 1000 {
			shared++
		}
		tm := times[i]
		class, ok := classes[tm.qos]
		if !ok {
			unknownQoS[tm.qos]++
			class = scheduler.Medium
		}
		w.Jobs = append(w.Jobs, Job{
			ID: pt.str(i, "name"), Arrival: time.Duration(tm.arrival) * time.Second, Class: class,
			Demand:  scheduler.Demand{Family: OpenBFamily, GPUs: int(ngpu), CPU: int(cpu), RAMGB: int(mem)},
			Workers: 1, Runtime: time.Duration(tm.duration) * time.Second, Label: tm.qos,
			Shape: fmt.Sprintf("%s gpu=%d milli=%d cpu_milli=%d memory_mib=%d", tm.qos, ngpu, milli, cpu, mem),
		})
	}
	if shared > 0 {
		w.Notes = append(w.Notes, fmt.Sprintf("%d pods ask for a share of one GPU (gpu_milli < 1000); a whole-GPU scheduler gives each one whole GPU", shared))
	}
	for _, q := range slices.Sorted(maps.Keys(unknownQoS)) {
		w.Notes = append(w.Notes, fmt.Sprintf("%d pods have qos %q, which the class mapping does not name; they are medium", unknownQoS[q], q))
	}
	return nil
}

// sortByArrival orders jobs by arrival, keeping the file order for equal arrivals.
func sortByArrival(jobs []Job) {
	slices.SortStableFunc(jobs, func(a, b Job) int { return int(a.Arrival - b.Arrival) })
}

// Shrink keeps n of the workload's nodes, chosen evenly: the nodes are grouped by kind (family,
// GPUs, CPU, RAM), each kind keeps its share of n (largest remainders first, ties to the kind
// listed first), and within a kind the nodes ⌊i·len/k⌋ for i = 0..k-1 are kept. Nodes keep
// their order. Jobs are unchanged.
func (w *Workload) Shrink(n int) error {
	if n < 1 || n > len(w.Nodes) {
		return fmt.Errorf("cannot keep %d of %d nodes", n, len(w.Nodes))
	}
	type kind struct {
		fam           string
		gpu, cpu, ram int
	}
	var kinds []kind
	members := map[kind][]int{}
	for i, nd := range w.Nodes {
		k := kind{nd.Family, nd.GPUs, nd.CPU, nd.RAMGB}
		if _, ok := members[k]; !ok {
			kinds = append(kinds, k)
		}
		members[k] = append(members[k], i)
	}
	keep := make([]int, len(kinds))
	rem := make([]int, len(kinds)) // remainder numerators of len(kind)*n/total
	left := n
	for i, k := range kinds {
		q := len(members[k]) * n
		keep[i], rem[i] = q/len(w.Nodes), q%len(w.Nodes)
		left -= keep[i]
	}
	order := make([]int, len(kinds))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return rem[b] - rem[a] })
	for _, i := range order[:left] {
		keep[i]++
	}
	var idx []int
	for i, k := range kinds {
		m := members[k]
		for j := 0; j < keep[i]; j++ {
			idx = append(idx, m[j*len(m)/keep[i]])
		}
	}
	slices.Sort(idx)
	out := make([]scheduler.Node, len(idx))
	for i, j := range idx {
		out[i] = w.Nodes[j]
	}
	w.Nodes = out
	return nil
}

// Keep drops every job keep refuses, and says what is left in a note (what names the jobs
// kept). A run of one class alone (or of the big jobs alone) shows the best any policy could do
// for them, since no other job then takes capacity.
func (w *Workload) Keep(what string, keep func(j *Job) bool) {
	kept := w.Jobs[:0]
	for i := range w.Jobs {
		if keep(&w.Jobs[i]) {
			kept = append(kept, w.Jobs[i])
		}
	}
	w.Notes = append(w.Notes, fmt.Sprintf("only %s: %d of %d jobs kept", what, len(kept), len(w.Jobs)))
	clear(w.Jobs[len(kept):])
	w.Jobs = kept
}

// KeepClasses keeps the jobs of the given classes (a notebook counts as high).
func (w *Workload) KeepClasses(classes []scheduler.Class) {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = c.String()
	}
	w.Keep(strings.Join(names, " and ")+" jobs", func(j *Job) bool {
		c := j.Class
		if j.Kind == scheduler.KindNotebook {
			c = scheduler.High
		}
		return slices.Contains(classes, c)
	})
}

// KeepMinGPUs keeps the jobs of at least n GPUs (all workers).
func (w *Workload) KeepMinGPUs(n int) {
	w.Keep(fmt.Sprintf("jobs of %d GPUs or more", n), func(j *Job) bool { return j.GPUs() >= n })
}

// ShrinkFrac keeps the fraction f (0 < f <= 1) of the nodes, at least one (see Shrink).
func (w *Workload) ShrinkFrac(f float64) error {
	if !(f > 0 && f <= 1) {
		return fmt.Errorf("the node fraction must be in (0, 1], got %g", f)
	}
	return w.Shrink(max(1, int(math.Round(f*float64(len(w.Nodes))))))
}

// ownJob is one job of our own JSON or CSV workload format.
type ownJob struct {
	ID           string `json:"id"`
	Arrival      any    `json:"arrival"` // "10m", or seconds
	Class        string `json:"class"`
	Kind         string `json:"kind"`
	InstanceType string `json:"instance_type"`
	Workers      int    `json:"n_workers"`
	Runtime      any    `json:"runtime"` // "2h", or seconds
	// Nodes are the only nodes it may run on (none: any node of its family).
	Nodes []string `json:"nodes"`
	// Workspace is whose job it is (optional; the policy's caps apply per workspace).
	Workspace string `json:"workspace"`
}

// parseDur reads "90s", "1h30m" or a plain number of seconds.
func parseDur(v any) (time.Duration, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case float64:
		if x < 0 || math.IsNaN(x) {
			return 0, fmt.Errorf("%v is negative", x)
		}
		return time.Duration(x * float64(time.Second)), nil
	case string:
		s := strings.TrimSpace(x)
		if s == "" {
			return 0, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return parseDur(f)
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("%q is not a duration such as 90s, 10m or 1h30m, nor a number of seconds", s)
		}
		return d, nil
	}
	return 0, fmt.Errorf("%v is not a duration", v)
}

func (o ownJob) job(where string) (Job, error) {
	fail := func(format string, args ...any) (Job, error) {
		return Job{}, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...))
	}
	if o.ID == "" {
		return fail("id: must not be empty")
	}
	arr, err := parseDur(o.Arrival)
	if err != nil {
		return fail("arrival: %v", err)
	}
	rt, err := parseDur(o.Runtime)
	if err != nil {
		return fail("runtime: %v", err)
	}
	c, err := scheduler.ParseClass(o.Class)
	if err != nil {
		return fail("class: %v", err)
	}
	d, err := scheduler.ParseInstanceType(o.InstanceType)
	if err != nil {
		return fail("instance_type: %v", err)
	}
	kind := scheduler.KindJob
	switch o.Kind {
	case "", "job":
	case "notebook":
		kind, c = scheduler.KindNotebook, scheduler.High
	default:
		return fail("kind: %q is not job or notebook", o.Kind)
	}
	if o.Workers == 0 {
		o.Workers = 1
	}
	if o.Workers < 0 {
		return fail("n_workers: must be at least 1")
	}
	var nodes []string
	for _, n := range o.Nodes {
		if n = strings.TrimSpace(n); n != "" {
			nodes = append(nodes, n)
		}
	}
	return Job{ID: o.ID, Arrival: arr, Class: c, Kind: kind, Demand: d, Workers: o.Workers, Runtime: rt, Nodes: nodes,
		Workspace: strings.TrimSpace(o.Workspace)}, nil
}

// LoadJSON reads our own workload format:
//
//	{"nodes": [{"name": "n1", "family": "a100", "gpus": 8, "cpu": 96, "ram_gb": 768}],
//	 "jobs":  [{"id": "a", "arrival": "0s", "class": "high", "instance_type": "a100.8gpu",
//	            "n_workers": 2, "runtime": "3h"}]}
//
// Durations are Go durations ("90s", "1h30m") or seconds; class is low, medium (default) or
// high; kind is job (default) or notebook; n_workers defaults to 1; a job's "nodes" (a list of
// node names, optional) are the only nodes it may run on, as a request's include_nodes minus
// exclude_nodes; its "workspace" (optional) is whose job it is, for the policy's per-workspace
// caps (Policy.Limits). The top-level "nodes" may be left out when the caller supplies them (for example
// from a trainq config allocation).
func LoadJSON(name string, r io.Reader) (*Workload, error) {
	var in struct {
		Nodes []scheduler.Node `json:"nodes"`
		Jobs  []ownJob         `json:"jobs"`
	}
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	w := &Workload{Name: name, Nodes: in.Nodes}
	for i, o := range in.Jobs {
		j, err := o.job(fmt.Sprintf("%s: jobs[%d]", name, i))
		if err != nil {
			return nil, err
		}
		w.Jobs = append(w.Jobs, j)
	}
	sortByArrival(w.Jobs)
	return w, nil
}

// LoadCSV reads our own workload format as CSV with the header
// id,arrival,class,instance_type,n_workers,runtime (and optionally kind; nodes: the node names
// a job may run on, separated by ';', empty for any; and workspace); see LoadJSON. The pool's nodes come from
// elsewhere.
func LoadCSV(name string, r io.Reader) (*Workload, error) {
	t, err := readCSV(name, r, "id", "arrival", "instance_type", "runtime")
	if err != nil {
		return nil, err
	}
	w := &Workload{Name: name}
	for i := range t.rows {
		o := ownJob{ID: t.str(i, "id"), Arrival: t.str(i, "arrival"), Class: t.str(i, "class"), Kind: t.str(i, "kind"),
			InstanceType: t.str(i, "instance_type"), Runtime: t.str(i, "runtime"), Workspace: t.str(i, "workspace")}
		if s := t.str(i, "nodes"); s != "" {
			o.Nodes = strings.Split(s, ";")
		}
		if s := t.str(i, "n_workers"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return nil, fmt.Errorf("%s line %d: n_workers %q is not a whole number", name, i+2, s)
			}
			o.Workers = n
		}
		j, err := o.job(fmt.Sprintf("%s line %d", name, i+2))
		if err != nil {
			return nil, err
		}
		w.Jobs = append(w.Jobs, j)
	}
	sortByArrival(w.Jobs)
	return w, nil
}
