package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file is the chaos test's plan: the jobs and the faults, all drawn
// from one seed, so that a run can be repeated exactly.

// chaosNodes is the number of nodes of the chaos allocation, each with
// chaosGPUsPerNode GPUs.
const (
	chaosNodes       = 8
	chaosGPUsPerNode = 4
)

// chaosWatchHeartbeat is the heartbeat timeout of a job's watch on its
// workers (WatchWorker in workflows/job.go): a running worker's watch is
// lost only when its node's agent stays away for about this long plus
// node_timeout (the retried watch is not picked up either).
const chaosWatchHeartbeat = 15 * time.Second

// chaosPinnedRAM is the RAM of the pinned jobs' workers (the pair of the
// two-jobs-one-node outage): only the pair node has room for it, so that
// the pair lands there; chaosPairNodeRAM fits two such workers, not three.
const (
	chaosPinnedRAM   = 1500
	chaosPairNodeRAM = 4096
	chaosNodeRAM     = 512
)

// chaosSize is one size of the chaos test.
type chaosSize struct {
	name string
	jobs int
	// submitWindow is the time over which the jobs are submitted.
	submitWindow time.Duration
	// The faults are spread over [faultsFrom, faultsUntil].
	faultsFrom, faultsUntil time.Duration
	// The allocation's timeouts: node_timeout, stop_grace_period, and the
	// reclaim_interval, one of reclaimIntervals drawn per seed.
	nodeTimeout, stopGrace time.Duration
	reclaimIntervals       []time.Duration
	// maxSleep bounds what a job's worker sleeps (from 1 s).
	maxSleep time.Duration
	// Fixed faults (drawn is false): how many of each.
	workerKills int
	// agentDowns are how long the killed node agent stays down, one per kill.
	agentDowns          []time.Duration
	serverKills         int
	allocatorTerminates int
	// drawn: the faults' kinds, counts and parameters are drawn from the
	// seed (the campaign), instead of the fixed counts above.
	drawn bool
	// drain bounds the wait, after the last submission and the last fault,
	// for every job to end.
	drain time.Duration
	// requestCheck, when set, replaces the 30 minutes a waiting job waits
	// before it makes sure the allocator has its request
	// (client.SubmitOptions.RequestCheckInterval), scaled down with the
	// other timeouts: a job a lagging recovery listing missed while it
	// waited asks again within it.
	requestCheck time.Duration
	// cluster: the run is on the production-shaped Temporal cluster
	// (internal/tempcluster) with two trainq-worker replicas, and draws the
	// cluster's faults instead of the dev server's kill.
	cluster bool
}

var (
	// chaosFull is `make chaos`: within 20 minutes on a 2-core machine.
	chaosFull = chaosSize{
		name: "full", jobs: 200, submitWindow: 4 * time.Minute,
		faultsFrom: 20 * time.Second, faultsUntil: 4*time.Minute + 30*time.Second,
		nodeTimeout: 10 * time.Second, stopGrace: 2 * time.Second, reclaimIntervals: []time.Duration{2 * time.Second},
		maxSleep:    8 * time.Second,
		workerKills: 5, agentDowns: []time.Duration{15 * time.Second, 3 * time.Second},
		serverKills: 1, allocatorTerminates: 1, drain: 9 * time.Minute,
	}
	// chaosReduced runs in every `go test ./...`: about a minute.
	chaosReduced = chaosSize{
		name: "reduced", jobs: 30, submitWindow: 30 * time.Second,
		faultsFrom: 6 * time.Second, faultsUntil: 50 * time.Second,
		nodeTimeout: 10 * time.Second, stopGrace: 2 * time.Second, reclaimIntervals: []time.Duration{2 * time.Second},
		maxSleep:    8 * time.Second,
		workerKills: 2, agentDowns: []time.Duration{15 * time.Second},
		serverKills: 1, allocatorTerminates: 1, drain: 150 * time.Second,
	}
	// chaosCampaign is one seed of the campaign (make chaos SEEDS=N):
	// timeouts scaled down so that a seed runs in about a minute and a
	// half, every fault drawn from the seed.
	chaosCampaign = chaosSize{
		name: "campaign", jobs: 30, submitWindow: 25 * time.Second,
		faultsFrom: 3 * time.Second, faultsUntil: 35 * time.Second,
		nodeTimeout: 2 * time.Second, stopGrace: time.Second,
		reclaimIntervals: []time.Duration{time.Second, 2 * time.Second},
		maxSleep:         5 * time.Second,
		drawn:            true, drain: 150 * time.Second,
		requestCheck: 10 * time.Second,
	}
	// chaosClusterSize is a campaign seed on the production-shaped cluster
	// (TRAINQ_CHAOS=cluster): the campaign's faults, with kill -9 of
	// history, matching and frontend, a PostgreSQL crash and one of the two
	// trainq-worker replicas lost for good instead of the dev server's kill,
	// over a longer window for the services' restarts.
	chaosClusterSize = chaosSize{
		name: "cluster", jobs: 30, submitWindow: 30 * time.Second,
		faultsFrom: 3 * time.Second, faultsUntil: 60 * time.Second,
		nodeTimeout: 2 * time.Second, stopGrace: time.Second,
		reclaimIntervals: []time.Duration{time.Second, 2 * time.Second},
		maxSleep:         5 * time.Second,
		drawn:            true, drain: 180 * time.Second,
		requestCheck: 10 * time.Second,
		cluster:      true,
	}
)

