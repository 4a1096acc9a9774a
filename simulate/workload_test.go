package simulate

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainq/trainq/scheduler"
)

const nodeCSV = `sn,cpu_milli,memory_mib,gpu,model
n0,64000,262144,2,P100
n1,96000,393216,8,G2
n2,96000,393216,8,G2
n3,64000,262144,2,P100
`

const podCSV = `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,12000,16384,1,1000,,LS,Running,0,100,0
p1,6000,12288,1,460,,BE,Running,10,70,20
p2,4000,8192,0,0,,Burstable,Failed,5,30,
p3,8000,8192,8,1000,,Guaranteed,Running,40,1040,40
`

func TestLoadOpenB(t *testing.T) {
	w, err := LoadOpenB(OpenB{Pods: strings.NewReader(podCSV), PodsName: "pods.csv", Nodes: strings.NewReader(nodeCSV), NodeName: "nodes.csv"})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Nodes) != 4 || !w.Nodes[1].Equal(scheduler.Node{Name: "n1", Family: OpenBFamily, GPUs: 8, CPU: 96000, RAMGB: 393216}) {
		t.Fatalf("nodes %+v", w.Nodes)
	}
	want := []Job{
		{ID: "p0", Arrival: 0, Class: scheduler.High, Demand: scheduler.Demand{Family: "gpu", GPUs: 1, CPU: 12000, RAMGB: 16384}, Workers: 1, Runtime: 100 * time.Second, Label: "LS", Shape: "LS gpu=1 milli=1000 cpu_milli=12000 memory_mib=16384"},
		{ID: "p2", Arrival: 5 * time.Second, Class: scheduler.Medium, Demand: scheduler.Demand{Family: "gpu", CPU: 4000, RAMGB: 8192}, Workers: 1, Runtime: 25 * time.Second, Label: "Burstable", Shape: "Burstable gpu=0 milli=0 cpu_milli=4000 memory_mib=8192"},
		{ID: "p1", Arrival: 10 * time.Second, Class: scheduler.Low, Demand: scheduler.Demand{Family: "gpu", GPUs: 1, CPU: 6000, RAMGB: 12288}, Workers: 1, Runtime: 50 * time.Second, Label: "BE", Shape: "BE gpu=1 milli=460 cpu_milli=6000 memory_mib=12288"},
		{ID: "p3", Arrival: 40 * time.Second, Class: scheduler.Medium, Demand: scheduler.Demand{Family: "gpu", GPUs: 8, CPU: 8000, RAMGB: 8192}, Workers: 1, Runtime: 1000 * time.Second, Label: "Guaranteed", Shape: "Guaranteed gpu=8 milli=1000 cpu_milli=8000 memory_mib=8192"},
	}
	if !reflect.DeepEqual(w.Jobs, want) {
		t.Fatalf("jobs\n%+v\nwant\n%+v", w.Jobs, want)
	}
	if !strings.Contains(strings.Join(w.Notes, "\n"), "1 pods ask for a share of one GPU") {
		t.Fatalf("notes %q", w.Notes)
	}

	// A pod list without times borrows them: by name, and spread evenly for added pods.
	sample := "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,6000,12288,1,460\nx0,1000,1024,8,1000\nx1,1000,1024,4,1000\np3,8000,8192,8,1000\n"
	w, err = LoadOpenB(OpenB{Pods: strings.NewReader(sample), PodsName: "sample.csv", Nodes: strings.NewReader(nodeCSV), NodeName: "nodes.csv",
		Times: strings.NewReader(podCSV), TimesName: "pods.csv", Classes: map[string]scheduler.Class{"LS": scheduler.High, "BE": scheduler.Low}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range w.Jobs {
		got = append(got, fmt.Sprintf("%s@%s/%s/%s", j.ID, j.Arrival, j.Class, j.Runtime))
	}
	// x0 takes row 0 (p0: 0s, LS), x1 row 2 (p2: 5s, Burstable, unmapped: medium).
	if s := strings.Join(got, " "); s != "x0@0s/high/1m40s x1@5s/medium/25s p1@10s/low/50s p3@40s/medium/16m40s" {
		t.Fatalf("jobs %s", s)
	}
	notes := strings.Join(w.Notes, "\n")
	if !strings.Contains(notes, "2 pods took the qos and times of the pod of the same name in pods.csv, 2 pods it added borrowed") ||
		!strings.Contains(notes, `qos "Burstable"`) || !strings.Contains(notes, `qos "Guaranteed"`) {
		t.Fatalf("notes %q", w.Notes)
	}
	if _, err := LoadOpenB(OpenB{Pods: strings.NewReader(sample), PodsName: "sample.csv", Nodes: strings.NewReader(nodeCSV), NodeName: "nodes.csv"}); err == nil ||
		!strings.Contains(err.Error(), "sample.csv has no qos and creation_time columns") {
		t.Fatalf("no times: %v", err)
	}
	if _, err := LoadOpenB(OpenB{Pods: strings.NewReader("name,cpu_milli\n"), PodsName: "bad.csv", Nodes: strings.NewReader(nodeCSV), NodeName: "nodes.csv"}); err == nil ||
		!strings.Contains(err.Error(), `bad.csv: no column "memory_mib"`) {
		t.Fatalf("missing column: %v", err)
	}
}

func TestShrink(t *testing.T) {
	// 6 of kind A, 3 of kind B, 1 of kind C, interleaved.
	var ns []scheduler.Node
	kinds := "AABAABAABC"
	for i, k := range kinds {
		g := map[rune]int{'A': 2, 'B': 8, 'C': 4}[k]
		ns = append(ns, scheduler.Node{Name: fmt.Sprintf("%c%d", k, i), Family: "gpu", GPUs: g})
	}
	for _, tc := range []struct {
		n    int
		want string
	}{
		{10, "A0 A1 B2 A3 A4 B5 A6 A7 B8 C9"},
		{5, "A0 B2 A3 A6 B5"}, // A: 3, B: 1.5 -> 2 (larger remainder than C's 0.5), C: 0
		{2, "A0 B2"},          // A: 1.2 -> 1, B: 0.6 -> 1
		{1, "A0"},
	} {
		w := &Workload{Nodes: slices.Clone(ns)}
		if err := w.Shrink(tc.n); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range w.Nodes {
			got = append(got, n.Name)
		}
		want := strings.Fields(tc.want)
		slices.SortFunc(want, func(a, b string) int { return nodeIndex(ns, a) - nodeIndex(ns, b) })
		if !slices.Equal(got, want) {
			t.Errorf("Shrink(%d) = %v, want %v", tc.n, got, want)
		}
	}
	w := &Workload{Nodes: slices.Clone(ns)}
	if err := w.Shrink(11); err == nil {
		t.Error("Shrink(11) of 10 nodes accepted")
	}
	if err := w.ShrinkFrac(0.3); err != nil || len(w.Nodes) != 3 {
		t.Errorf("ShrinkFrac(0.3): %d nodes, %v", len(w.Nodes), err)
	}
	if err := w.ShrinkFrac(0); err == nil {
		t.Error("ShrinkFrac(0) accepted")
	}
}

func TestKeep(t *testing.T) {
	jobs := []Job{
		{ID: "h1", Class: scheduler.High, Demand: scheduler.Demand{GPUs: 1}, Workers: 1},
		{ID: "m8", Class: scheduler.Medium, Demand: scheduler.Demand{GPUs: 4}, Workers: 2},
		{ID: "nb", Class: scheduler.Low, Kind: scheduler.KindNotebook, Demand: scheduler.Demand{GPUs: 1}, Workers: 1},
		{ID: "l4", Class: scheduler.Low, Demand: scheduler.Demand{GPUs: 4}, Workers: 1},
	}
	ids := func(w *Workload) string {
		var out []string
		for _, j := range w.Jobs {
			out = append(out, j.ID)
		}
		return strings.Join(out, " ")
	}
	w := &Workload{Jobs: slices.Clone(jobs)}
	w.KeepClasses([]scheduler.Class{scheduler.High})
	if got := ids(w); got != "h1 nb" { // a notebook is high
		t.Errorf("KeepClasses(high) kept %q", got)
	}
	if want := "only high jobs: 2 of 4 jobs kept"; !slices.Contains(w.Notes, want) {
		t.Errorf("notes %q, want %q", w.Notes, want)
	}
	w = &Workload{Jobs: slices.Clone(jobs)}
	w.KeepMinGPUs(4)
	if got := ids(w); got != "m8 l4" {
		t.Errorf("KeepMinGPUs(4) kept %q", got)
	}
}

func nodeIndex(ns []scheduler.Node, name string) int {
	return slices.IndexFunc(ns, func(n scheduler.Node) bool { return n.Name == name })
}

func TestLoadOwn(t *testing.T) {
	js := `{"nodes": [{"name": "n1", "family": "a100", "gpus": 8, "cpu": 96, "ram_gb": 768}],
	 "jobs": [{"id": "b", "arrival": 90, "class": "high", "instance_type": "a100.8gpu", "runtime": "1h"},
	          {"id": "a", "arrival": "1m", "instance_type": "a100.2gpu", "n_workers": 1, "runtime": 30, "kind": "notebook"}]}`
	w, err := LoadJSON("w.json", strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{ID: "a", Arrival: time.Minute, Class: scheduler.High, Kind: scheduler.KindNotebook, Demand: scheduler.Demand{Family: "a100", GPUs: 2}, Workers: 1, Runtime: 30 * time.Second},
		{ID: "b", Arrival: 90 * time.Second, Class: scheduler.High, Kind: scheduler.KindJob, Demand: scheduler.Demand{Family: "a100", GPUs: 8}, Workers: 1, Runtime: time.Hour},
	}
	if len(w.Nodes) != 1 || !reflect.DeepEqual(w.Jobs, want) {
		t.Fatalf("%+v", w)
	}
	csv := "id,arrival,class,instance_type,n_workers,runtime\nx,0,low,a100.1gpu,2,10m\ny,30s,,cpu.4C.16G,,45\n"
	w, err = LoadCSV("w.csv", strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Jobs) != 2 || w.Jobs[0].Workers != 2 || w.Jobs[0].Class != scheduler.Low || w.Jobs[1].Class != scheduler.Medium ||
		w.Jobs[1].Demand.CPU != 4 || w.Jobs[1].Runtime != 45*time.Second || w.Jobs[1].Arrival != 30*time.Second {
		t.Fatalf("%+v", w.Jobs)
	}
	for _, bad := range []struct{ in, want string }{
		{`{"jobs": [{"id": "", "instance_type": "a.1gpu"}]}`, "jobs[0]: id: must not be empty"},
		{`{"jobs": [{"id": "a", "instance_type": "a.1gpu", "runtime": "soon"}]}`, `jobs[0]: runtime: "soon" is not a duration`},
		{`{"jobs": [{"id": "a", "instance_type": "a.1gpu", "class": "urgent"}]}`, "jobs[0]: class: unknown priority class"},
		{`{"jobs": [{"id": "a", "instance_type": "a100"}]}`, "jobs[0]: instance_type: invalid instance type"},
		{`{"jobs": [{"id": "a", "instance_type": "a.1gpu", "kind": "vm"}]}`, `kind: "vm" is not job or notebook`},
		{`{"jobz": []}`, "unknown field"},
	} {
		if _, err := LoadJSON("w.json", strings.NewReader(bad.in)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.in, err, bad.want)
		}
	}
	// Allowed nodes: a list in JSON, ';'-separated in CSV (empty: any).
	w, err = LoadJSON("w.json", strings.NewReader(`{"jobs": [{"id": "a", "instance_type": "a.1gpu", "nodes": ["n1", " n3"]}]}`))
	if err != nil || !slices.Equal(w.Jobs[0].Nodes, []string{"n1", "n3"}) {
		t.Fatalf("json nodes: %+v %v", w, err)
	}
	w, err = LoadCSV("w.csv", strings.NewReader("id,arrival,instance_type,runtime,nodes\na,0,a.1gpu,1m,n1;n3\nb,0,a.1gpu,1m,\n"))
	if err != nil || !slices.Equal(w.Jobs[0].Nodes, []string{"n1", "n3"}) || w.Jobs[1].Nodes != nil {
		t.Fatalf("csv nodes: %+v %v", w, err)
	}
	// Workspace: a field in JSON, an optional column in CSV.
	w, err = LoadJSON("w.json", strings.NewReader(`{"jobs": [{"id": "a", "instance_type": "a.1gpu", "workspace": " team-a "}, {"id": "b", "instance_type": "a.1gpu"}]}`))
	if err != nil || w.Jobs[0].Workspace != "team-a" || w.Jobs[1].Workspace != "" {
		t.Fatalf("json workspace: %+v %v", w, err)
	}
	w, err = LoadCSV("w.csv", strings.NewReader("id,arrival,instance_type,runtime,workspace\na,0,a.1gpu,1m,team-b\nb,0,a.1gpu,1m,\n"))
	if err != nil || w.Jobs[0].Workspace != "team-b" || w.Jobs[1].Workspace != "" {
		t.Fatalf("csv workspace: %+v %v", w, err)
	}
	if _, err := LoadCSV("w.csv", strings.NewReader("id,arrival,instance_type,runtime,n_workers\na,0,a.1gpu,1m,two\n")); err == nil ||
		!strings.Contains(err.Error(), `w.csv line 2: n_workers "two"`) {
		t.Errorf("bad n_workers: %v", err)
	}
}

