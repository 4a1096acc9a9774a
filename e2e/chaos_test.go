package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/tempcluster"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// TestChaos checks trainq's core promise under faults: every GPU has exactly
// one holder at a time, and every job ends. Jobs of every class and size
// are submitted over time while the harness kill -9s trainq-worker, node
// agents and the Temporal dev server (restarting each), terminates or
// resets the allocator, resets running jobs, sets off bursts of grants, makes
// recovery's job listing lag and starts a job that cannot answer recovery;
// the fault schedule and the jobs are drawn from one seed. Then it waits
// (bounded) for every job to end, checks what the job workers recorded,
// what the server's histories say and what is left, prints a Markdown
// report ($TRAINQ_CHAOS_REPORT also gets it) and fails unless every
// required chaosFigure holds.
//
// Sizes ($TRAINQ_CHAOS):
//   - reduced (the default, what `go test ./...` runs): 30 jobs and 5 fixed
//     faults (two trainq-worker kills, an agent kill, a dev server kill, an
//     allocator terminate), node_timeout 10s; about a minute.
//   - full (make chaos): 200 jobs and 9 fixed faults.
//   - campaign: one seed in about a minute and a half, with node_timeout 2s,
//     stop_grace_period 1s and a reclaim_interval of 1–2s, every fault kind,
//     count and length drawn from the seed (chaos_plan_test.go).
//
// The seed is $TRAINQ_CHAOS_SEED (default 1). $TRAINQ_CHAOS_SEEDS=1-5 or
// =3,7,11 (make chaos SEEDS=5) runs a campaign: one run per seed, each on
// its own dev server, and a summary at the end (the campaign size unless
// $TRAINQ_CHAOS names another). TRAINQ_CHAOS_KEEP=1 keeps each run's
// directory (records, logs, database); a failed run always keeps it.
func TestChaos(t *testing.T) {
	size := chaosReduced
	switch v := os.Getenv("TRAINQ_CHAOS"); v {
	case "", "reduced":
		if os.Getenv("TRAINQ_CHAOS_SEEDS") != "" && v == "" {
			size = chaosCampaign
		}
	case "campaign":
		size = chaosCampaign
	case "full":
		size = chaosFull
	case "cluster":
		size = chaosClusterSize
	default:
		t.Fatalf("TRAINQ_CHAOS=%q: use reduced (the default), full, campaign or cluster", v)
	}
	if v := os.Getenv("TRAINQ_CHAOS_SEEDS"); v != "" {
		seeds, err := parseChaosSeeds(v)
		require.NoError(t, err, "TRAINQ_CHAOS_SEEDS")
		runChaosCampaign(t, size, seeds)
		return
	}
	seed, err := chaosSeed()
	require.NoError(t, err)
	r := newChaosRun(t, makeChaosPlan(size, seed))
	r.run()
}

// runChaosCampaign runs one chaos run per seed, one after the other, and
// prints a summary of them all.
func runChaosCampaign(t *testing.T, size chaosSize, seeds []uint64) {
	var reports []*chaosReport
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := newChaosRun(t, makeChaosPlan(size, seed))
			if rep := r.run(); rep != nil {
				reports = append(reports, rep)
			}
		})
	}
	text := chaosCampaignSummary(size, seeds, reports)
	fmt.Print("\n" + text + "\n")
	if path := os.Getenv("TRAINQ_CHAOS_REPORT"); path != "" {
		var all strings.Builder
		all.WriteString(text)
		for _, rep := range reports {
			all.WriteString("\n" + rep.markdown())
		}
		if err := os.WriteFile(path, []byte(all.String()), 0o644); err != nil {
			t.Errorf("write the report to %s: %v", path, err)
		}
	}
}

// chaosConfig is the chaos allocation: chaosNodes nodes of chaosGPUsPerNode
// GPUs, with the plan's node_timeout, stop_grace_period and reclaim_interval.
const chaosConfig = `
data_dir: %s
default_region: C
default_allocation: chaos
reclaim_interval: %s
node_timeout: %s
metrics_addr: ""
regions:
  - name: C
    allocations:
      - name: chaos
        stop_grace_period: %s
%s        nodes:
%s`

// chaosLimits is the chaos allocation's limits: chaosCapWorkspace's high
// GPUs capped at maxGPUs, when the plan lowers that cap (none otherwise).
func chaosLimits(p chaosPlan, maxGPUs int) string {
	if p.faultCounts()[faultCapLowered] == 0 {
		return ""
	}
	return fmt.Sprintf("        limits:\n          - {workspace: %s, class: high, max_gpus: %d}\n", chaosCapWorkspace, maxGPUs)
}