// chaosJob is one job of the plan.
type chaosJob struct {
	name    string
	at      time.Duration // submitted at this offset from the start (the plan's own jobs)
	class   string
	workers int
	gpus    int       // per worker
	sleeps  []float64 // seconds, per worker
	// ramGB, when set, is each worker's RAM: the instance type's long form,
	// which only the pair node can hold.
	ramGB int
	// rerunSleep, when set, is what every worker sleeps on attempts after
	// the first.
	rerunSleep float64
	// gated: the workers wait for the job's gate file (the harness opens
	// it) instead of sleeping.
	gated bool
	// workspace is the job's workspace ("": none, which no cap limits).
	workspace string
	// stray: its first worker starts a process outside its process group
	// (setsid) that would outlive it by an hour (see chaosStrayMark).
	stray bool
}

func (j chaosJob) instanceType() string {
	if j.ramGB > 0 {
		return fmt.Sprintf("a100.%dgpu.0vG.1C.%dG", j.gpus, j.ramGB)
	}
	return fmt.Sprintf("a100.%dgpu", j.gpus)
}

type chaosFaultKind int

const (
	faultWorkerKill chaosFaultKind = iota
	faultAgentKill
	faultServerKill
	faultAllocatorTerminate
	// faultAllocatorReset: `temporal workflow reset` of the allocator to an
	// earlier workflow task of its current run; half the time followed at
	// once by `trainq allocator recover`, half the time left to the
	// allocator, which must notice the reset itself (unattended).
	faultAllocatorReset
	// faultAgentPair: two jobs pinned to the pair node run there; its agent
	// is killed, and started again as soon as the allocator has taken the
	// second job's lost release (both watches lost, one after the other).
	faultAgentPair
	// faultJobReset: a running job's workflow is reset to the workflow task
	// that began its latest attempt (or, depth 1, its previous one).
	faultJobReset
	// faultBurst: a wide job holds most of the pool while dozens of 1-GPU
	// jobs queue behind it; every other one is cancelled at once (a burst of
	// withdrawals), then it ends and one pass can grant the rest.
	faultBurst
	// faultListingLag: a few jobs are submitted; once the allocator has
	// them (one running) it is asked to recover (`trainq allocator
	// recover`), which registers them to its epoch; trainq-worker is then
	// restarted (kill -9) with TRAINQ_TEST_LISTING_LAG set, so that
	// recovery's listing leaves out every job started within the lag (for
	// the rest of the run), and the allocator is asked to recover again:
	// both its listings miss the jobs just submitted; the running ones must
	// be found by the fences, the waiting ones must ask again and take the
	// grant of the newer epoch.
	faultListingLag
	// faultDeadJob: a job workflow of the allocation on a task queue no
	// worker polls (its workflow task never runs, so it cannot answer the
	// register update); the allocator is asked to recover, which must
	// complete without it and ask it again later; then it is terminated.
	faultDeadJob
	// faultCapLowered: a workspace's high cap is lowered, by a config change
	// that trainq-worker applies when it is restarted, under two waiting
	// jobs of that workspace: the one the new cap can never let start must
	// be refused naming the cap, the other must wait and start once the
	// workspace's running job ends.
	faultCapLowered
	// The faults of the production-shaped cluster (TRAINQ_CHAOS=cluster),
	// drawn instead of faultServerKill: kill -9 of one Temporal service,
	// left down for a drawn 0.5–3 s and started again on its ports; a crash
	// of PostgreSQL (every backend at once, no checkpoint) and its restart;
	// and one of the two trainq-worker replicas killed for good.
	faultHistoryKill
	faultMatchingKill
	faultFrontendKill
	faultPostgresRestart
	faultReplicaLoss
	chaosFaultKinds
)

// firstClusterFault is the first fault kind only the cluster size draws.
const firstClusterFault = faultHistoryKill

func (k chaosFaultKind) String() string {
	switch k {
	case faultWorkerKill:
		return "kill -9 trainq-worker"
	case faultAgentKill:
		return "kill -9 node agent"
	case faultServerKill:
		return "kill -9 dev server"
	case faultAllocatorTerminate:
		return "terminate allocator"
	case faultAllocatorReset:
		return "reset allocator"
	case faultAgentPair:
		return "agent outage, two jobs on its node"
	case faultJobReset:
		return "reset a running job"
	case faultBurst:
		return "burst of withdrawals and grants"
	case faultListingLag:
		return "recovery listing lags (then recover)"
	case faultDeadJob:
		return "a job whose workflow task cannot run (then recover)"
	case faultCapLowered:
		return "a workspace's cap lowered under its waiting jobs"
	case faultHistoryKill:
		return "kill -9 history service"
	case faultMatchingKill:
		return "kill -9 matching service"
	case faultFrontendKill:
		return "kill -9 frontend service"
	case faultPostgresRestart:
		return "PostgreSQL crash and restart"
	case faultReplicaLoss:
		return "one trainq-worker replica killed for good"
	}
	return fmt.Sprintf("fault kind %d", int(k))
}

