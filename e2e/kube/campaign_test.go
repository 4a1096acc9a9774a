package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	trainq "github.com/trainq/trainq/client"
	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// The Kubernetes arm of the fault campaign (issue 19, item 6): a seeded plan
// of load and faults on the kwok cluster, checked against the cluster's own
// records.
//
// Two node_selector allocations of the harness's config, relabel-a and
// relabel-b (label trainq.io/allocation), share four fresh 2-GPU nodes, two
// labelled for each at the start. A stream of 1-worker jobs (low, medium,
// high; 1 or 2 GPUs) keeps them busy enough to preempt. Faults, drawn by the
// seed:
//   - hold: a running pod gets a finalizer, so that once trainq deletes it
//     (a preemption, a cancel) it stays Terminating after its containers
//     ended (the test plays the kubelet: 143 some time after the deletion);
//     released a few seconds later, past trainq's 15 s TerminatingTimeout,
//     or only once every job has ended;
//   - relabel: a node whose GPUs are in use moves to the other allocation
//     while a job waits there (a job is submitted there just before);
//   - cancel: a job, running or waiting, is cancelled;
//   - end-pod: a running pod's container ends, with 0 or a non-zero code.
//
// Invariants, read from a pod watch of the test's own (every pod's node,
// trainq.io/gpus, when it appeared, when its containers ended or it went,
// in the order of the API server's watch) and from sampled queue views:
//   - no GPU of a node is used by two pods whose containers run at
//     overlapping times (a pod counts from its creation: bound there, it
//     holds its GPUs);
//   - no node serves two allocations at once: the two allocators' queue
//     views never both list it (sampled a, b, a: a node moving in between is
//     never counted), and no two pods of jobs of different allocations run on
//     one node at overlapping times;
//   - every job ends: after the plan, every running pod is ended (a held one
//     has its job cancelled instead, its finalizer kept) and every job must
//     reach a terminal state within kcDrain, while the pods held until the
//     end are still Terminating;
//   - no pod is left behind: once every hold is released, no pod of the
//     campaign's jobs is running or Terminating (read from the API).
//
// $TRAINQ_KUBE_CHAOS_SEEDS picks the seeds ("1-3", "5,9"; default 1), each
// its own plan, nodes and trainq-worker; a report per seed is printed.
func TestKubeFaultCampaign(t *testing.T) {
	seeds, err := parseKubeSeeds(os.Getenv("TRAINQ_KUBE_CHAOS_SEEDS"))
	require.NoError(t, err, "TRAINQ_KUBE_CHAOS_SEEDS")
	var reports []string
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			reports = append(reports, runKubeCampaign(t, seed))
		})
	}
	if len(seeds) > 1 {
		t.Logf("kube fault campaign, %d seeds:\n%s", len(seeds), strings.Join(reports, "\n"))
	}
}

const (
	kcAllocA = "relabel-a"
	kcAllocB = "relabel-b"
	kcLabel  = "trainq.io/allocation"
	// kcRetired is the label of the campaign's nodes once a seed is done:
	// no allocation selects it, so they leave both allocations.
	kcRetired = "campaign-retired"
	// kcWindow is when the plan's jobs and faults happen (from the start).
	kcWindow = 30 * time.Second
	// kcDrain bounds the drain: every job must have ended by then.
	kcDrain = 50 * time.Second
	// kcTerminating is trainq's TerminatingTimeout (cluster/kube): a hold
	// released later than this after the containers ended outlives Stop.
	kcTerminating = 15 * time.Second
)

func parseKubeSeeds(v string) ([]uint64, error) {
	if strings.TrimSpace(v) == "" {
		return []uint64{1}, nil
	}
	var out []uint64
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("%q: not a range lo-hi", part)
			}
		}
		for s := a; s <= b; s++ {
			out = append(out, s)
		}
	}
	return out, nil
}

// ---- the plan ----

type kcJob struct {
	at        time.Duration
	alloc     string
	class     string
	gpus      int
	maxRetry  int
	exitAfter time.Duration // >0: the container ends by itself (kwok) this long after it started
	exitCode  int
}

const (
	kindHold    = "hold"
	kindRelabel = "relabel"
	kindCancel  = "cancel"
	kindEnd     = "end-pod"
)

var kcKinds = []string{kindHold, kindRelabel, kindCancel, kindEnd}

const (
	holdShort = "short"       // released 1–6 s after the containers ended (before Stop gives up)
	holdPast  = "past-15s"    // released 17–24 s after: Stop gives up first
	holdEnd   = "until-drain" // released only once every job has ended
)

type kcFault struct {
	at   time.Duration
	kind string
	u    float64 // picks the target among the candidates of the moment
	// hold
	lowFirst     bool
	mode         string
	stopAfter    time.Duration // the kubelet ends the containers this long after the deletion
	releaseAfter time.Duration // after the containers ended (short, past-15s)
	cancelAfter  time.Duration // >0: the held pod's job is cancelled this long after the hold
	// relabel: the preferred side to move a node from
	from string
	// cancel: prefer a job with a live pod
	liveOnly bool
	// end-pod
	code int32
}

type kcPlan struct {
	seed   uint64
	jobs   []kcJob
	faults []kcFault
}

