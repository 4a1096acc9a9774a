package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file is the chaos test's plan: the jobs and the faults, all drawn
// from one seed, so that a run can be repeated exactly.

// chaosNodeTimeout is the config's node_timeout: how long a node agent may
// be silent before its node counts as lost.
const chaosNodeTimeout = 10 * time.Second

// chaosNodes is the number of nodes of the chaos allocation, each with
// chaosGPUsPerNode GPUs.
const (
	chaosNodes       = 8
	chaosGPUsPerNode = 4
)

// chaosSize is one size of the chaos test.
type chaosSize struct {
	name string
	jobs int
	// submitWindow is the time over which the jobs are submitted.
	submitWindow time.Duration
	// The faults are spread over [faultsFrom, faultsUntil].
	faultsFrom, faultsUntil time.Duration
	workerKills             int
	// agentDowns are how long the killed node agent stays down, one per kill.
	agentDowns          []time.Duration
	serverKills         int
	allocatorTerminates int
	// drain bounds the wait, after the last submission and the last fault,
	// for every job to end.
	drain time.Duration
}

var (
	// chaosFull is `make chaos`: within 20 minutes on a 2-core machine.
	chaosFull = chaosSize{
		name: "full", jobs: 200, submitWindow: 4 * time.Minute,
		faultsFrom: 20 * time.Second, faultsUntil: 4*time.Minute + 30*time.Second,
		workerKills: 5, agentDowns: []time.Duration{chaosNodeTimeout + 5*time.Second, 3 * time.Second},
		serverKills: 1, allocatorTerminates: 1, drain: 9 * time.Minute,
	}
	// chaosReduced runs in every `go test ./...`: a few minutes at most.
	chaosReduced = chaosSize{
		name: "reduced", jobs: 30, submitWindow: 30 * time.Second,
		faultsFrom: 6 * time.Second, faultsUntil: 50 * time.Second,
		workerKills: 2, agentDowns: []time.Duration{chaosNodeTimeout + 5*time.Second},
		serverKills: 1, allocatorTerminates: 1, drain: 150 * time.Second,
	}
)

// chaosJob is one job of the plan.
type chaosJob struct {
	name    string
	at      time.Duration // submitted at this offset from the start
	class   string
	workers int
	gpus    int       // per worker
	sleeps  []float64 // seconds, per worker
}

type chaosFaultKind int

const (
	faultWorkerKill chaosFaultKind = iota
	faultAgentKill
	faultServerKill
	faultAllocatorTerminate
)

func (k chaosFaultKind) String() string {
	switch k {
	case faultWorkerKill:
		return "kill -9 trainq-worker"
	case faultAgentKill:
		return "kill -9 node agent"
	case faultServerKill:
		return "kill -9 dev server"
	}
	return "terminate allocator"
}

// chaosFault is one fault of the plan.
type chaosFault struct {
	at   time.Duration // injected at this offset from the start (or as soon as the previous fault is done)
	kind chaosFaultKind
	down time.Duration // how long the killed process stays down
}

// chaosPlan is everything a run does, drawn from seed.
type chaosPlan struct {
	size      chaosSize
	seed      uint64
	jobs      []chaosJob
	faults    []chaosFault
	agentNode string // the node whose agent runs (and is killed) apart
}

func chaosNodeName(i int) string { return fmt.Sprintf("chaos-%d", i+1) }