// chaosFault is one fault of the plan.
type chaosFault struct {
	at   time.Duration // injected at this offset from the start (or as soon as the previous fault is done)
	kind chaosFaultKind
	down time.Duration // how long the killed process stays down
	// depth: for an allocator reset, which workflow task completion of the
	// current run it goes back to (1 = the latest); for a job reset, 0 =
	// the task that began the job's latest attempt, 1 = its previous one.
	depth int
	// unattended: an allocator reset is not followed by
	// `trainq allocator recover`.
	unattended bool
	// intoRegistration: an allocator reset goes back to a workflow task
	// inside the current run's latest recovery registration, if it has one
	// (the reset run then asks the jobs again under the epoch drawn before
	// it, and they answer with their first answers); else to depth.
	intoRegistration bool
	// pick chooses the running job a job reset resets (modulo their number).
	pick int
	// stagger: the pair's second job is submitted this long after the
	// first one started, so that their watches (and their heartbeats) are
	// lost one after the other.
	stagger time.Duration
	// jobs are what the fault submits: the pair, the burst (the wide job
	// first), or the jobs a lagging listing misses.
	jobs []chaosJob
	// lag: how far behind the listing lags (faultListingLag).
	lag time.Duration
	// capTo is the cap a faultCapLowered lowers chaosCapWorkspace's high
	// GPUs to (from chaosCapBefore).
	capTo int
}

// chaosPlan is everything a run does, drawn from seed.
type chaosPlan struct {
	size      chaosSize
	seed      uint64
	jobs      []chaosJob
	faults    []chaosFault
	agentNode string // the node whose agent runs (and is killed) apart
	// pairNode is the node of the two-jobs outage, with an agent of its own
	// ("" when the plan has none).
	pairNode        string
	reclaimInterval time.Duration
	// maxUpdatesPerRun, when set, is the allocator's per-run message limit:
	// its runs continue as new every few seconds, a reset run among them
	// (see handOverEvery).
	maxUpdatesPerRun int
}

func chaosNodeName(i int) string { return fmt.Sprintf("chaos-%d", i+1) }

// allJobs is every job the plan submits: its own, then the faults'.
func (p chaosPlan) allJobs() []chaosJob {
	out := append([]chaosJob(nil), p.jobs...)
	for _, f := range p.faults {
		out = append(out, f.jobs...)
	}
	return out
}

// faultCounts counts the plan's faults by kind.
func (p chaosPlan) faultCounts() map[chaosFaultKind]int {
	n := map[chaosFaultKind]int{}
	for _, f := range p.faults {
		n[f.kind]++
	}
	return n
}