func makeKubePlan(seed uint64) kcPlan {
	r := rand.New(rand.NewPCG(seed, seed^0x6b756265))
	p := kcPlan{seed: seed}
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
	n := 22 + r.IntN(6)
	for range n {
		j := kcJob{at: dur(0, kcWindow-4*time.Second), alloc: kcAllocA, gpus: 1 + r.IntN(2)}
		if r.IntN(2) == 1 {
			j.alloc = kcAllocB
		}
		// Mostly low jobs fill the nodes first; later arrivals are mostly
		// higher, so that they preempt.
		lowUpTo, mediumUpTo := 0.25, 0.6
		if j.at < 10*time.Second {
			lowUpTo, mediumUpTo = 0.65, 0.9
		}
		switch c := r.Float64(); {
		case c < lowUpTo:
			j.class = "low"
		case c < mediumUpTo:
			j.class = "medium"
		default:
			j.class = "high"
		}
		if j.class == "low" && r.IntN(2) == 0 {
			j.maxRetry = 1 // a preempted low job runs again
		}
		if r.Float64() < 0.35 {
			j.exitAfter = dur(3*time.Second, 12*time.Second)
			if r.Float64() < 0.2 {
				j.exitCode = 3
			}
		}
		p.jobs = append(p.jobs, j)
	}
	slices.SortStableFunc(p.jobs, func(a, b kcJob) int { return int(a.at - b.at) })
	faultAt := func() time.Duration { return dur(4*time.Second, kcWindow) }
	for range 3 + r.IntN(2) {
		f := kcFault{at: faultAt(), kind: kindHold, u: r.Float64(), lowFirst: r.IntN(2) == 0,
			stopAfter: dur(300*time.Millisecond, 3*time.Second)}
		switch m := r.Float64(); {
		case m < 0.35:
			f.mode, f.releaseAfter = holdShort, dur(time.Second, 6*time.Second)
		case m < 0.7:
			f.mode, f.releaseAfter = holdPast, dur(17*time.Second, 24*time.Second)
		default:
			f.mode = holdEnd
		}
		if r.IntN(2) == 0 {
			f.cancelAfter = dur(time.Second, 5*time.Second)
		}
		p.faults = append(p.faults, f)
	}
	// Every seed holds at least one pod until the drain, deleted while held.
	if !slices.ContainsFunc(p.faults, func(f kcFault) bool { return f.mode == holdEnd }) {
		p.faults[0].mode, p.faults[0].releaseAfter = holdEnd, 0
		if p.faults[0].cancelAfter == 0 {
			p.faults[0].cancelAfter = 2 * time.Second
		}
	}
	for range 3 + r.IntN(2) {
		f := kcFault{at: dur(6*time.Second, kcWindow), kind: kindRelabel, u: r.Float64(), from: kcAllocA}
		if r.IntN(2) == 1 {
			f.from = kcAllocB
		}
		p.faults = append(p.faults, f)
	}
	for range 3 + r.IntN(2) {
		p.faults = append(p.faults, kcFault{at: faultAt(), kind: kindCancel, u: r.Float64(), liveOnly: r.Float64() < 0.7})
	}
	for range 4 + r.IntN(3) {
		f := kcFault{at: faultAt(), kind: kindEnd, u: r.Float64()}
		switch c := r.Float64(); {
		case c < 0.5:
			f.code = 0
		case c < 0.75:
			f.code = 1
		default:
			f.code = 137
		}
		p.faults = append(p.faults, f)
	}
	slices.SortStableFunc(p.faults, func(a, b kcFault) int { return int(a.at - b.at) })
	return p
}