// makeChaosPlan draws the jobs and the faults of one run.
func makeChaosPlan(size chaosSize, seed uint64) chaosPlan {
	rng := rand.New(rand.NewPCG(seed, 0x747261696e71)) // "trainq"
	p := chaosPlan{size: size, seed: seed}
	p.agentNode = chaosNodeName(rng.IntN(chaosNodes))

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
		for range j.workers {
			j.sleeps = append(j.sleeps, float64(10+rng.IntN(71))/10) // 1.0–8.0 s
		}
		p.jobs = append(p.jobs, j)
	}

	var kinds []chaosFaultKind
	for range size.workerKills {
		kinds = append(kinds, faultWorkerKill)
	}
	for range size.agentDowns {
		kinds = append(kinds, faultAgentKill)
	}
	for range size.serverKills {
		kinds = append(kinds, faultServerKill)
	}
	for range size.allocatorTerminates {
		kinds = append(kinds, faultAllocatorTerminate)
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	agentDowns := append([]time.Duration(nil), size.agentDowns...)
	rng.Shuffle(len(agentDowns), func(i, j int) { agentDowns[i], agentDowns[j] = agentDowns[j], agentDowns[i] })
	slot := (size.faultsUntil - size.faultsFrom) / time.Duration(max(len(kinds), 1))
	for i, k := range kinds {
		f := chaosFault{kind: k, at: size.faultsFrom + time.Duration(i)*slot + time.Duration(rng.Int64N(int64(slot/2)+1))}
		f.at = f.at.Round(10 * time.Millisecond)
		switch k {
		case faultWorkerKill:
			f.down = time.Duration(500+rng.IntN(2500)) * time.Millisecond
		case faultAgentKill:
			f.down, agentDowns = agentDowns[0], agentDowns[1:]
		case faultServerKill:
			f.down = time.Duration(1000+rng.IntN(2000)) * time.Millisecond
		}
		p.faults = append(p.faults, f)
	}
	return p
}

// chaosScript is a job's script: each worker records its start and its end
// (see testenv.ParseHoldRecords) and sleeps its planned time in between. A
// SIGTERM (a preemption or a stop) ends it at once with 143, after the end
// line; a SIGKILL leaves no end line.
func chaosScript(records string, sleeps []float64) string {
	var cases strings.Builder
	for w, s := range sleeps {
		fmt.Fprintf(&cases, "%d) d=%s;; ", w, strconv.FormatFloat(s, 'f', 1, 64))
	}
	return `R=` + chaosShellQuote(records) + `; ` +
		`rec() { echo "$1 $TRAINQ_JOB_NAME $TRAINQ_ATTEMPT $TRAINQ_WORKER $TRAINQ_NODE $CUDA_VISIBLE_DEVICES $(date +%s%N)" >>"$R"; }; ` +
		`started=0; ended=0; ` +
		`fin() { if [ "$started" = 1 ] && [ "$ended" = 0 ]; then ended=1; rec end; fi; }; ` +
		`trap 'fin; exit 143' TERM; trap fin EXIT; ` +
		`rec start; started=1; ` +
		`case "$TRAINQ_WORKER" in ` + cases.String() + `*) d=1;; esac; ` +
		`sleep "$d" & wait $!`
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

func TestChaosPlanIsDeterministic(t *testing.T) {
	for _, size := range []chaosSize{chaosReduced, chaosFull} {
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
				assert.True(t, s >= 1 && s <= 8, "%s sleeps %v", j.name, s)
			}
			assert.True(t, j.at >= 0 && j.at <= size.submitWindow, j.name)
		}
		assert.Len(t, classes, 3, "low, medium and high jobs: %v", classes)

		count := map[chaosFaultKind]int{}
		var downs []time.Duration
		for i, f := range a.faults {
			count[f.kind]++
			assert.True(t, f.at >= size.faultsFrom && f.at <= size.faultsUntil, "fault %d at %s", i, f.at)
			if i > 0 {
				assert.True(t, f.at > a.faults[i-1].at, "faults are in time order")
			}
			if f.kind == faultAgentKill {
				downs = append(downs, f.down)
			}
		}
		assert.Equal(t, map[chaosFaultKind]int{faultWorkerKill: size.workerKills, faultAgentKill: len(size.agentDowns),
			faultServerKill: size.serverKills, faultAllocatorTerminate: size.allocatorTerminates}, count)
		assert.ElementsMatch(t, size.agentDowns, downs)
	}
	// The full size kills the agent once for longer than node_timeout, once for shorter.
	assert.True(t, chaosFull.agentDowns[0] > chaosNodeTimeout && chaosFull.agentDowns[1] < chaosNodeTimeout)
}