// makeChaosPlan draws the jobs and the faults of one run.
func makeChaosPlan(size chaosSize, seed uint64) chaosPlan {
	rng := rand.New(rand.NewPCG(seed, 0x747261696e71)) // "trainq"
	p := chaosPlan{size: size, seed: seed}
	agent := rng.IntN(chaosNodes)
	p.agentNode = chaosNodeName(agent)
	p.reclaimInterval = size.reclaimIntervals[0]
	if len(size.reclaimIntervals) > 1 {
		p.reclaimInterval = size.reclaimIntervals[rng.IntN(len(size.reclaimIntervals))]
	}

	offsets := make([]time.Duration, size.jobs)
	for i := range offsets {
		offsets[i] = time.Duration(rng.Int64N(int64(size.submitWindow)))
	}
	sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
	for i := range size.jobs {
		j := chaosJob{name: fmt.Sprintf("chaos-%03d", i+1), at: offsets[i].Round(10 * time.Millisecond)}
		switch c := rng.IntN(100); {
		case c < 40:
			j.class = "low"
		case c < 75:
			j.class = "medium"
		default:
			j.class = "high"
		}
		switch w := rng.IntN(100); {
		case w < 40:
			j.workers = 1
		case w < 70:
			j.workers = 2
		case w < 85:
			j.workers = 3
		default:
			j.workers = 4
		}
		j.gpus = 1 + rng.IntN(chaosGPUsPerNode)
		tenths := int(size.maxSleep / (100 * time.Millisecond))
		for range j.workers {
			j.sleeps = append(j.sleeps, float64(10+rng.IntN(tenths-10+1))/10) // 1.0 s – maxSleep
		}
		p.jobs = append(p.jobs, j)
	}

	var kinds []chaosFaultKind
	add := func(k chaosFaultKind, n int) {
		for range n {
			kinds = append(kinds, k)
		}
	}
	var agentDowns []time.Duration
	if size.drawn {
		add(faultWorkerKill, 1+rng.IntN(2))
		if size.cluster {
			for k := firstClusterFault; k < chaosFaultKinds; k++ {
				add(k, 1)
			}
		} else {
			add(faultServerKill, rng.IntN(2))
		}
		if rng.IntN(2) == 0 {
			add(faultAllocatorTerminate, 1)
		} else {
			add(faultAllocatorReset, 1)
		}
		outages := 1 + rng.IntN(2)
		add(faultAgentKill, outages)
		for range outages {
			// 0.5–2 × node_timeout: what the agent misses are the starts,
			// stops and fences scheduled meanwhile. One in three is as long
			// again as a watch's heartbeat timeout, around where the
			// running workers' watches are lost too.
			f := time.Duration(500+rng.IntN(1501)) * size.nodeTimeout / 1000
			if rng.IntN(3) == 0 {
				f += chaosWatchHeartbeat
			}
			agentDowns = append(agentDowns, f.Round(10*time.Millisecond))
		}
		// Two of them: whether the agent comes back while a fence sent
		// before the second loss still waits for it is a race (about even
		// odds each).
		add(faultAgentPair, 2)
		add(faultJobReset, 1+rng.IntN(2))
		add(faultBurst, rng.IntN(2))
		pair := (agent + 1 + rng.IntN(chaosNodes-1)) % chaosNodes
		p.pairNode = chaosNodeName(pair)
	} else {
		add(faultWorkerKill, size.workerKills)
		add(faultAgentKill, len(size.agentDowns))
		add(faultServerKill, size.serverKills)
		add(faultAllocatorTerminate, size.allocatorTerminates)
		agentDowns = append(agentDowns, size.agentDowns...)
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	rng.Shuffle(len(agentDowns), func(i, j int) { agentDowns[i], agentDowns[j] = agentDowns[j], agentDowns[i] })
	slot := (size.faultsUntil - size.faultsFrom) / time.Duration(max(len(kinds), 1))
	count := map[chaosFaultKind]int{}
	for i, k := range kinds {
		count[k]++
		f := chaosFault{kind: k, at: size.faultsFrom + time.Duration(i)*slot + time.Duration(rng.Int64N(int64(slot/2)+1))}
		f.at = f.at.Round(10 * time.Millisecond)
		switch k {
		case faultWorkerKill:
			f.down = time.Duration(500+rng.IntN(2500)) * time.Millisecond
		case faultAgentKill:
			f.down, agentDowns = agentDowns[0], agentDowns[1:]
		case faultServerKill:
			f.down = time.Duration(1000+rng.IntN(2000)) * time.Millisecond
		case faultHistoryKill, faultMatchingKill, faultFrontendKill, faultPostgresRestart:
			f.down = time.Duration(500+rng.IntN(2501)) * time.Millisecond
		case faultAllocatorReset:
			f.depth = 1 + rng.IntN(8)
			f.unattended = rng.IntN(2) == 0
		case faultJobReset:
			f.depth, f.pick = rng.IntN(2), rng.IntN(1000)
		case faultAgentPair:
			f.stagger = time.Duration(1000+rng.IntN(5001)) * time.Millisecond
			for w := range 2 {
				f.jobs = append(f.jobs, chaosJob{
					name: fmt.Sprintf("chaos-pair%d-%d", count[k], w+1), class: "high", workers: 1, gpus: 1,
					// Long enough to outlive the lost watches (a heartbeat
					// timeout and node_timeout) and the grants after them.
					sleeps: []float64{40}, rerunSleep: 1, ramGB: chaosPinnedRAM,
				})
			}
		case faultBurst:
			wide := chaosJob{name: fmt.Sprintf("chaos-burst%d-wide", count[k]), class: "high",
				workers: chaosNodes - 2, gpus: chaosGPUsPerNode, gated: true, rerunSleep: 1}
			wide.sleeps = make([]float64, wide.workers)
			f.jobs = append(f.jobs, wide)
			// 28–36 jobs of one GPU, 2–4 s each: the GPUs the wide job
			// leaves (8) run a few of them, the others (at least 20) wait.
			for b := range 28 + rng.IntN(9) {
				f.jobs = append(f.jobs, chaosJob{name: fmt.Sprintf("chaos-burst%d-%02d", count[k], b+1), class: "medium",
					workers: 1, gpus: 1, sleeps: []float64{float64(20+rng.IntN(21)) / 10}})
			}
		}
		p.faults = append(p.faults, f)
	}
	if size.drawn {
		p.faults = addRecoveryFaults(p.faults, size, seed)
		p.faults = addCapFault(p.faults, size, seed)
		markStrays(p.jobs, seed)
		markRegistrationResets(p.faults, seed)
		p.maxUpdatesPerRun = handOverEvery(seed)
	}
	return p
}

// handOverEvery draws, from a stream of its own (so that the rest of each
// seed's plan stays what it drew before), the allocator's per-run message
// limit: none in one seed of two, else 15–40 messages, so that its runs
// continue as new every few seconds under the faults, and a reset run does
// within seconds of its reset, before anyone asks it to recover (a reset
// followed by a continue-as-new).
func handOverEvery(seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, 0x63616e)) // "can"
	if rng.IntN(2) == 0 {
		return 0
	}
	return 15 + rng.IntN(26)
}