func (p kcPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan of seed %d: %d jobs, %d faults\n", p.seed, len(p.jobs), len(p.faults))
	for i, j := range p.jobs {
		ends := "runs until ended"
		if j.exitAfter > 0 {
			ends = fmt.Sprintf("exits %d after %v", j.exitCode, j.exitAfter.Round(100*time.Millisecond))
		}
		fmt.Fprintf(&b, "  job %2d at %5.1fs: %s %-6s %d GPU max_retry %d, %s\n", i, j.at.Seconds(), j.alloc, j.class, j.gpus, j.maxRetry, ends)
	}
	for _, f := range p.faults {
		fmt.Fprintf(&b, "  fault at %5.1fs: %-8s u=%.2f", f.at.Seconds(), f.kind, f.u)
		switch f.kind {
		case kindHold:
			fmt.Fprintf(&b, " %s, low first %v, containers end %v after the deletion", f.mode, f.lowFirst, f.stopAfter.Round(100*time.Millisecond))
			if f.releaseAfter > 0 {
				fmt.Fprintf(&b, ", released %v after", f.releaseAfter.Round(100*time.Millisecond))
			}
			if f.cancelAfter > 0 {
				fmt.Fprintf(&b, ", its job cancelled %v after the hold", f.cancelAfter.Round(100*time.Millisecond))
			}
		case kindRelabel:
			fmt.Fprintf(&b, " from %s (a job submitted to the other side 1.5 s before)", f.from)
		case kindCancel:
			fmt.Fprintf(&b, " live only %v", f.liveOnly)
		case kindEnd:
			fmt.Fprintf(&b, " exit %d", f.code)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// ---- the cluster's records ----

// kcPod is what the campaign's watch saw of one pod. seq numbers are the
// positions of the watch's events: the API server sends them in the order
// it wrote them, so they order the pods' lives without any clock.
type kcPod struct {
	name, job, node string
	uid             types.UID
	gpus            []int
	appear, ended   int64 // seq; 0: not yet
	deleted, gone   int64
	endedAt         time.Time
	deletedAt       time.Time
	preemptor       string
	finalizers      []string
	phase           corev1.PodPhase
	running         bool // containers seen running and not ended
}

func (p *kcPod) live() bool { return p.gone == 0 && (p.deleted != 0 || p.ended == 0) }

type kcLedger struct {
	mu     sync.Mutex
	seq    int64
	pods   map[types.UID]*kcPod
	byName map[string]*kcPod // current pods
	broken error
	stop   func()
}

func podHasEnded(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return true
}

func startLedger(t *testing.T) *kcLedger {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.cluster.Client.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{LabelSelector: kubeb.LabelManagedBy + "=" + kubeb.ManagedBy})
	require.NoError(t, err)
	l := &kcLedger{pods: map[types.UID]*kcPod{}, byName: map[string]*kcPod{}}
	var stopping atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			l.mu.Lock()
			l.seq++
			if ev.Type == watch.Error {
				if !stopping.Load() {
					l.broken = fmt.Errorf("watch error: %v", ev.Object)
				}
			} else if p, ok := ev.Object.(*corev1.Pod); ok {
				l.note(p, ev.Type == watch.Deleted)
			}
			l.mu.Unlock()
		}
		if !stopping.Load() {
			l.mu.Lock()
			l.broken = errors.New("the pod watch ended early")
			l.mu.Unlock()
		}
	}()
	l.stop = func() { stopping.Store(true); cancel(); w.Stop(); <-done }
	t.Cleanup(l.stop)
	return l
}

func (l *kcLedger) note(p *corev1.Pod, deleted bool) {
	now := time.Now()
	r := l.pods[p.UID]
	if r == nil {
		r = &kcPod{name: p.Name, uid: p.UID, job: p.Annotations[kubeb.AnnotationJobName], appear: l.seq}
		for _, g := range strings.Split(p.Annotations[kubeb.AnnotationGPUs], ",") {
			if n, err := strconv.Atoi(g); err == nil {
				r.gpus = append(r.gpus, n)
			}
		}
		l.pods[p.UID] = r
	}
	r.node = p.Spec.NodeName
	r.phase = p.Status.Phase
	r.finalizers = p.Finalizers
	if v := p.Annotations[kubeb.AnnotationPreemptor]; v != "" {
		r.preemptor = v
	}
	if r.deleted == 0 && (p.DeletionTimestamp != nil || deleted) {
		r.deleted, r.deletedAt = l.seq, now
	}
	if r.ended == 0 && (podHasEnded(p) || deleted) {
		r.ended, r.endedAt = l.seq, now
	}
	r.running = r.ended == 0 && p.Status.Phase == corev1.PodRunning
	if deleted {
		r.gone = l.seq
		if l.byName[p.Name] == r {
			delete(l.byName, p.Name)
		}
	} else {
		l.byName[p.Name] = r
	}
}