func TestParsePolicy(t *testing.T) {
	base := scheduler.Policy{Queueing: scheduler.BestEffortFIFO, MinRuntimeBeforePreemption: time.Minute}
	for _, tc := range []struct {
		spec string
		want Policy
		err  string
	}{
		{"fifo", Policy{Name: "fifo", Scheduler: base, NoPriorities: true}, ""},
		{"best-effort", Policy{Name: "best-effort", Scheduler: base}, ""},
		{"strict-fifo", Policy{Name: "strict-fifo", Scheduler: scheduler.Policy{Queueing: scheduler.StrictFIFO, MinRuntimeBeforePreemption: time.Minute}}, ""},
		{"min1h:min_runtime=1h", Policy{Name: "min1h", Scheduler: scheduler.Policy{Queueing: scheduler.BestEffortFIFO, MinRuntimeBeforePreemption: time.Hour}}, ""},
		{"x: queueing=strict-fifo, priorities=off", Policy{Name: "x", Scheduler: scheduler.Policy{Queueing: scheduler.StrictFIFO, MinRuntimeBeforePreemption: time.Minute}, NoPriorities: true}, ""},
		{":queueing=strict-fifo", Policy{}, "has no name"},
		{"x:queueing=lifo", Policy{}, `queueing: "lifo" is not best-effort-fifo or strict-fifo`},
		{"x:min_runtime=-1m", Policy{}, "min_runtime"},
		{"x:turbo=on", Policy{}, "unknown knob; the knobs are queueing"},
		{"x:priorities", Policy{}, "is not knob=value"},
		{"req:required_topology=rack,defragment_after=never", Policy{Name: "req", Scheduler: scheduler.Policy{Queueing: scheduler.BestEffortFIFO, MinRuntimeBeforePreemption: time.Minute, DefragmentAfter: -1},
			GangTopology: scheduler.GangTopology{Level: "rack", Required: true}}, ""},
		{"x:preferred_topology=row", Policy{}, `"row" is not a level of --racks' topology: use rack or block`},
	} {
		got, err := ParsePolicy(tc.spec, base)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q = %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
	m, err := ParseClasses("LS=high, BE=low")
	if err != nil || len(m) != 2 || m["BE"] != scheduler.Low {
		t.Errorf("ParseClasses: %v %v", m, err)
	}
	for _, bad := range []string{"", "LS", "LS=urgent", "LS="} {
		if _, err := ParseClasses(bad); err == nil {
			t.Errorf("ParseClasses(%q) accepted", bad)
		}
	}
}

func TestParsePolicyNoticeKnobs(t *testing.T) {
	base := scheduler.Policy{Queueing: scheduler.BestEffortFIFO, PreemptionNotice: time.Minute}
	p, err := ParsePolicy("h:honor=0.8,notice=2m,honors_notice=off", base)
	if err != nil || p.Honor == nil || *p.Honor != 0.8 || p.Scheduler.PreemptionNotice != 2*time.Minute || !p.NoHonorsNotice {
		t.Fatalf("got %+v, %v", p, err)
	}
	if p.HonorShare(Options{Honor: 0.1}) != 0.8 {
		t.Fatal("the policy's share does not win over the run's")
	}
	if !strings.Contains(p.Describe(), "preemption_notice 2m00s") || !strings.Contains(p.Describe(), "80% of jobs honour notices") {
		t.Fatalf("describe: %s", p.Describe())
	}
	if q, err := ParsePolicy("q", base); err != nil || q.Honor != nil || q.HonorShare(Options{Honor: 0.3}) != 0.3 || q.Scheduler.PreemptionNotice != time.Minute {
		t.Fatalf("defaults: %+v %v", q, err)
	}
	for spec, want := range map[string]string{
		"x:honor=1.5":           `honor: "1.5" is not a share between 0 and 1`,
		"x:honor=NaN":           `honor: "NaN" is not a share between 0 and 1`,
		"x:notice=2h":           "notice: 2h is longer than 1h0m0s",
		"x:notice=-1s":          "notice: \"-1s\" is not a duration",
		"x:honors_notice=maybe": `honors_notice: "maybe" is not on or off`,
	} {
		if _, err := ParsePolicy(spec, base); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", spec, err, want)
		}
	}
}