const (
	chaosRegion     = "C"
	chaosAllocation = "chaos"
	// chaosReadyLine is what every trainq-worker role logs once it serves.
	chaosReadyLine = "trainq-worker is running"
)

// chaosProc is one trainq-worker process the harness runs, kills and restarts.
type chaosProc struct {
	name string
	args []string
	p    *testenv.WorkerProcess
	// starts counts the starts, deaths the exits the harness did not cause.
	starts, deaths int
	// logs keeps the output of every earlier run, for a failure report.
	logs []string
	// down is set while a fault keeps the process down on purpose (guarded
	// by chaosRun.mu): it is not revived meanwhile.
	down bool
	// env is added to the process's environment at every start (guarded by
	// chaosRun.mu): TRAINQ_TEST_LISTING_LAG once a lagging listing is on.
	env []string
}

// chaosRun is one run of the chaos test.
type chaosRun struct {
	t    *testing.T
	plan chaosPlan

	dir, dataDir, configPath, records, gates string
	nodesConfig                              string // the config's nodes, as written
	cfg                                      *config.Config
	temporalBin                              string
	srv                                      *testenv.PersistentDevServer
	// cluster replaces srv on the production-shaped cluster (plan.size.cluster).
	cluster *tempcluster.Cluster
	c       client.Client

	// main runs the workflows; agent serves plan.agentNode, pairAgent
	// plan.pairNode (nil without one), agents the other nodes.
	main, agent, pairAgent, agents *chaosProc
	// main2 is the second trainq-worker replica on the cluster (nil on the
	// dev server): workflows and control activities, like main.
	main2 *chaosProc
	// pairMu lets one two-jobs outage at a time use the pair node.
	pairMu sync.Mutex

	begin time.Time
	// jobs are every job the plan may submit, by name.
	jobs map[string]chaosJob

	mu        sync.Mutex
	events    []string          // what happened, with offsets
	problems  []string          // what went wrong in the harness's own actions
	submitted map[string]bool   // jobs whose workflow was started
	notes     map[string]string // job -> why its submission failed
	faultLog  []string          // one line per injected fault
	// injected counts the faults injected by kind, and degraded those that
	// could not be injected as planned (said in their fault line).
	injected, degraded map[chaosFaultKind]int
	// restarts are the restarts of the workflows' trainq-worker after a
	// kill -9: when the harness started it, and its pid.
	restarts []workerRestart
	// over is set when the test ends early: goroutines still running must
	// not log to a finished test.
	over bool
	// lag is the listing lag trainq-worker runs with (0: none).
	lag time.Duration
	// recoveries are the harness's own `trainq allocator recover` calls, and
	// unrecovered those that got no answer (a recovery held up).
	recoveries  int
	unrecovered []string
	// lagMissed are the running attempts a lagging listing missed.
	lagMissed []chaosMissed
	// resetRuns are the allocator runs the harness's resets made.
	resetRuns []string
}

func newChaosRun(t *testing.T, plan chaosPlan) *chaosRun {
	r := &chaosRun{t: t, plan: plan, submitted: map[string]bool{}, notes: map[string]string{}, jobs: map[string]chaosJob{},
		injected: map[chaosFaultKind]int{}, degraded: map[chaosFaultKind]int{}}
	for _, j := range plan.allJobs() {
		r.jobs[j.name] = j
	}
	r.temporalBin = os.Getenv("TRAINQ_TEMPORAL_BIN_RESOLVED") // set by TestMain
	require.NotEmpty(t, r.temporalBin)
	var err error
	r.dir, err = os.MkdirTemp("", "trainq-chaos-")
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("TRAINQ_CHAOS_KEEP") != "" {
			t.Logf("the chaos test directory is kept: %s (records.log, logs/, data/, temporal.db)", r.dir)
			return
		}
		_ = os.RemoveAll(r.dir)
	})
	r.dataDir = filepath.Join(r.dir, "data")
	r.records = filepath.Join(r.dir, "records.log")
	r.gates = filepath.Join(r.dir, "gates")
	require.NoError(t, os.MkdirAll(filepath.Join(r.dir, "logs"), 0o755))
	require.NoError(t, os.MkdirAll(r.gates, 0o755))
	var nodes strings.Builder
	for i := range chaosNodes {
		ram := chaosNodeRAM
		if chaosNodeName(i) == plan.pairNode {
			ram = chaosPairNodeRAM
		}
		fmt.Fprintf(&nodes, "          - {name: %s, family: a100, gpus: %d, cpu: 64, ram_gb: %d}\n", chaosNodeName(i), chaosGPUsPerNode, ram)
	}
	r.configPath = filepath.Join(r.dir, "trainq.yaml")
	r.nodesConfig = nodes.String()
	require.NoError(t, r.writeConfig(chaosCapBefore))
	r.cfg, err = config.Load(r.configPath)
	require.NoError(t, err)
	return r
}