// snapshot copies the records (for the campaign's decisions).
func (l *kcLedger) snapshot() []kcPod {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]kcPod, 0, len(l.pods))
	for _, p := range l.pods {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (l *kcLedger) current(name string) (kcPod, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.byName[name]; p != nil {
		return *p, true
	}
	return kcPod{}, false
}

// ---- the queue sampler ----

type kcSampler struct {
	mu      sync.Mutex
	samples int
	dual    int
	dualOn  map[string]int
	waiting map[string]int
	nodes   map[string][]string
	stop    chan struct{}
	done    chan struct{}
}

func startSampler(t *testing.T) *kcSampler {
	s := &kcSampler{dualOn: map[string]int{}, waiting: map[string]int{}, nodes: map[string][]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	c := trainq.New(env.client, nil)
	view := func(alloc string) (map[string]bool, int, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v, err := c.Queue(ctx, "K", alloc)
		if err != nil {
			return nil, 0, false
		}
		m := map[string]bool{}
		for _, n := range v.Nodes {
			m[n.Name] = true
		}
		return m, v.WaitingTotal, true
	}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			a1, wa, ok1 := view(kcAllocA)
			b, wb, ok2 := view(kcAllocB)
			a2, _, ok3 := view(kcAllocA)
			if !ok1 || !ok2 || !ok3 {
				continue
			}
			s.mu.Lock()
			s.samples++
			var both []string
			for n := range b {
				if a1[n] && a2[n] {
					both = append(both, n)
				}
			}
			if len(both) > 0 {
				s.dual++
				for _, n := range both {
					s.dualOn[n]++
				}
			}
			s.waiting[kcAllocA], s.waiting[kcAllocB] = wa, wb
			s.nodes[kcAllocA], s.nodes[kcAllocB] = sortedKeys(a2), sortedKeys(b)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(s.halt)
	return s
}

func (s *kcSampler) halt() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *kcSampler) waitingOn(alloc string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting[alloc]
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ---- the run ----

type kcHold struct {
	pod          string
	job          string
	mode         string
	stopAfter    time.Duration
	releaseAfter time.Duration
	heldAt       time.Time
	endedByUs    bool
	released     bool
	sawDeleted   bool
	stuck        bool // its containers ended while deleted and it stayed past kcTerminating
}

type kcEvent struct {
	at time.Duration
	do func()
}

type kcRun struct {
	t      *testing.T
	plan   kcPlan
	start  time.Time
	led    *kcLedger
	samp   *kcSampler
	client *trainq.Client
	nodes  []string
	side   map[string]string    // node → its trainq.io/allocation now
	moved  map[string]time.Time // node → when it was last relabelled

	jobs      []string
	jobSpec   map[string]kcJob
	holds     []*kcHold
	held      map[string]*kcHold
	cancelled map[string]bool
	endedPods map[string]bool
	events    []kcEvent
	injected  map[string]int
	skipped   map[string]int
	detail    map[string]int // sub-counts for the report
	final     map[string]protocol.JobState
	refused   int // attempts whose start the node refused: GPUs in use (trainq's record, for the report)
}

var kcRunCounter atomic.Int64

func runKubeCampaign(t *testing.T, seed uint64) string {
	begin := time.Now()
	plan := makeKubePlan(seed)
	t.Log(plan.String())
	r := &kcRun{t: t, plan: plan, client: trainq.New(env.client, nil), side: map[string]string{}, moved: map[string]time.Time{},
		jobSpec: map[string]kcJob{}, held: map[string]*kcHold{}, cancelled: map[string]bool{}, endedPods: map[string]bool{},
		injected: map[string]int{}, skipped: map[string]int{}, detail: map[string]int{}, final: map[string]protocol.JobState{}}

	// Fresh nodes: two for each allocation.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := kcRunCounter.Add(1)
	for i := range 4 {
		name := fmt.Sprintf("kc%d-%d-%d-%d", seed, os.Getpid()%10000, run, i+1)
		alloc := kcAllocA
		if i >= 2 {
			alloc = kcAllocB
		}
		require.NoError(t, env.cluster.AddNode(ctx, labelledNode(name, alloc)))
		r.nodes = append(r.nodes, name)
		r.side[name] = alloc
	}
	r.led = startLedger(t)
	startWorker(t)
	// Runs before the worker stops (cleanups run last in, first out).
	t.Cleanup(r.retire)
	// Serving them, too: a fresh allocator shows its nodes free for the moment before its
	// recovery fences them, and a node that joins is fenced (lost, in the view) until its agent
	// answers; a plan played meanwhile would find nothing running to hold, relabel or preempt.
	eventually(t, long, "each allocation to serve its two campaign nodes", func() bool {
		return serves(kcAllocA, r.nodes[:2]...) && serves(kcAllocB, r.nodes[2:]...)
	})
	r.samp = startSampler(t)
	r.start = time.Now()
	r.schedule()
	r.play()
	r.drain()
	r.releaseAll()
	left := r.waitPodsGone()
	r.samp.halt()
	r.led.stop()
	return r.report(seed, time.Since(begin), left)
}

func (r *kcRun) note(format string, args ...any) {
	r.t.Log(fmt.Sprintf("%6.1fs ", time.Since(r.start).Seconds()) + fmt.Sprintf(format, args...))
}

func (r *kcRun) schedule() {
	for i, j := range r.plan.jobs {
		r.events = append(r.events, kcEvent{at: j.at, do: func() { r.submit(i, j) }})
	}
	for _, f := range r.plan.faults {
		switch f.kind {
		case kindHold:
			r.events = append(r.events, kcEvent{at: f.at, do: func() { r.hold(f) }})
		case kindRelabel:
			var from string
			r.events = append(r.events, kcEvent{at: f.at - 1500*time.Millisecond, do: func() { from = r.prepareRelabel(f) }})
			r.events = append(r.events, kcEvent{at: f.at, do: func() { r.relabel(f, from) }})
		case kindCancel:
			r.events = append(r.events, kcEvent{at: f.at, do: func() { r.cancelFault(f) }})
		case kindEnd:
			r.events = append(r.events, kcEvent{at: f.at, do: func() { r.endFault(f) }})
		}
	}
	r.sortEvents()
}

func (r *kcRun) sortEvents() {
	slices.SortStableFunc(r.events, func(a, b kcEvent) int { return int(a.at - b.at) })
}

// play runs the plan's events when due, and plays the kubelet of held pods.
func (r *kcRun) play() {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for len(r.events) > 0 || time.Since(r.start) < kcWindow {
		<-tick.C
		for len(r.events) > 0 && time.Since(r.start) >= r.events[0].at {
			ev := r.events[0]
			r.events = r.events[1:]
			ev.do()
		}
		r.kubelet()
	}
}

func (r *kcRun) submitSpec(j kcJob, why string) {
	spec := fixture.Job{Region: "K", Allocation: j.alloc, Class: j.class, Script: "python3 train.py"}.Spec()
	spec.InstanceType = fmt.Sprintf("a100.%dgpu", j.gpus)
	spec.MaxRetry = j.maxRetry
	if j.exitAfter > 0 {
		spec.EnvVariables = map[string]string{"KWOK_EXIT_AFTER": j.exitAfter.Round(100 * time.Millisecond).String()}
		if j.exitCode != 0 {
			spec.EnvVariables["KWOK_EXIT_CODE"] = strconv.Itoa(j.exitCode)
		}
	}
	name := submit(r.t, spec)
	r.jobs = append(r.jobs, name)
	r.jobSpec[name] = j
	r.note("submit %s (%s): %s %s %d GPU", name, why, j.alloc, j.class, j.gpus)
}

func (r *kcRun) submit(i int, j kcJob) { r.submitSpec(j, fmt.Sprintf("job %d", i)) }

// livePods are the campaign's pods whose containers run and that nobody
// deleted, sorted by name.
func (r *kcRun) livePods() []kcPod {
	var out []kcPod
	for _, p := range r.led.snapshot() {
		if _, ours := r.jobSpec[p.job]; ours && p.running && p.deleted == 0 {
			out = append(out, p)
		}
	}
	return out
}

func pick[T any](list []T, u float64) T { return list[min(int(u*float64(len(list))), len(list)-1)] }

func (r *kcRun) hold(f kcFault) {
	var cands []kcPod
	for _, p := range r.livePods() {
		if r.held[p.name] == nil && r.jobSpec[p.job].exitAfter == 0 && !r.endedPods[p.name] && !r.cancelled[p.job] {
			cands = append(cands, p)
		}
	}
	if f.lowFirst {
		var low []kcPod
		for _, p := range cands {
			if r.jobSpec[p.job].class == "low" {
				low = append(low, p)
			}
		}
		if len(low) > 0 {
			cands = low
		}
	}
	if len(cands) == 0 {
		r.skipped[kindHold]++
		r.note("hold: no running pod to hold")
		return
	}
	p := pick(cands, f.u)
	if err := patchFinalizers(p.name, []string{holdFinalizer}); err != nil {
		r.skipped[kindHold]++
		r.note("hold %s: %v", p.name, err)
		return
	}
	h := &kcHold{pod: p.name, job: p.job, mode: f.mode, stopAfter: f.stopAfter, releaseAfter: f.releaseAfter, heldAt: time.Now()}
	r.holds = append(r.holds, h)
	r.held[p.name] = h
	r.injected[kindHold]++
	r.detail["hold "+f.mode]++
	r.note("hold %s (%s %s on %s), %s", p.name, r.jobSpec[p.job].class, p.job, p.node, f.mode)
	if f.cancelAfter > 0 {
		r.events = append(r.events, kcEvent{at: time.Since(r.start) + f.cancelAfter, do: func() {
			if !r.cancelled[p.job] {
				r.cancel(p.job, "the held pod's job")
			}
		}})
		r.sortEvents()
	}
}

func patchFinalizers(pod string, fin []string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": fin}})
	_, err := env.cluster.Client.CoreV1().Pods(namespace).Patch(context.Background(), pod, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// kubelet plays the kubelet of the held pods: a deleted one's container
// ends (143) stopAfter later; the pod stays until its hold is released.
func (r *kcRun) kubelet() {
	for _, h := range r.holds {
		if h.released {
			continue
		}
		p, ok := r.led.current(h.pod)
		if !ok {
			h.released = true
			continue
		}
		if p.deleted == 0 {
			continue
		}
		if !h.sawDeleted {
			h.sawDeleted = true
			r.note("held pod %s Terminating (stop reason on it: preemptor %q)", h.pod, p.preemptor)
		}
		if p.ended == 0 {
			if !h.endedByUs && time.Since(p.deletedAt) >= h.stopAfter {
				if err := endPod(h.pod, 143); err != nil {
					r.note("end held pod %s: %v", h.pod, err)
				} else {
					h.endedByUs = true
				}
			}
			continue
		}
		if time.Since(p.endedAt) >= kcTerminating+time.Second && !h.stuck {
			h.stuck = true
		}
		if h.mode != holdEnd && time.Since(p.endedAt) >= h.releaseAfter {
			r.release(h, "its hold is over")
		}
	}
}

func (r *kcRun) release(h *kcHold, why string) {
	if err := patchFinalizers(h.pod, nil); err != nil && !apierrors.IsNotFound(err) {
		r.note("release %s: %v", h.pod, err)
		return
	}
	h.released = true
	r.note("release %s (%s)", h.pod, why)
}

// endPod plays the container ending with code, as a kubelet writes it.
func endPod(name string, code int32) error {
	pods := env.cluster.Client.CoreV1().Pods(namespace)
	var err error
	for range 5 {
		var p *corev1.Pod
		p, err = pods.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if podHasEnded(p) {
			return nil
		}
		now := metav1.Now()
		phase, reason := corev1.PodSucceeded, "Completed"
		if code != 0 {
			phase, reason = corev1.PodFailed, "Error"
		}
		started := now
		if cs := p.Status.ContainerStatuses; len(cs) > 0 && cs[0].State.Running != nil {
			started = cs[0].State.Running.StartedAt
		}
		p.Status.Phase = phase
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: kubeb.ContainerName, Image: p.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: started, FinishedAt: now}},
		}}
		if _, err = pods.UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

func (r *kcRun) sideCount(alloc string) int {
	n := 0
	for _, node := range r.nodes {
		if r.side[node] == alloc {
			n++
		}
	}
	return n
}

func otherSide(alloc string) string {
	if alloc == kcAllocA {
		return kcAllocB
	}
	return kcAllocA
}

// prepareRelabel decides the side a node leaves (the plan's, unless it has
// one campaign node left) and submits a 2-GPU job to the other side, so
// that a job waits there when the node moves.
func (r *kcRun) prepareRelabel(f kcFault) string {
	from := f.from
	if r.sideCount(from) < 2 {
		from = otherSide(from)
	}
	r.submitSpec(kcJob{alloc: otherSide(from), class: "medium", gpus: 2}, "relabel's waiter")
	return from
}

func (r *kcRun) relabel(f kcFault, from string) {
	if r.sideCount(from) < 2 {
		from = otherSide(from)
	}
	to := otherSide(from)
	inUse := map[string]bool{}
	for _, p := range r.led.snapshot() {
		if p.live() && p.node != "" {
			inUse[p.node] = true
		}
	}
	// A node relabelled again at once would move twice within one queue
	// sample: leave the nodes relabelled in the last 3 s alone if we can.
	var busy, all []string
	for _, settled := range []bool{true, false} {
		for _, n := range r.nodes {
			if r.side[n] == from && (!settled || time.Since(r.moved[n]) > 3*time.Second) {
				all = append(all, n)
				if inUse[n] {
					busy = append(busy, n)
				}
			}
		}
		if len(all) > 0 {
			break
		}
	}
	cands := busy
	if len(cands) == 0 {
		cands = all
	}
	node := pick(cands, f.u)
	waiting := r.samp.waitingOn(to)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{kcLabel: to}}})
	if _, err := env.cluster.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		r.skipped[kindRelabel]++
		r.note("relabel %s: %v", node, err)
		return
	}
	r.side[node] = to
	r.moved[node] = time.Now()
	r.injected[kindRelabel]++
	if inUse[node] {
		r.detail["relabel with GPUs in use"]++
	}
	if waiting > 0 {
		r.detail["relabel with jobs waiting on the other side"]++
	}
	r.note("relabel %s %s → %s (GPUs in use %v, %d waiting on %s)", node, from, to, inUse[node], waiting, to)
}