func TestParsePolicyCapKnobs(t *testing.T) {
	base := scheduler.Policy{Queueing: scheduler.BestEffortFIFO,
		Limits: []scheduler.Limit{{Class: scheduler.High, MaxGPUs: 8}, {Workspace: "a", Class: scheduler.High, MaxGPUs: 2}}}
	p, err := ParsePolicy("capped:cap.high=16,cap.medium=24", base)
	if err != nil {
		t.Fatal(err)
	}
	want := []scheduler.Limit{{Workspace: "a", Class: scheduler.High, MaxGPUs: 2}, {Class: scheduler.High, MaxGPUs: 16}, {Class: scheduler.Medium, MaxGPUs: 24}}
	if !reflect.DeepEqual(p.Scheduler.Limits, want) {
		t.Fatalf("limits %+v", p.Scheduler.Limits)
	}
	if len(base.Limits) != 2 || base.Limits[0].MaxGPUs != 8 {
		t.Fatalf("the base policy changed: %+v", base.Limits)
	}
	if d := p.Describe(); !strings.Contains(d, "high.max_gpus 2 for a, high.max_gpus 16 per workspace, medium.max_gpus 24 per workspace") {
		t.Errorf("describe: %s", d)
	}
	// The later setting of a class wins; none removes the cap of every workspace (not a's own).
	p, err = ParsePolicy("x:cap.low=4,cap.low=0,cap.high=none", base)
	if err != nil || !reflect.DeepEqual(p.Scheduler.Limits, []scheduler.Limit{{Workspace: "a", Class: scheduler.High, MaxGPUs: 2}, {Class: scheduler.Low, MaxGPUs: 0}}) {
		t.Fatalf("limits %+v, %v", p.Scheduler.Limits, err)
	}
	// A workspace's own cap: set, replaced, removed, beside the cap of every workspace.
	p, err = ParsePolicy("x:cap.high@b=3,cap.high@a=6,cap.high@b=none", base)
	if err != nil || !reflect.DeepEqual(p.Scheduler.Limits, []scheduler.Limit{{Class: scheduler.High, MaxGPUs: 8}, {Workspace: "a", Class: scheduler.High, MaxGPUs: 6}}) {
		t.Fatalf("limits %+v, %v", p.Scheduler.Limits, err)
	}
	if d := p.Describe(); !strings.Contains(d, "high.max_gpus 8 per workspace, high.max_gpus 6 for a") {
		t.Errorf("describe: %s", d)
	}
	for spec, want := range map[string]string{
		"x:cap.urgent=4": `policy x: cap.urgent: "urgent" is not a class: write cap.high, cap.medium or cap.low (or cap.high@WORKSPACE)`,
		"x:cap.high@=4":  "cap.high@: no workspace after @",
		"x:cap.top@a=4":  `"top" is not a class`,
		"x:cap.=4":       `cap.: "" is not a class`,
		"x:cap.high=-1":  `cap.high: "-1" is not a number of GPUs (a whole number, 0 or more) nor none`,
		"x:cap.high=1.5": `cap.high: "1.5" is not a number of GPUs`,
		"x:cap.high=":    `cap.high: "" is not a number of GPUs`,
		"x:cap=4":        "unknown knob; the knobs are queueing, min_runtime, reserve_after, max_preemptions, max_loss, priorities, notice, honor, honors_notice, cap.CLASS, cap.CLASS@WORKSPACE",
	} {
		if _, err := ParsePolicy(spec, base); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", spec, err, want)
		}
	}
}