// addRecoveryFaults draws the faults aimed at recovery's picture of the jobs
// (a listing that lags, a job that cannot answer) from a stream of their
// own, so that the faults drawn before them stay what each seed drew
// before, and puts them among the others by time.
func addRecoveryFaults(faults []chaosFault, size chaosSize, seed uint64) []chaosFault {
	rng := rand.New(rand.NewPCG(seed, 0x6c6167)) // "lag"
	at := func() time.Duration { return drawFaultAt(rng, size) }
	// The lag outlasts the fault's jobs' submission, a first recovery and a
	// trainq-worker restart (about 6 s) and recovery's 2 s between its two
	// listings, so that both listings of the second recovery miss them.
	lag := chaosFault{kind: faultListingLag, at: at(), lag: time.Duration(10000+rng.IntN(6001)) * time.Millisecond}
	lag.lag = lag.lag.Round(100 * time.Millisecond)
	// Two high one-GPU jobs, which run at once (preempting if they must),
	// outliving the recovery and its fences; and one low job of 3 × 4
	// GPUs, which in a busy pool waits.
	for w := range 2 {
		lag.jobs = append(lag.jobs, chaosJob{name: fmt.Sprintf("chaos-lag-%d", w+1), class: "high", workers: 1, gpus: 1,
			sleeps: []float64{float64(100+rng.IntN(51)) / 10}, rerunSleep: 2})
	}
	lag.jobs = append(lag.jobs, chaosJob{name: "chaos-lag-wide", class: "low", workers: 3, gpus: chaosGPUsPerNode,
		sleeps: []float64{2, 2, 2}})
	added := []chaosFault{lag}
	if rng.IntN(3) != 0 { // two seeds in three
		added = append(added, chaosFault{kind: faultDeadJob, at: at()})
	}
	return amongByTime(faults, added...)
}

// amongByTime puts added among faults by time, each at least 10 ms after
// the one before it.
func amongByTime(faults []chaosFault, added ...chaosFault) []chaosFault {
	out := append(append([]chaosFault(nil), faults...), added...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	for i := 1; i < len(out); i++ {
		if out[i].at <= out[i-1].at {
			out[i].at = out[i-1].at + 10*time.Millisecond
		}
	}
	return out
}

// drawFaultAt draws a time within the size's faults window.
func drawFaultAt(rng *rand.Rand, size chaosSize) time.Duration {
	return (size.faultsFrom + time.Duration(rng.Int64N(int64(size.faultsUntil-size.faultsFrom)))).Round(10 * time.Millisecond)
}

// The workspace whose high cap faultCapLowered lowers, and its cap until then.
const (
	chaosCapWorkspace = "capped"
	chaosCapBefore    = chaosGPUsPerNode
)

// addCapFault draws, from a stream of its own (so that the rest of each
// seed's plan stays what it drew before), when the workspace's cap is
// lowered, and puts that fault among the others by time. Its jobs, all high
// in chaosCapWorkspace: one that holds 2 GPUs until the harness opens its
// gate; then one that needs the whole cap (chaosCapBefore GPUs) and one
// that needs the new cap (3), both waiting on the old cap while the first
// runs. The new cap can never let the first of them start, and lets the
// second start once the holder ends.
func addCapFault(faults []chaosFault, size chaosSize, seed uint64) []chaosFault {
	rng := rand.New(rand.NewPCG(seed, 0x636170)) // "cap"
	f := chaosFault{kind: faultCapLowered, capTo: 3,
		at:   drawFaultAt(rng, size),
		down: time.Duration(500+rng.IntN(1501)) * time.Millisecond}
	f.down = f.down.Round(10 * time.Millisecond)
	job := func(name string, gpus int) chaosJob {
		return chaosJob{name: "chaos-cap-" + name, class: "high", workers: 1, gpus: gpus, workspace: chaosCapWorkspace,
			sleeps: []float64{float64(10+rng.IntN(21)) / 10}, rerunSleep: 1}
	}
	holder := job("holder", 2)
	holder.gated = true
	f.jobs = []chaosJob{holder, job("over", chaosCapBefore), job("under", f.capTo)}
	return amongByTime(faults, f)
}

// chaosStrays is how many of a campaign plan's own jobs start a stray.
const chaosStrays = 4

// markStrays picks, from a stream of its own, the jobs whose first worker
// starts a process that leaves its process group: the worker's end must end
// it too (the supervisor is a child subreaper; see docs/failures.md).
func markStrays(jobs []chaosJob, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x737472)) // "str"
	for _, i := range rng.Perm(len(jobs))[:min(chaosStrays, len(jobs))] {
		jobs[i].stray = true
	}
}