func (r *kcRun) cancel(job, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.cancelled[job] = true
	if err := r.client.Cancel(ctx, job); err != nil {
		r.note("cancel %s (%s): %v", job, why, err)
		r.skipped[kindCancel]++
		return
	}
	r.injected[kindCancel]++
	r.note("cancel %s (%s)", job, why)
}

func (r *kcRun) cancelFault(f kcFault) {
	var cands []string
	if f.liveOnly {
		seen := map[string]bool{}
		for _, p := range r.livePods() {
			if !seen[p.job] && !r.cancelled[p.job] {
				seen[p.job] = true
				cands = append(cands, p.job)
			}
		}
	}
	if len(cands) == 0 {
		for _, j := range r.jobs {
			if !r.cancelled[j] {
				cands = append(cands, j)
			}
		}
	}
	if len(cands) == 0 {
		r.skipped[kindCancel]++
		return
	}
	r.cancel(pick(cands, f.u), "fault")
}

func (r *kcRun) endFault(f kcFault) {
	var cands []kcPod
	for _, p := range r.livePods() {
		if r.held[p.name] == nil && !r.endedPods[p.name] {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		r.skipped[kindEnd]++
		r.note("end-pod: no running pod")
		return
	}
	p := pick(cands, f.u)
	if err := endPod(p.name, f.code); err != nil {
		r.skipped[kindEnd]++
		r.note("end %s: %v", p.name, err)
		return
	}
	r.endedPods[p.name] = true
	r.injected[kindEnd]++
	if f.code == 0 {
		r.detail["end-pod exit 0"]++
	} else {
		r.detail["end-pod exit non-zero"]++
	}
	r.note("end %s with %d", p.name, f.code)
}

// drain ends the load: every running pod's container ends with 0, a held
// pod's job is cancelled instead (its hold stays, until-drain holds until
// every job ended), and every job must end within kcDrain.
func (r *kcRun) drain() {
	r.note("drain: the plan is over")
	open := map[string]bool{}
	for _, j := range r.jobs {
		open[j] = true
	}
	deadline := time.Now().Add(kcDrain)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastStatus := time.Time{}
	for len(open) > 0 && time.Now().Before(deadline) {
		<-tick.C
		r.kubelet()
		if time.Since(lastStatus) >= time.Second {
			lastStatus = time.Now()
			for j := range open {
				if st, err := r.jobStatus(j); err == nil && st.State.Terminal() {
					delete(open, j)
					r.final[j] = st.State
					for _, a := range st.Attempts {
						if strings.Contains(a.EndReason, "still used by a live worker") {
							r.refused++
						}
					}
				}
			}
		}
		for _, p := range r.livePods() {
			if !open[p.job] || r.endedPods[p.name] {
				continue // an ended job's running pod is left for the end's count
			}
			if r.held[p.name] != nil && !r.held[p.name].released {
				if !r.cancelled[p.job] {
					r.cancel(p.job, "drain: its pod is held")
				}
				continue
			}
			if err := endPod(p.name, 0); err == nil || apierrors.IsNotFound(err) {
				r.endedPods[p.name] = true
			}
		}
	}
	for j := range open {
		st, err := r.jobStatus(j)
		r.note("job %s has not ended: %s %v", j, st.State, err)
		r.final[j] = st.State
	}
	r.detail["jobs not ended"] = len(open)
	r.note("drain: %d jobs left", len(open))
}

func (r *kcRun) jobStatus(job string) (protocol.JobStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.client.Status(ctx, job)
}

func (r *kcRun) releaseAll() {
	for _, h := range r.holds {
		if !h.released {
			r.release(h, "the drain is over")
		}
	}
}

// waitPodsGone waits until no pod of the campaign's jobs runs or is
// Terminating, as the API server lists them, and returns those left.
func (r *kcRun) waitPodsGone() []string {
	var left []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		left = left[:0]
		list, err := env.cluster.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: kubeb.LabelManagedBy + "=" + kubeb.ManagedBy})
		if err == nil {
			for _, p := range list.Items {
				if _, ours := r.jobSpec[p.Annotations[kubeb.AnnotationJobName]]; ours && (p.DeletionTimestamp != nil || !podHasEnded(&p)) {
					left = append(left, fmt.Sprintf("%s(%s, deleting %v, on %s)", p.Name, p.Status.Phase, p.DeletionTimestamp != nil, p.Spec.NodeName))
				}
			}
		}
		if (err == nil && len(left) == 0) || time.Now().After(deadline) {
			break
		}
		r.kubelet()
		time.Sleep(250 * time.Millisecond) // polling the API with a deadline
	}
	sort.Strings(left)
	return left
}