// writeConfig writes the run's config, with chaosCapWorkspace's high GPUs
// capped at maxGPUs when the plan lowers that cap; trainq-worker applies it
// when it starts.
func (r *chaosRun) writeConfig(maxGPUs int) error {
	return os.WriteFile(r.configPath, []byte(fmt.Sprintf(chaosConfig, r.dataDir, r.plan.reclaimInterval,
		r.plan.size.nodeTimeout, r.plan.size.stopGrace, chaosLimits(r.plan, maxGPUs), r.nodesConfig)), 0o644)
}

// elapsed is the time since the run began, for log lines.
func (r *chaosRun) elapsed() string {
	return fmt.Sprintf("+%5.1fs", time.Since(r.begin).Seconds())
}

// logf logs an event of the run.
func (r *chaosRun) logf(format string, args ...any) {
	line := r.elapsed() + " " + fmt.Sprintf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, line)
	if !r.over {
		r.t.Log("chaos " + line)
	}
}

func (r *chaosRun) isOver() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.over
}

// problem records something that went wrong in the harness's own actions.
func (r *chaosRun) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, r.elapsed()+" "+msg)
	if !r.over {
		r.t.Log("chaos " + r.elapsed() + " PROBLEM: " + msg)
	}
}

// run runs the plan and checks the promise; it returns the report (nil if
// the run could not get that far).
func (r *chaosRun) run() *chaosReport {
	t := r.t
	r.begin = time.Now()
	var err error
	if r.plan.size.cluster {
		root, err := filepath.Abs("..")
		require.NoError(t, err)
		bin, err := tempcluster.FindBinaries(root)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		r.cluster, err = tempcluster.Start(ctx, bin, tempcluster.Options{Dir: filepath.Join(r.dir, "cluster")})
		cancel()
		require.NoError(t, err)
		t.Cleanup(r.cluster.Stop)
		r.logf("Temporal %s cluster: PostgreSQL, %d history shards, frontend %s, its logs in %s",
			tempcluster.Version, r.cluster.Shards(), r.cluster.HostPort(), filepath.Join(r.dir, "cluster", "logs"))
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		r.srv, err = testenv.StartPersistentDevServer(ctx, r.temporalBin, filepath.Join(r.dir, "temporal.db"))
		cancel()
		require.NoError(t, err)
		t.Cleanup(func() { r.srv.Stop(10 * time.Second) })
		r.logf("dev server on %s with its state in %s", r.srv.HostPort(), r.srv.DBFile())
	}
	r.c, err = client.Dial(client.Options{HostPort: r.hostPort(), Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	require.NoError(t, err)
	t.Cleanup(r.c.Close)

	// trainq-worker runs the workflows; one agent process serves the node
	// whose agent is killed, one the pair node (if any), another the other
	// nodes.
	var others []string
	for i := range chaosNodes {
		if n := chaosNodeName(i); n != r.plan.agentNode && n != r.plan.pairNode {
			others = append(others, "--node", n)
		}
	}
	r.main = &chaosProc{name: "trainq-worker", args: []string{"--agents=false", "--config", r.configPath}}
	if r.cluster != nil {
		r.main2 = &chaosProc{name: "trainq-worker 2", args: []string{"--agents=false", "--config", r.configPath}}
	}
	r.agent = &chaosProc{name: "agent " + r.plan.agentNode, args: []string{"agent", "--node", r.plan.agentNode, "--config", r.configPath}}
	if r.plan.pairNode != "" {
		r.pairAgent = &chaosProc{name: "agent " + r.plan.pairNode, args: []string{"agent", "--node", r.plan.pairNode, "--config", r.configPath}}
	}
	r.agents = &chaosProc{name: "agents of the other nodes", args: append([]string{"agent", "--config", r.configPath}, others...)}
	t.Cleanup(r.stopAll)
	if r.plan.maxUpdatesPerRun > 0 {
		require.NoError(t, r.startAllocator(), "start the allocator with its per-run message limit")
	}
	for _, p := range r.procs() {
		require.NoError(t, r.start(p))
	}
	// Runs first of the cleanups: a submitter left behind by a failed
	// test stops and logs no more.
	t.Cleanup(func() {
		r.mu.Lock()
		r.over = true
		r.mu.Unlock()
	})
	r.logf("plan: %s size, seed %d: %d jobs over %s (+%d submitted by faults), %d faults (%s); node %s's agent runs apart%s; "+
		"node_timeout %s, stop_grace_period %s, reclaim_interval %s%s",
		r.plan.size.name, r.plan.seed, len(r.plan.jobs), r.plan.size.submitWindow, len(r.plan.allJobs())-len(r.plan.jobs),
		len(r.plan.faults), chaosKindCounts(r.plan.faultCounts()), r.plan.agentNode, r.pairText(),
		r.plan.size.nodeTimeout, r.plan.size.stopGrace, r.plan.reclaimInterval, r.handOverText())

	submitted := make(chan struct{})
	go func() { defer close(submitted); r.submitAll() }()
	r.injectAll()
	<-submitted
	r.logf("every job submitted and every fault injected; waiting up to %s for the jobs to end", r.plan.size.drain)

	final := r.drain(time.Now().Add(r.plan.size.drain))
	rep := r.check(final)
	rep.resumed = r.schedulingResumed()
	rep.resetRuns = r.resetRunEnds()
	text := rep.markdown()
	fmt.Print("\n" + text + "\n")
	if path := os.Getenv("TRAINQ_CHAOS_REPORT"); path != "" && os.Getenv("TRAINQ_CHAOS_SEEDS") == "" {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Errorf("write the report to %s: %v", path, err)
		}
	}
	if failed := rep.failedFigures(); len(failed) > 0 {
		r.dumpLogs()
		t.Errorf("trainq broke its promise under chaos (seed %d): %s", r.plan.seed, strings.Join(failed, "; "))
	}
	return rep
}

func (r *chaosRun) handOverText() string {
	if r.plan.maxUpdatesPerRun == 0 {
		return ""
	}
	return fmt.Sprintf("; the allocator continues as new every %d messages (until a terminate: its successor starts from the config)", r.plan.maxUpdatesPerRun)
}

// startAllocator starts the allocator before trainq-worker does, with the
// plan's per-run message limit: trainq-worker's reconfigure at its start
// keeps it, every run carries it on, and an allocator started afresh after a
// terminate does not have it.
func (r *chaosRun) startAllocator() error {
	in, err := r.cfg.AllocatorInput(chaosRegion, chaosAllocation)
	if err != nil {
		return err
	}
	in.MaxUpdatesPerRun = r.plan.maxUpdatesPerRun
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = r.c.ExecuteWorkflow(ctx, protocol.AllocatorStartOptions(chaosRegion, chaosAllocation), protocol.AllocatorWorkflowName, in)
	return err
}

func (r *chaosRun) pairText() string {
	if r.plan.pairNode == "" {
		return ""
	}
	return fmt.Sprintf(", and node %s's (the pair node)", r.plan.pairNode)
}

func (r *chaosRun) procs() []*chaosProc {
	ps := []*chaosProc{r.main, r.agent}
	if r.main2 != nil {
		ps = append(ps, r.main2)
	}
	if r.pairAgent != nil {
		ps = append(ps, r.pairAgent)
	}
	return append(ps, r.agents)
}

// start starts p and waits until it serves. A process that exits before
// that is retried a few times: a start right after the dev server came back
// may meet it not quite ready.
func (r *chaosRun) start(p *chaosProc) error {
	var last error
	for try := 1; try <= 3; try++ {
		r.mu.Lock()
		penv := append([]string{"TEMPORAL_ADDRESS=" + r.hostPort()}, p.env...)
		r.mu.Unlock()
		w, err := testenv.StartWorker(filepath.Join(env.binDir, "trainq-worker"), p.args, penv)
		if err != nil {
			return err
		}
		p.p = w
		p.starts++
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err = w.WaitLog(ctx, chaosReadyLine)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		w.Kill()
		p.logs = append(p.logs, w.LogTail(200))
		r.problem("%s did not start (try %d): %v", p.name, try, err)
	}
	return fmt.Errorf("%s did not start: %w", p.name, last)
}

// kill ends p with SIGKILL and keeps its output.
func (r *chaosRun) kill(p *chaosProc) {
	p.p.Kill()
	p.logs = append(p.logs, p.p.LogTail(200))
}

// setDown marks p as kept down by a fault (or no longer).
func (r *chaosRun) setDown(p *chaosProc, down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p.down = down
}

// reviveExited restarts the processes that exited without being killed by
// the harness: they are counted, and the jobs must not pay for a harness
// that stopped serving a node.
func (r *chaosRun) reviveExited() {
	for _, p := range r.procs() {
		r.mu.Lock()
		down := p.down
		r.mu.Unlock()
		if !down && p.p != nil && p.p.Exited() {
			p.deaths++
			p.logs = append(p.logs, p.p.LogTail(200))
			r.problem("%s exited by itself; its output ends with:\n%s", p.name, p.p.LogTail(15))
			if err := r.start(p); err != nil {
				r.problem("%v", err)
			}
		}
	}
}

func (r *chaosRun) stopAll() {
	for _, p := range r.procs() {
		if p != nil && p.p != nil {
			p.p.Stop(10 * time.Second)
		}
	}
	// Whatever a failed run leaves behind must not outlive the test.
	if live, err := testenv.LiveWorkers(r.dataDir); err == nil {
		testenv.KillWorkerGroups(live)
	}
}

// dumpLogs writes every process's output to the test directory, which a
// failed run keeps.
func (r *chaosRun) dumpLogs() {
	for _, p := range r.procs() {
		logs := append([]string(nil), p.logs...)
		if p.p != nil {
			logs = append(logs, p.p.LogTail(1<<30))
		}
		name := strings.NewReplacer(" ", "-").Replace(p.name)
		_ = os.WriteFile(filepath.Join(r.dir, "logs", name+".log"), []byte(strings.Join(logs, "\n---- restarted ----\n")), 0o644)
	}
	r.mu.Lock()
	events := append([]string(nil), r.events...)
	r.mu.Unlock()
	_ = os.WriteFile(filepath.Join(r.dir, "logs", "events.log"), []byte(strings.Join(events, "\n")+"\n"), 0o644)
	if r.srv != nil {
		_ = os.WriteFile(filepath.Join(r.dir, "logs", "temporal.log"), []byte(r.srv.LogTail(1<<30)), 0o644)
	}
}

// sleepUntil sleeps until offset d from the start: the fault schedule's and
// the submissions' spacing.
func (r *chaosRun) sleepUntil(d time.Duration) {
	if wait := time.Until(r.begin.Add(d)); wait > 0 {
		time.Sleep(wait)
	}
}

// gate is the file a gated job's workers wait for.
func (r *chaosRun) gate(job string) string { return filepath.Join(r.gates, job) }

func (r *chaosRun) spec(j chaosJob) protocol.JobSpec {
	return protocol.JobSpec{
		Script: chaosScript(r.records, r.gate(j.name), j), Type: "binary", InstanceType: j.instanceType(),
		Region: chaosRegion, AllocationName: chaosAllocation, PriorityClass: j.class, NWorkers: j.workers, MaxRetry: 3,
		JobDesc: fmt.Sprintf("chaos seed %d", r.plan.seed), Workspace: j.workspace,
	}
}

// submitAll submits the plan's own jobs at their times.
func (r *chaosRun) submitAll() {
	for _, j := range r.plan.jobs {
		r.sleepUntil(j.at)
		if r.isOver() {
			return
		}
		r.submit(j)
	}
	r.logf("submitted %d jobs", len(r.plan.jobs))
}

// submit submits one job the way the CLI does (client.Submit). Each job has
// a fixed name, so a submission retried while the dev server is down starts
// one workflow. It is retried for up to 2 minutes, and none after 2 minutes
// past the submission window and the last fault's time: the run stays
// bounded.
func (r *chaosRun) submit(j chaosJob) bool {
	last := r.begin.Add(max(r.plan.size.submitWindow, r.plan.size.faultsUntil) + 2*time.Minute)
	deadline := time.Now().Add(2 * time.Minute)
	if deadline.After(last) {
		deadline = last
	}
	var err error
	for tries := 1; ; tries++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = tqclient.New(r.c, r.cfg).Submit(ctx, r.spec(j),
			tqclient.SubmitOptions{Name: j.name, RequestCheckInterval: r.plan.size.requestCheck})
		cancel()
		if errors.Is(err, tqclient.ErrJobExists) {
			err = nil // an earlier try started it, and it has ended already
		}
		if err == nil || time.Now().After(deadline) || r.isOver() {
			break
		}
		if tries == 1 {
			r.logf("submitting %s failed, retrying: %v", j.name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.mu.Lock()
	if err == nil {
		r.submitted[j.name] = true
	} else {
		r.notes[j.name] = "never submitted: " + err.Error()
	}
	r.mu.Unlock()
	if err != nil {
		r.problem("could not submit %s: %v", j.name, err)
	}
	return err == nil
}

// injectAll injects the plan's faults in order, each at its time or as
// soon as the previous one is done (a restart is awaited, not slept on).
// The two-jobs outage runs beside the others (its node has an agent of its
// own); the run waits for it before the drain.
func (r *chaosRun) injectAll() {
	var aside sync.WaitGroup
	kills := map[chaosFaultKind]int{}
	for i, f := range r.plan.faults {
		r.sleepUntil(f.at)
		if r.isOver() {
			break
		}
		r.reviveExited()
		kills[f.kind]++
		n := kills[f.kind]
		if f.kind == faultDeadJob {
			// Its recovery waits out the register updates the job cannot
			// answer: the other faults go on meanwhile.
			aside.Add(1)
			go func() {
				defer aside.Done()
				start := time.Now()
				desc, ok := r.deadJob(n)
				r.logFault(i, f, n, start, desc, ok)
			}()
			continue
		}
		if f.kind == faultAgentPair {
			aside.Add(1)
			go func() {
				defer aside.Done()
				r.pairMu.Lock()
				defer r.pairMu.Unlock()
				start := time.Now()
				desc, ok := r.pairOutage(f)
				r.logFault(i, f, n, start, desc, ok)
			}()
			continue
		}
		start := time.Now()
		desc, ok := "", true
		switch f.kind {
		case faultWorkerKill:
			desc = r.bounce(r.main, f.down)
		case faultAgentKill:
			desc = r.bounce(r.agent, f.down)
			switch nt := r.plan.size.nodeTimeout; {
			case f.down > chaosWatchHeartbeat+nt:
				desc += fmt.Sprintf(" (longer than the watches' heartbeat timeout %s + node_timeout %s)", chaosWatchHeartbeat, nt)
			case f.down > nt:
				desc += fmt.Sprintf(" (longer than node_timeout %s)", nt)
			default:
				desc += fmt.Sprintf(" (shorter than node_timeout %s)", nt)
			}
		case faultServerKill:
			desc = r.bounceServer(f.down)
		case faultHistoryKill:
			desc = r.bounceService(tempcluster.History, f.down)
		case faultMatchingKill:
			desc = r.bounceService(tempcluster.Matching, f.down)
		case faultFrontendKill:
			desc = r.bounceService(tempcluster.Frontend, f.down)
		case faultPostgresRestart:
			desc = r.bounceService("postgres", f.down)
		case faultReplicaLoss:
			pid := r.main2.p.Pid()
			r.setDown(r.main2, true)
			r.kill(r.main2)
			desc = fmt.Sprintf("%s (pid %d) killed with SIGKILL for good: %s alone runs the workflows from now on", r.main2.name, pid, r.main.name)
		case faultAllocatorTerminate:
			desc = r.terminateAllocator()
		case faultAllocatorReset:
			desc, ok = r.resetAllocator(f)
		case faultJobReset:
			desc, ok = r.resetJob(f)
		case faultBurst:
			desc, ok = r.burst(f)
		case faultCapLowered:
			desc, ok = r.capLowered(f)
		case faultListingLag:
			var follow func() string
			desc, ok, follow = r.listingLag(f)
			if follow != nil {
				aside.Add(1)
				go func() {
					defer aside.Done()
					r.noteFault(fmt.Sprintf("%d. (follow-up) %s #%d: %s", i+1, f.kind, n, follow()))
				}()
			}
		}
		r.logFault(i, f, n, start, desc, ok)
	}
	aside.Wait()
}

// logFault records one injected fault; ok is false for a fault that could
// not be injected as planned (its description says why).
func (r *chaosRun) logFault(i int, f chaosFault, n int, start time.Time, desc string, ok bool) {
	line := fmt.Sprintf("%d. at %s (planned %s): %s #%d: %s", i+1, start.Sub(r.begin).Round(100*time.Millisecond),
		f.at, f.kind, n, desc)
	if !ok {
		line += " **(not as planned)**"
	}
	r.mu.Lock()
	r.faultLog = append(r.faultLog, line)
	r.injected[f.kind]++
	if !ok {
		r.degraded[f.kind]++
	}
	r.mu.Unlock()
	r.logf("fault %s", line)
}

// noteFault adds a line to the faults' list: what became of a fault that
// was followed up aside.
func (r *chaosRun) noteFault(line string) {
	r.mu.Lock()
	r.faultLog = append(r.faultLog, line)
	r.mu.Unlock()
	r.logf("fault %s", line)
}

// bounce kill -9s p, leaves it down for down, and starts it again.
func (r *chaosRun) bounce(p *chaosProc, down time.Duration) string {
	pid := p.p.Pid()
	r.kill(p)
	r.logf("killed %s (pid %d) with SIGKILL; down for %s", p.name, pid, down)
	time.Sleep(down)
	restarted := time.Now()
	if err := r.start(p); err != nil {
		r.problem("%v", err)
		return fmt.Sprintf("%s (pid %d) killed; RESTART FAILED: %v", p.name, pid, err)
	}
	if p == r.main {
		r.mu.Lock()
		r.restarts = append(r.restarts, workerRestart{at: restarted, pid: p.p.Pid()})
		r.mu.Unlock()
	}
	return fmt.Sprintf("%s (pid %d) killed, down %s, serving again %s after its restart (pid %d)",
		p.name, pid, down, time.Since(restarted).Round(10*time.Millisecond), p.p.Pid())
}

// workerRestart is one restart of the workflows' trainq-worker.
type workerRestart struct {
	at  time.Time
	pid int
}

// schedulingResumed says, for each restart of the workflows' trainq-worker,
// how long after its start the allocator completed its first workflow task
// on the new process (from the allocator's histories).
func (r *chaosRun) schedulingResumed() []string {
	r.mu.Lock()
	restarts := append([]workerRestart(nil), r.restarts...)
	r.mu.Unlock()
	if len(restarts) == 0 {
		return nil
	}
	runs := allocatorRuns(r.t, r.c, protocol.AllocatorWorkflowID(chaosRegion, chaosAllocation))
	var out []string
	for i, rs := range restarts {
		if at, ok := firstTaskBy(runs, rs.pid, rs.at); ok {
			out = append(out, fmt.Sprintf("restart %d (pid %d): %s", i+1, rs.pid, at.Sub(rs.at).Round(10*time.Millisecond)))
		} else {
			out = append(out, fmt.Sprintf("restart %d (pid %d): no allocator task completed by it", i+1, rs.pid))
		}
	}
	return out
}

// resetRunEnds says how each run a reset made ended: a reset run that
// continued as new must not have handed its pool on (the check of the run's
// holds says whether it did).
func (r *chaosRun) resetRunEnds() []string {
	r.mu.Lock()
	runs := append([]string(nil), r.resetRuns...)
	r.mu.Unlock()
	id := protocol.AllocatorWorkflowID(chaosRegion, chaosAllocation)
	var out []string
	for _, run := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := r.c.DescribeWorkflow(ctx, id, run)
		cancel()
		if err != nil {
			out = append(out, fmt.Sprintf("run %s: could not describe it: %v", run, err))
			continue
		}
		info := d.RawResponse.GetWorkflowExecutionInfo()
		end := "still running"
		if st := info.GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			how := st.String()
			if st == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
				how = "continued as new"
			}
			end = fmt.Sprintf("%s %s after it began", how, info.GetCloseTime().AsTime().Sub(info.GetStartTime().AsTime()).Round(10*time.Millisecond))
		}
		out = append(out, fmt.Sprintf("run %s: %s", run, end))
	}
	return out
}