// markRegistrationResets picks, from a stream of its own, the allocator
// resets that go back into a recovery's registration (about one in two).
func markRegistrationResets(faults []chaosFault, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x726567)) // "reg"
	for i := range faults {
		if faults[i].kind == faultAllocatorReset {
			faults[i].intoRegistration = rng.IntN(2) == 0
		}
	}
}

// chaosStrayMark starts the command line of a stray process: the run's
// records file, the job and the attempt follow.
const chaosStrayMark = "chaos-stray "

// chaosScript is a job's script: each worker records its start and its end
// (see testenv.ParseHoldRecords) and sleeps its planned time in between (a
// gated job waits for its gate file instead). A SIGTERM (a preemption or a
// stop) ends it at once with 143, after the end line; a SIGKILL leaves no
// end line.
func chaosScript(records, gate string, j chaosJob) string {
	var cases strings.Builder
	for w, s := range j.sleeps {
		fmt.Fprintf(&cases, "%d) d=%s;; ", w, strconv.FormatFloat(s, 'f', 1, 64))
	}
	rerun := ""
	if j.rerunSleep > 0 {
		rerun = `if [ "$TRAINQ_ATTEMPT" != 1 ]; then d=` + strconv.FormatFloat(j.rerunSleep, 'f', 1, 64) + `; fi; `
	}
	stray := ""
	if j.stray {
		// bash's exec -a names the sleep itself, so that the harness finds it by its command line.
		stray = `if [ "$TRAINQ_WORKER" = 0 ]; then setsid bash -c 'exec -a "$0" sleep 3600' ` +
			`"` + chaosStrayMark + `$R $TRAINQ_JOB_NAME $TRAINQ_ATTEMPT" </dev/null >/dev/null 2>&1 & fi; `
	}
	wait := `sleep "$d" & wait $!`
	if j.gated {
		wait = `if [ "$TRAINQ_ATTEMPT" = 1 ]; then while [ ! -e ` + chaosShellQuote(gate) + ` ]; do sleep 0.1; done; else sleep "$d" & wait $!; fi`
	}
	return `R=` + chaosShellQuote(records) + `; ` +
		// A SIGTERM to the worker's process group while date runs kills
		// date too: ask it again rather than write a line without its time.
		`rec() { t=$(date +%s%N); [ -n "$t" ] || t=$(date +%s%N); [ -n "$t" ] || t=$(date +%s%N); ` +
		`echo "$1 $TRAINQ_JOB_NAME $TRAINQ_ATTEMPT $TRAINQ_WORKER $TRAINQ_NODE $CUDA_VISIBLE_DEVICES $t" >>"$R"; }; ` +
		`started=0; ended=0; ` +
		`fin() { if [ "$started" = 1 ] && [ "$ended" = 0 ]; then ended=1; rec end; fi; }; ` +
		`trap 'fin; exit 143' TERM; trap fin EXIT; ` +
		stray +
		`rec start; started=1; ` +
		`case "$TRAINQ_WORKER" in ` + cases.String() + `*) d=1;; esac; ` + rerun + wait
}

func chaosShellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// chaosSeed is $TRAINQ_CHAOS_SEED, else 1.
func chaosSeed() (uint64, error) {
	v := os.Getenv("TRAINQ_CHAOS_SEED")
	if v == "" {
		return 1, nil
	}
	seed, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("TRAINQ_CHAOS_SEED=%q is not a non-negative integer", v)
	}
	return seed, nil
}

// parseChaosSeeds reads a campaign's seeds: "a,b,c", ranges "a-b", or both
// ("1-3,7").
func parseChaosSeeds(v string) ([]uint64, error) {
	var seeds []uint64
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("seed %q is not a non-negative integer", lo)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("seed range %q is not a-b with a <= b", part)
			}
		}
		if b-a >= 1000 {
			return nil, fmt.Errorf("seed range %q: more than 1000 seeds", part)
		}
		for s := a; s <= b; s++ {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("no seed in %q", v)
	}
	return seeds, nil
}