// retire takes the campaign's nodes out of both allocations (a label no
// allocation selects) and waits until both allocators let them go, so that
// the next test's allocations are as the harness left them.
func (r *kcRun) retire() {
	// A failed run may have left holds: the namespace must clean up.
	for _, h := range r.holds {
		if !h.released {
			if err := patchFinalizers(h.pod, nil); err != nil && !apierrors.IsNotFound(err) {
				r.t.Errorf("release %s: %v", h.pod, err)
			}
		}
	}
	ctx := context.Background()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{kcLabel: kcRetired}}})
	for _, n := range r.nodes {
		if _, err := env.cluster.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			r.t.Errorf("retire node %s: %v", n, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var still []string
		for _, alloc := range []string{kcAllocA, kcAllocB} {
			for _, n := range queueNodes(alloc) {
				if slices.Contains(r.nodes, n.Name) {
					still = append(still, alloc+":"+n.Name)
				}
			}
		}
		if len(still) == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Errorf("the campaign's nodes are still in an allocation 30s after they were relabelled away: %v", still)
			return
		}
		time.Sleep(250 * time.Millisecond) // polling the allocators with a deadline
	}
}

// ---- invariants and the report ----

type kcFigures struct {
	gpuOverlaps   []string
	podsTwoAllocs []string
	dualSamples   int
	samples       int
	dualNodes     map[string]int
	notEnded      []string
	left          []string
	pods          int
	preemptions   int
	stuck         int
	watchBroken   error
}