// bounceServer kill -9s the dev server and starts it again on its file.
func (r *chaosRun) bounceServer(down time.Duration) string {
	r.srv.Kill()
	r.logf("killed the dev server with SIGKILL; down for %s", down)
	time.Sleep(down)
	restarted := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := r.srv.Start(ctx); err != nil {
		r.problem("the dev server did not come back: %v", err)
		r.t.Fatalf("the dev server did not come back on %s: %v", r.srv.DBFile(), err)
	}
	return fmt.Sprintf("dev server killed, down %s, serving again %s after its restart on the same file",
		down, time.Since(restarted).Round(10*time.Millisecond))
}

// hostPort is Temporal's frontend: the dev server's or the cluster's.
func (r *chaosRun) hostPort() string {
	if r.cluster != nil {
		return r.cluster.HostPort()
	}
	return r.srv.HostPort()
}

// bounceService kill -9s one service of the cluster (or crashes
// PostgreSQL), leaves it down for down and starts it again on its ports
// and state.
func (r *chaosRun) bounceService(name string, down time.Duration) string {
	pid := 0
	if name == "postgres" {
		r.cluster.Postgres().Crash()
		r.logf("crashed PostgreSQL (SIGQUIT: every backend at once, no checkpoint); down for %s", down)
	} else {
		pid = r.cluster.Pid(name)
		r.cluster.Kill(name)
		r.logf("killed the %s service (pid %d) with SIGKILL; down for %s", name, pid, down)
	}
	time.Sleep(down)
	restarted := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if name == "postgres" {
		err = r.cluster.Postgres().Start(ctx)
	} else {
		err = r.cluster.StartService(ctx, name)
	}
	if err != nil {
		r.problem("%s did not come back: %v", name, err)
		r.t.Fatalf("%s did not come back: %v", name, err)
	}
	if name == "postgres" {
		return fmt.Sprintf("PostgreSQL crashed, down %s, accepting connections again %s after its restart (crash recovery)",
			down, time.Since(restarted).Round(10*time.Millisecond))
	}
	return fmt.Sprintf("%s (pid %d) killed, down %s, answering again %s after its restart (pid %d)",
		name, pid, down, time.Since(restarted).Round(10*time.Millisecond), r.cluster.Pid(name))
}