func TestChaosPlanIsDeterministic(t *testing.T) {
	for _, size := range []chaosSize{chaosReduced, chaosFull, chaosCampaign} {
		a, b := makeChaosPlan(size, 7), makeChaosPlan(size, 7)
		assert.Equal(t, a, b, "the same seed draws the same plan")
		assert.NotEqual(t, a.jobs, makeChaosPlan(size, 8).jobs, "another seed draws other jobs")

		require.Len(t, a.jobs, size.jobs)
		classes := map[string]int{}
		for _, j := range a.jobs {
			classes[j.class]++
			assert.True(t, j.workers >= 1 && j.workers <= 4, j.name)
			assert.True(t, j.gpus >= 1 && j.gpus <= chaosGPUsPerNode, j.name)
			require.Len(t, j.sleeps, j.workers)
			for _, s := range j.sleeps {
				assert.True(t, s >= 1 && s <= size.maxSleep.Seconds(), "%s sleeps %v", j.name, s)
			}
			assert.True(t, j.at >= 0 && j.at <= size.submitWindow, j.name)
		}
		assert.Len(t, classes, 3, "low, medium and high jobs: %v", classes)
		assert.Contains(t, size.reclaimIntervals, a.reclaimInterval)

		names := map[string]bool{}
		for _, j := range a.allJobs() {
			assert.False(t, names[j.name], "job names are unique: %s", j.name)
			names[j.name] = true
		}
		var downs []time.Duration
		for i, f := range a.faults {
			assert.True(t, f.at >= size.faultsFrom && f.at <= size.faultsUntil, "fault %d at %s", i, f.at)
			if i > 0 {
				assert.True(t, f.at > a.faults[i-1].at, "faults are in time order")
			}
			if f.kind == faultAgentKill {
				downs = append(downs, f.down)
			}
		}
		count := a.faultCounts()
		if !size.drawn {
			assert.Equal(t, map[chaosFaultKind]int{faultWorkerKill: size.workerKills, faultAgentKill: len(size.agentDowns),
				faultServerKill: size.serverKills, faultAllocatorTerminate: size.allocatorTerminates}, count)
			assert.ElementsMatch(t, size.agentDowns, downs)
			assert.Empty(t, a.pairNode)
			continue
		}
		assert.NotEqual(t, a.agentNode, a.pairNode, "the pair node has an agent of its own")
		assert.NotEmpty(t, a.pairNode)
	}
	// The full size kills the agent once for longer than node_timeout, once for shorter.
	assert.True(t, chaosFull.agentDowns[0] > chaosFull.nodeTimeout && chaosFull.agentDowns[1] < chaosFull.nodeTimeout)
}

// TestChaosCampaignDrawsEveryFault: over a few seeds the campaign draws
// every fault kind, each seed within its bounds.
func TestChaosCampaignDrawsEveryFault(t *testing.T) {
	size := chaosCampaign
	seen := map[chaosFaultKind]int{}
	short, long := 0, 0
	var attended, unattended []uint64 // seeds whose allocator reset is followed by a recover, or not
	var intoRegistration []uint64     // seeds whose allocator reset goes into a recovery's registration
	for seed := uint64(1); seed <= 12; seed++ {
		p := makeChaosPlan(size, seed)
		count := p.faultCounts()
		t.Logf("seed %d: %s", seed, chaosKindCounts(count))
		for k, n := range count {
			seen[k] += n
		}
		assert.Equal(t, 1, count[faultAllocatorTerminate]+count[faultAllocatorReset], "seed %d: one allocator fault", seed)
		assert.Equal(t, 2, count[faultAgentPair], "seed %d: two two-jobs outages", seed)
		assert.Equal(t, 1, count[faultListingLag], "seed %d: one lagging listing", seed)
		assert.LessOrEqual(t, count[faultDeadJob], 1, "seed %d: at most one job that cannot answer", seed)
		assert.Equal(t, 1, count[faultCapLowered], "seed %d: one cap lowered", seed)
		strays := 0
		for _, j := range p.jobs {
			if j.stray {
				strays++
			}
		}
		assert.Equal(t, chaosStrays, strays, "seed %d: jobs that start a stray", seed)
		for _, f := range p.faults {
			switch f.kind {
			case faultAgentKill:
				switch {
				case f.down >= size.nodeTimeout/2 && f.down <= 2*size.nodeTimeout:
					short++
				case f.down >= chaosWatchHeartbeat+size.nodeTimeout/2 && f.down <= chaosWatchHeartbeat+2*size.nodeTimeout:
					long++
				default:
					t.Errorf("seed %d: agent outage of %s is in neither band", seed, f.down)
				}
			case faultAllocatorReset:
				assert.True(t, f.depth >= 1 && f.depth <= 8)
				if f.unattended {
					unattended = append(unattended, seed)
				} else {
					attended = append(attended, seed)
				}
				if f.intoRegistration {
					intoRegistration = append(intoRegistration, seed)
				}
			case faultJobReset:
				assert.True(t, f.depth == 0 || f.depth == 1)
			case faultAgentPair:
				require.Len(t, f.jobs, 2)
				assert.True(t, f.stagger >= time.Second && f.stagger <= 6*time.Second)
				for _, j := range f.jobs {
					// Two fit on the pair node, and on no other node.
					assert.True(t, 2*j.ramGB <= chaosPairNodeRAM && 3*j.ramGB > chaosPairNodeRAM && j.ramGB > chaosNodeRAM)
					assert.Greater(t, j.sleeps[0], (chaosWatchHeartbeat+2*size.nodeTimeout).Seconds()+10)
				}
			case faultListingLag:
				assert.True(t, f.lag >= 10*time.Second && f.lag <= 16*time.Second, "a lag of %s outlasts the fault's steps", f.lag)
				require.Len(t, f.jobs, 3)
			case faultCapLowered:
				require.Len(t, f.jobs, 3)
				holder, over, under := f.jobs[0], f.jobs[1], f.jobs[2]
				assert.True(t, holder.gated)
				gpus := func(j chaosJob) int { return j.workers * j.gpus }
				assert.True(t, gpus(holder)+gpus(over) > chaosCapBefore && gpus(holder)+gpus(under) > chaosCapBefore,
					"both wait on the old cap while the holder runs")
				assert.True(t, gpus(over) > f.capTo && gpus(under) <= f.capTo && gpus(holder)+gpus(under) > f.capTo,
					"the new cap can never start the first; the second waits until the holder ends")
			case faultBurst:
				require.GreaterOrEqual(t, len(f.jobs), 1+chaosBurstWaiting+chaosGPUsPerNode*2)
				assert.True(t, f.jobs[0].gated)
				assert.Equal(t, (chaosNodes-2)*chaosGPUsPerNode, f.jobs[0].workers*f.jobs[0].gpus)
				for _, j := range f.jobs[1:] {
					assert.Equal(t, 1, j.gpus*j.workers)
				}
			}
		}
	}
	for k := chaosFaultKind(0); k < firstClusterFault; k++ {
		assert.Positive(t, seen[k], "no seed of 1..12 draws %s", k)
	}
	t.Logf("allocator resets followed by a recover: seeds %v; left to the allocator: seeds %v", attended, unattended)
	assert.NotEmpty(t, attended, "a reset followed by `trainq allocator recover`")
	assert.NotEmpty(t, unattended, "a reset the allocator must notice itself")
	t.Logf("allocator resets into a recovery's registration: seeds %v", intoRegistration)
	assert.NotEmpty(t, intoRegistration, "a reset into a recovery's registration")
	for k := firstClusterFault; k < chaosFaultKinds; k++ {
		assert.Zero(t, seen[k], "only the cluster size draws %s", k)
	}
	for seed := uint64(1); seed <= 3; seed++ {
		count := makeChaosPlan(chaosClusterSize, seed).faultCounts()
		assert.Zero(t, count[faultServerKill])
		for k := firstClusterFault; k < chaosFaultKinds; k++ {
			assert.Equal(t, 1, count[k], "seed %d on the cluster: one %s", seed, k)
		}
	}
	assert.Positive(t, short, "outages of 0.5–2 × node_timeout")
	assert.Positive(t, long, "outages that reach the watches' heartbeat timeout")
}