// overlaps says whether a and b held their node at overlapping times: a pod counts from its
// appearance (bound there, it holds its GPUs) until its containers end, in the watch's order.
func (a kcPod) overlaps(b kcPod) bool {
	end := func(p kcPod) int64 {
		if p.ended == 0 {
			return 1 << 62
		}
		return p.ended
	}
	return a.node == b.node && a.appear < end(b) && b.appear < end(a)
}

// gpuOverlaps names every GPU that two of pods used at overlapping times ("node GPU g: a and b").
func gpuOverlaps(pods []kcPod) []string {
	var out []string
	for i := range pods {
		for j := i + 1; j < len(pods); j++ {
			a, b := pods[i], pods[j]
			if a.node == "" || !a.overlaps(b) {
				continue
			}
			for _, g := range a.gpus {
				if slices.Contains(b.gpus, g) {
					out = append(out, fmt.Sprintf("%s GPU %d: %s and %s", a.node, g, a.name, b.name))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func (r *kcRun) figures(left []string) kcFigures {
	f := kcFigures{left: left}
	pods := r.led.snapshot()
	r.led.mu.Lock()
	f.watchBroken = r.led.broken
	r.led.mu.Unlock()
	byNode := map[string][]kcPod{}
	for _, p := range pods {
		if _, ours := r.jobSpec[p.job]; ours {
			f.pods++
			if p.preemptor != "" {
				f.preemptions++
			}
		}
		if p.node != "" {
			byNode[p.node] = append(byNode[p.node], p)
		}
	}
	f.gpuOverlaps = gpuOverlaps(pods)
	for node, list := range byNode {
		for i := range list {
			for j := i + 1; j < len(list); j++ {
				a, b := list[i], list[j]
				if !a.overlaps(b) {
					continue
				}
				ja, oka := r.jobSpec[a.job]
				jb, okb := r.jobSpec[b.job]
				if oka && okb && ja.alloc != jb.alloc {
					f.podsTwoAllocs = append(f.podsTwoAllocs, fmt.Sprintf("%s: %s (%s) and %s (%s)", node, a.name, ja.alloc, b.name, jb.alloc))
				}
			}
		}
	}
	sort.Strings(f.podsTwoAllocs)
	r.samp.mu.Lock()
	f.samples, f.dualSamples, f.dualNodes = r.samp.samples, r.samp.dual, r.samp.dualOn
	r.samp.mu.Unlock()
	for _, j := range r.jobs {
		if !r.final[j].Terminal() {
			f.notEnded = append(f.notEnded, fmt.Sprintf("%s(%s)", j, r.final[j]))
		}
	}
	for _, h := range r.holds {
		if h.stuck {
			f.stuck++
		}
	}
	return f
}

func (r *kcRun) report(seed uint64, wall time.Duration, left []string) string {
	t := r.t
	f := r.figures(left)
	states := map[protocol.JobState]int{}
	for _, j := range r.jobs {
		states[r.final[j]]++
	}
	var stateList []string
	for s, n := range states {
		stateList = append(stateList, fmt.Sprintf("%s %d", s, n))
	}
	sort.Strings(stateList)
	var b strings.Builder
	fmt.Fprintf(&b, "kube fault campaign, seed %d: %v wall\n", seed, wall.Round(100*time.Millisecond))
	fmt.Fprintf(&b, "| %-52s | %-44s |\n", "figure", "value")
	fmt.Fprintf(&b, "|%s|%s|\n", strings.Repeat("-", 54), strings.Repeat("-", 46))
	row := func(k string, v any) { fmt.Fprintf(&b, "| %-52s | %-44v |\n", k, v) }
	for _, k := range kcKinds {
		row("faults injected: "+k, fmt.Sprintf("%d (skipped %d)", r.injected[k], r.skipped[k]))
	}
	for _, k := range []string{"hold " + holdShort, "hold " + holdPast, "hold " + holdEnd,
		"relabel with GPUs in use", "relabel with jobs waiting on the other side", "end-pod exit 0", "end-pod exit non-zero"} {
		row("  "+k, r.detail[k])
	}
	row("held pods kept Terminating past 15 s after their end", f.stuck)
	row("jobs", len(r.jobs))
	row("  ended as", strings.Join(stateList, ", "))
	row("pods", f.pods)
	row("preemptions seen (pods marked with a preemptor)", f.preemptions)
	row("starts refused by the node: GPUs in use (trainq)", r.refused)
	row("queue samples (a, b, a)", f.samples)
	row("INV GPU used by two pods at once", len(f.gpuOverlaps))
	row("INV node in two allocations: queue samples", f.dualSamples)
	row("INV node in two allocations: pods at once", len(f.podsTwoAllocs))
	row(fmt.Sprintf("INV jobs not ended within %v of the plan", kcDrain), len(f.notEnded))
	row("INV pods left behind", len(f.left))
	watch := "ok"
	if f.watchBroken != nil {
		watch = f.watchBroken.Error()
	}
	row("pod watch", watch)
	rep := b.String()
	t.Log("\n" + rep)
	fmt.Print(rep)

	show := func(list []string) string {
		if len(list) > 8 {
			return strings.Join(list[:8], "; ") + fmt.Sprintf("; and %d more", len(list)-8)
		}
		return strings.Join(list, "; ")
	}
	assert.NoError(t, f.watchBroken, "the pod watch saw every event")
	assert.Zero(t, len(f.gpuOverlaps), "GPUs used by two pods at once: %s", show(f.gpuOverlaps))
	assert.Zero(t, f.dualSamples, "queue samples listing a node in both allocations (by node: %v)", f.dualNodes)
	assert.Zero(t, len(f.podsTwoAllocs), "nodes running pods of both allocations at once: %s", show(f.podsTwoAllocs))
	assert.Zero(t, len(f.notEnded), "jobs that did not end: %s", show(f.notEnded))
	assert.Zero(t, len(f.left), "pods left behind: %s", show(f.left))
	// A campaign that injected nothing proves nothing.
	assert.Positive(t, r.detail["relabel with GPUs in use"], "a node was relabelled while its GPUs were in use")
	assert.True(t, slices.ContainsFunc(r.holds, func(h *kcHold) bool { return h.sawDeleted }), "trainq deleted a held pod")
	assert.Positive(t, f.samples, "the queue views were sampled")
	assert.Positive(t, f.preemptions, "a job was preempted")
	return rep
}

// TestGPUOverlaps: the overlap check names a GPU two pods of one node used at once, and no
// other: not a GPU used in turn, nor one GPU number on two nodes.
func TestGPUOverlaps(t *testing.T) {
	pods := []kcPod{
		{name: "first", node: "n1", gpus: []int{0, 1}, appear: 1, ended: 5},
		{name: "after", node: "n1", gpus: []int{0}, appear: 6},               // after first ended
		{name: "beside", node: "n1", gpus: []int{1, 2}, appear: 3, ended: 9}, // GPU 1 while first runs
		{name: "elsewhere", node: "n2", gpus: []int{0}, appear: 2},
	}
	assert.Equal(t, []string{"n1 GPU 1: first and beside"}, gpuOverlaps(pods))
}