// terminateAllocator terminates the allocator as an operator could, with
// the Temporal CLI.
func (r *chaosRun) terminateAllocator() string {
	id := protocol.AllocatorWorkflowID(chaosRegion, chaosAllocation)
	cmd := exec.Command(r.temporalBin, "workflow", "terminate", "--address", r.hostPort(),
		"--workflow-id", id, "--reason", "chaos test: allocator terminated")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.problem("temporal workflow terminate --workflow-id %s: %v: %s", id, err, strings.TrimSpace(string(out)))
		return fmt.Sprintf("%s NOT terminated: %v", id, err)
	}
	return fmt.Sprintf("`temporal workflow terminate --workflow-id %s`", id)
}

// chaosJobInfo is what the end of the run knows about one job.
type chaosJobInfo struct {
	name    string
	found   bool
	closed  bool
	status  enumspb.WorkflowExecutionStatus
	state   string // TrainqState
	attempt int64
	// From the status query (closed jobs; not for jobs that never started).
	st       *protocol.JobStatus
	queryErr error
}

// describeJob reads a job's workflow status and search attributes.
func (r *chaosRun) describeJob(ctx context.Context, name string) (chaosJobInfo, error) {
	ji := chaosJobInfo{name: name}
	resp, err := r.c.DescribeWorkflow(ctx, name, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return ji, nil
	}
	if err != nil {
		return ji, err
	}
	ji.found = true
	e := resp.RawResponse.GetWorkflowExecutionInfo()
	ji.status = e.GetStatus()
	ji.closed = ji.status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	sa := e.GetSearchAttributes().GetIndexedFields()
	if p, ok := sa[protocol.SAState]; ok {
		_ = chaosDecode(p, &ji.state)
	}
	if p, ok := sa[protocol.SAAttempt]; ok {
		_ = chaosDecode(p, &ji.attempt)
	}
	return ji, nil
}