// TestChaosStrayOutlivesAnUnsupervisedWorker: a stray job's script, run
// without trainq's supervisor, leaves a process behind, which the report's
// check names once its attempt has ended (the job is on a later one, or
// closed), and not while that attempt may still run.
func TestChaosStrayOutlivesAnUnsupervisedWorker(t *testing.T) {
	dir := t.TempDir()
	r := &chaosRun{records: filepath.Join(dir, "records")}
	run := func(job string, attempt int) {
		j := chaosJob{name: job, class: "low", workers: 1, gpus: 1, sleeps: []float64{0.1}, stray: true}
		cmd := exec.Command("sh", "-c", chaosScript(r.records, filepath.Join(dir, "gate"), j))
		cmd.Env = append(os.Environ(), "TRAINQ_WORKER=0", "TRAINQ_JOB_NAME="+job, fmt.Sprintf("TRAINQ_ATTEMPT=%d", attempt))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, cmd.Run())
	}
	t.Cleanup(func() {
		for _, s := range chaosStrayProcs(r.records) {
			_ = syscall.Kill(s.pid, syscall.SIGKILL)
		}
	})
	run("chaos-007", 2)
	run("chaos-008", 1)
	require.Eventually(t, func() bool { return len(chaosStrayProcs(r.records)) == 2 }, time.Minute, 20*time.Millisecond,
		"the scripts' strays are running")

	running := map[string]chaosJobInfo{"chaos-007": {found: true, attempt: 2}, "chaos-008": {found: true, attempt: 1}}
	assert.Empty(t, r.liveStrays(running), "their attempts may still run")
	ended := map[string]chaosJobInfo{"chaos-007": {found: true, attempt: 3}, "chaos-008": {found: true, closed: true, attempt: 1}}
	named := r.liveStrays(ended)
	require.Len(t, named, 2, "one attempt has ended, the other job has")
	assert.Contains(t, strings.Join(named, "\n"), "of chaos-007 attempt 2")
	assert.Contains(t, strings.Join(named, "\n"), "of chaos-008 attempt 1")
	require.Eventually(t, func() bool { return len(chaosStrayProcs(r.records)) == 0 }, time.Minute, 20*time.Millisecond,
		"the check kills what it names")
}

func TestParseChaosSeeds(t *testing.T) {
	s, err := parseChaosSeeds("1-3,7")
	require.NoError(t, err)
	assert.Equal(t, []uint64{1, 2, 3, 7}, s)
	s, err = parseChaosSeeds("5")
	require.NoError(t, err)
	assert.Equal(t, []uint64{5}, s)
	for _, bad := range []string{"", "x", "3-1", "1-5000"} {
		_, err := parseChaosSeeds(bad)
		assert.Error(t, err, bad)
	}
}