// drain waits until every submitted job's workflow has closed, or the
// deadline. Each job's close is awaited (a long poll on its history);
// progress is printed every 15 seconds.
func (r *chaosRun) drain(deadline time.Time) map[string]chaosJobInfo {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	r.mu.Lock()
	var names []string
	for _, j := range r.plan.allJobs() {
		if r.submitted[j.name] {
			names = append(names, j.name)
		}
	}
	r.mu.Unlock()

	type result struct {
		name string
		info chaosJobInfo
	}
	done := make(chan result, len(names))
	for _, name := range names {
		go func() {
			for {
				// Get returns when the workflow closes, whatever its result;
				// an error of the call itself (the server restarting) is retried.
				_ = r.c.GetWorkflow(ctx, name, "").Get(ctx, nil)
				dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
				ji, err := r.describeJob(dctx, name)
				dcancel()
				if err == nil && (ji.closed || !ji.found) {
					done <- result{name, ji}
					return
				}
				if ctx.Err() != nil {
					done <- result{name, chaosJobInfo{name: name, found: true}}
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	final := map[string]chaosJobInfo{}
	ended := 0
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for received := 0; received < len(names); {
		select {
		case res := <-done:
			received++
			final[res.name] = res.info
			if res.info.closed {
				ended++
			}
		case <-tick.C:
			r.reviveExited()
			r.progress(names, final, deadline)
		}
	}
	r.logf("drain over: %d of %d submitted jobs ended", ended, len(names))
	return final
}

// progress prints how many jobs have ended and the states of the others.
func (r *chaosRun) progress(names []string, ended map[string]chaosJobInfo, deadline time.Time) {
	states := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range names {
		if _, ok := ended[n]; ok {
			continue
		}
		ji, err := r.describeJob(ctx, n)
		switch {
		case err != nil:
			states["unknown (server unreachable)"]++
		case ji.state == "":
			states["(no state)"]++
		default:
			states[ji.state]++
		}
	}
	r.logf("drain: %d/%d jobs ended; still open: %s; %s left", len(ended), len(names), chaosCounts(states),
		time.Until(deadline).Round(time.Second))
}

func chaosCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
