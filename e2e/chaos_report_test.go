package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// This file is the end of a chaos run: what is checked and how it is reported.

func chaosDecode(p *commonpb.Payload, v any) error {
	return converter.GetDefaultDataConverter().FromPayload(p, v)
}

// chaosReport holds every figure of a run.
type chaosReport struct {
	plan      chaosPlan
	wall      time.Duration
	submitted int

	lost  []string // never submitted, no workflow, or closed without a terminal state
	stuck []string // not ended at the deadline
	// states counts the jobs by final state (TrainqState, or the workflow's
	// own status when it closed without one).
	states      map[string]int
	preemptions int
	restarts    int
	unqueried   int // jobs whose status query failed: their preemptions are not counted

	orphans    []string // live worker processes of ended jobs or ended attempts
	strays     []string // live processes that left the group of a worker of an ended job or attempt
	unfinished int      // live worker processes of the current attempt of an open job

	holds testenv.HoldReport

	gpusNotFree int
	gpuProblem  string // why the figure failed ("" = all free)
	gpuText     string
	counters    *protocol.AllocatorCounters

	faults   []string
	problems []string
	// injected counts the faults by kind; degraded, those not injected as
	// planned.
	injected, degraded map[chaosFaultKind]int
	// server is what the histories say.
	server *chaosServer
	// resumed: after each restart of the workflows' trainq-worker, when
	// the allocator completed its first workflow task on the new process.
	resumed []string
	// resetRuns: how each allocator run a reset made ended.
	resetRuns []string
	deaths    []string // processes that exited by themselves
	// recoveries are the harness's own recover calls, unrecovered those that
	// got no answer.
	recoveries  int
	unrecovered []string
	// lagMissed are the running attempts a lagging listing missed;
	// fencedHealthy, their workers a recovery fence stopped.
	lagMissed     []chaosMissed
	fencedHealthy []string
}

// chaosFigure is one row of the report's table.
type chaosFigure struct {
	name     string
	value    string
	required bool // must be 0
	ok       bool
}

func (rep *chaosReport) figures() []chaosFigure {
	zero := func(name string, n int, value string) chaosFigure {
		if value == "" {
			value = fmt.Sprint(n)
		}
		return chaosFigure{name: name, value: value, required: true, ok: n == 0}
	}
	info := func(name, value string) chaosFigure { return chaosFigure{name: name, value: value} }
	gpuValue := fmt.Sprint(rep.gpusNotFree)
	if rep.gpuProblem != "" {
		gpuValue = rep.gpuProblem
	}
	gpu := chaosFigure{name: "GPUs not free at the end (allocator's queue query)", value: gpuValue, required: true,
		ok: rep.gpuProblem == "" && rep.gpusNotFree == 0}
	unended := map[string]int{}
	for _, h := range rep.holds.Unended {
		unended[h.EndSource]++
	}
	s := rep.server
	if s == nil {
		s = &chaosServer{readErrors: []string{"the histories were not read"}}
	}
	failed := 0
	for _, n := range s.failed {
		failed += n
	}
	figs := []chaosFigure{
		zero("jobs lost or stuck (not terminal at the deadline)", len(rep.lost)+len(rep.stuck), ""),
		zero("orphan worker processes left", len(rep.orphans), ""),
		zero("processes that left a worker's group and outlived it", len(rep.strays), ""),
		zero("overlapping holds of one GPU index on one node (workers' records)", len(rep.holds.Overlaps), ""),
		zero("duplicate executions of one attempt (job+attempt+worker started twice)", len(rep.holds.Duplicates), ""),
		zero("GPU handed to a new worker before the server saw its last worker end (histories)", len(s.unconfirmed), ""),
		zero("failed workflow tasks (histories; UnhandledCommand and the harness's resets and terminates aside)", failed, chaosZeroOr(failed, chaosCounts(s.failed))),
		zero("release signals refused and never delivered (job histories)", len(s.dropped), fmt.Sprintf("%d (of %d refused)", len(s.dropped), s.refused)),
		zero("workers the server never saw end (no watch, stop, release or fence in any history)", len(s.neverEnded),
			fmt.Sprintf("%d (of %d started)", len(s.neverEnded), s.workers)),
		gpu,
		zero("workers of running jobs a lagging recovery listing missed, stopped by the recovery's fences (histories)", len(rep.fencedHealthy),
			fmt.Sprintf("%d (of %d missed running attempts)", len(rep.fencedHealthy), len(rep.lagMissed))),
		zero("recoveries asked by the harness that got no answer (`trainq allocator recover`)", len(rep.unrecovered),
			fmt.Sprintf("%d (of %d)", len(rep.unrecovered), rep.recoveries)),
		zero("record anomalies (malformed or unpaired lines)", len(rep.holds.Anomalies), ""),
		zero("histories that could not be read", len(s.readErrors), ""),
	}
	for k := chaosFaultKind(0); k < chaosFaultKinds; k++ {
		if k >= firstClusterFault && !rep.plan.size.cluster {
			continue
		}
		v := fmt.Sprint(rep.injected[k])
		if d := rep.degraded[k]; d > 0 {
			v += fmt.Sprintf(" (%d not as planned)", d)
		}
		figs = append(figs, info("faults injected: "+k.String(), v))
	}
	return append(figs,
		info("jobs submitted", fmt.Sprintf("%d of %d", rep.submitted, len(rep.plan.allJobs()))),
		info("jobs by final state", chaosCounts(rep.states)),
		info("preemptions (attempts ended by a preemptor)", chaosWithUnknown(rep.preemptions, rep.unqueried)),
		info("restarts (attempts rerun)", chaosWithUnknown(rep.restarts, rep.unqueried)),
		info("worker holds recorded", fmt.Sprint(len(rep.holds.Holds))),
		info("holds without an end line (SIGKILLed), ended by", chaosCounts(unended)),
		info("worker processes of open jobs still running", fmt.Sprint(rep.unfinished)),
		info("workflow tasks failed with UnhandledCommand (benign), by type", chaosCounts(s.unhandled)),
		info("workflow tasks failed by the harness's resets and terminates, by type", chaosCounts(s.resets)),
		info("workflow tasks timed out (a killed trainq-worker's), by type", chaosCounts(s.timedOut)),
		info("workflow tasks failed on a history the server cut short (a restarted history service), by type", chaosCounts(s.cutShort)),
		info(fmt.Sprintf("worker starts that took over %s (StartWorker scheduled → completed)", chaosSlowStart), fmt.Sprint(len(s.slowStarts))),
		info("grants a node refused (GPUs in use by a worker the allocation did not know of; no worker started)", fmt.Sprint(len(s.refusedStarts))),
		info("grants sent / most in one allocator workflow task", fmt.Sprintf("%d / %d", s.grants, s.mostGrants)),
		info("histories read (runs, events)", fmt.Sprintf("%d, %d", s.runs, s.events)),
		info("allocator's lifetime counters (reset by a terminate)", chaosCountersText(rep.counters)),
		info("trainq-worker processes that exited by themselves", fmt.Sprint(len(rep.deaths))),
		info("harness problems", fmt.Sprint(len(rep.problems))),
		info("wall time", rep.wall.Round(time.Second).String()),
	)
}

func chaosZeroOr(n int, text string) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", n, text)
}

// chaosKindCounts says how many faults of each kind, in kind order.
func chaosKindCounts(m map[chaosFaultKind]int) string {
	var parts []string
	for k := chaosFaultKind(0); k < chaosFaultKinds; k++ {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d× %s", m[k], k))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func chaosWithUnknown(n, unknown int) string {
	if unknown == 0 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d (+ %d jobs not queried)", n, unknown)
}

func chaosCountersText(c *protocol.AllocatorCounters) string {
	if c == nil {
		return "unknown"
	}
	return fmt.Sprintf("grants %d, preemptions %d, reclaimed %d", c.Grants, c.Preemptions, c.Reclaimed)
}

// failedFigures names the required figures that do not hold.
func (rep *chaosReport) failedFigures() []string {
	var out []string
	for _, f := range rep.figures() {
		if f.required && !f.ok {
			out = append(out, fmt.Sprintf("%s: %s", f.name, f.value))
		}
	}
	return out
}

// markdown is the report, to paste into a note.
func (rep *chaosReport) markdown() string {
	var b strings.Builder
	verdict := "PASS"
	if len(rep.failedFigures()) > 0 {
		verdict = "FAIL"
	}
	p := rep.plan
	s := p.size
	fmt.Fprintf(&b, "### trainq chaos test: %s size, seed %d: %s\n\n", s.name, p.seed, verdict)
	pair := ""
	if p.pairNode != "" {
		pair = fmt.Sprintf(", node %s's (the pair node, %d GB of RAM: only it holds the pinned pair) in another", p.pairNode, chaosPairNodeRAM)
	}
	fmt.Fprintf(&b, "%d jobs (classes low/medium/high, 1–4 workers of a100.1gpu–a100.4gpu, max_retry 3, 1–%s per worker) "+
		"submitted over %s to %d nodes × %d GPUs (node_timeout %s, stop_grace_period %s, reclaim_interval %s), and %d more by the faults. "+
		"Workflows in `trainq-worker --agents=false`; node %s's agent in its own `trainq-worker agent` process%s; "+
		"faults: %s.\n\n",
		len(p.jobs), s.maxSleep, s.submitWindow, chaosNodes, chaosGPUsPerNode, s.nodeTimeout, s.stopGrace, p.reclaimInterval,
		len(p.allJobs())-len(p.jobs), p.agentNode, pair, chaosKindCounts(p.faultCounts()))
	b.WriteString("| figure | value | required | |\n|---|---|---|---|\n")
	for _, f := range rep.figures() {
		req, mark := "", ""
		if f.required {
			req, mark = "0", "ok"
			if !f.ok {
				mark = "**FAIL**"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", f.name, strings.ReplaceAll(f.value, "|", "\\|"), req, mark)
	}
	b.WriteString("\nFaults, in order:\n\n")
	for _, f := range rep.faults {
		fmt.Fprintf(&b, "%s\n", f)
	}
	section := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		const limit = 25
		fmt.Fprintf(&b, "\n%s (%d):\n\n", title, len(items))
		for i, it := range items {
			if i == limit {
				fmt.Fprintf(&b, "- … and %d more\n", len(items)-limit)
				break
			}
			fmt.Fprintf(&b, "- %s\n", strings.ReplaceAll(it, "\n", "\n  "))
		}
	}
	section("Allocator's first workflow task on the restarted trainq-worker, after its start", rep.resumed)
	section("Allocator runs made by a reset, and how they ended", rep.resetRuns)
	section("Recoveries that got no answer", rep.unrecovered)
	section("Healthy workers a recovery fence stopped (their job was missed by a lagging listing)", rep.fencedHealthy)
	section("Lost jobs", rep.lost)
	section("Stuck jobs (not terminal at the deadline)", rep.stuck)
	section("Orphan worker processes", rep.orphans)
	section("Processes that left a worker's group and outlived it", rep.strays)
	section("Overlapping holds", chaosStrings(rep.holds.Overlaps))
	if rep.server != nil {
		section("GPUs handed on before the server saw their worker end", rep.server.unconfirmed)
		section("Failed workflow tasks", rep.server.failedExamples)
		section("Release signals refused and never delivered", rep.server.dropped)
		section("Workers the server never saw end", rep.server.neverEnded)
		section("Slow worker starts", rep.server.slowStarts)
		section("Grants a node refused", rep.server.refusedStarts)
		section("Histories not read", rep.server.readErrors)
		if rep.server.mostGrantsAt != "" {
			fmt.Fprintf(&b, "\nMost grants in one allocator workflow task: %d (%s)\n", rep.server.mostGrants, rep.server.mostGrantsAt)
		}
	}
	section("Duplicate executions", chaosStrings(rep.holds.Duplicates))
	if rep.gpuText != "" {
		fmt.Fprintf(&b, "\nAllocator at the end: %s\n", rep.gpuText)
	}
	section("Record anomalies", rep.holds.Anomalies)
	var unended []string
	for _, h := range rep.holds.Unended {
		unended = append(unended, h.String())
	}
	section("Holds without an end line", unended)
	section("Processes that exited by themselves", rep.deaths)
	section("Harness problems", rep.problems)
	return b.String()
}

func chaosStrings[T fmt.Stringer](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.String()
	}
	return out
}

// check gathers every figure once the jobs have ended (or the drain's
// deadline has passed).
func (r *chaosRun) check(final map[string]chaosJobInfo) *chaosReport {
	rep := &chaosReport{plan: r.plan, states: map[string]int{}, injected: map[chaosFaultKind]int{}, degraded: map[chaosFaultKind]int{}}
	r.mu.Lock()
	rep.faults = append(rep.faults, r.faultLog...)
	rep.problems = append(rep.problems, r.problems...)
	for k, n := range r.injected {
		rep.injected[k] = n
	}
	for k, n := range r.degraded {
		rep.degraded[k] = n
	}
	rep.recoveries, rep.unrecovered = r.recoveries, append([]string(nil), r.unrecovered...)
	rep.lagMissed = append([]chaosMissed(nil), r.lagMissed...)
	own := map[string]bool{}
	for _, j := range r.plan.jobs {
		own[j.name] = true
	}
	for _, j := range r.plan.allJobs() {
		switch {
		case r.submitted[j.name]:
			rep.submitted++
		case own[j.name] || r.notes[j.name] != "":
			rep.lost = append(rep.lost, fmt.Sprintf("%s: %s", j.name, r.notes[j.name]))
		}
		// A fault's job the fault did not get to submit is not lost.
	}
	r.mu.Unlock()
	for _, p := range r.procs() {
		for range p.deaths {
			rep.deaths = append(rep.deaths, p.name)
		}
	}

	// The jobs: final states, preemptions, and why the open ones are open.
	var names []string
	for _, j := range r.plan.allJobs() {
		if _, ok := final[j.name]; ok {
			names = append(names, j.name)
		}
	}
	// Each describe writes its own slot; final is written back after, so no
	// goroutine reads the map while another writes it.
	fresh := make([]chaosJobInfo, len(names))
	for i, name := range names {
		fresh[i] = final[name]
	}
	parallel(len(names), 8, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ji := fresh[i]
		if described, err := r.describeJob(ctx, names[i]); err == nil {
			ji = described
		}
		if ji.found {
			st, err := tqclient.New(r.c, nil).Status(ctx, names[i])
			if err == nil {
				ji.st = &st
			} else {
				ji.queryErr = err
			}
		}
		fresh[i] = ji
	})
	for i, name := range names {
		final[name] = fresh[i]
	}
	for _, name := range names {
		ji := final[name]
		state := ji.state
		terminal := ji.closed && protocol.JobState(state).Terminal()
		switch {
		case !ji.found:
			state = "(no workflow)"
			rep.lost = append(rep.lost, name+": its workflow does not exist")
		case ji.closed && !terminal:
			state = fmt.Sprintf("%s (workflow %s)", chaosOrNone(state), ji.status)
			rep.lost = append(rep.lost, fmt.Sprintf("%s: the workflow closed as %s in state %s", name, ji.status, chaosOrNone(ji.state)))
		case !ji.closed:
			state = chaosOrNone(state) + " (open)"
			text := name + ": " + chaosStuckText(ji)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			for _, l := range chaosDiagnose(ctx, r.c, name, time.Now()) {
				text += "\n  " + l
			}
			cancel()
			rep.stuck = append(rep.stuck, text)
		}
		rep.states[state]++
		if ji.st == nil {
			if ji.found {
				rep.unqueried++
			}
			continue
		}
		rep.restarts += ji.st.Restarts
		for _, a := range ji.st.Attempts {
			if a.Preemptor != nil {
				rep.preemptions++
			}
		}
	}

	// The allocator must show every GPU free: awaited for a while, since the
	// last releases may still be on their way.
	r.checkGPUs(rep)

	// Worker processes still alive.
	if live, err := testenv.LiveWorkers(r.dataDir); err != nil {
		rep.problems = append(rep.problems, "could not look for live worker processes: "+err.Error())
	} else {
		for _, w := range live {
			ji, ok := final[w.Key.Job]
			switch {
			case ok && ji.found && !ji.closed && int64(w.Key.Attempt) >= ji.attempt:
				rep.unfinished++
			default:
				why := "its job has ended"
				if ok && !ji.closed {
					why = fmt.Sprintf("its job is on attempt %d", ji.attempt)
				}
				rep.orphans = append(rep.orphans, fmt.Sprintf("%s: process group %d (pids %v) is alive; %s", w.Key, w.PGID, w.PIDs, why))
			}
		}
	}

	rep.strays = r.liveStrays(final)

	// The server's histories.
	rep.server = r.checkServer()
	rep.fencedHealthy = fencedHealthy(rep.lagMissed, rep.server.fenceStops)

	// The records: overlapping holds, duplicate executions.
	f, err := os.Open(r.records)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		rep.holds.Anomalies = append(rep.holds.Anomalies, "no worker wrote a record: "+r.records+" does not exist")
	case err != nil:
		rep.holds.Anomalies = append(rep.holds.Anomalies, err.Error())
	default:
		evs, anomalies, err := testenv.ParseHoldRecords(f)
		_ = f.Close()
		if err != nil {
			anomalies = append(anomalies, "reading the records: "+err.Error())
		}
		rep.holds = testenv.CheckHolds(evs, testenv.ExitTimes(r.dataDir), time.Now())
		rep.holds.Anomalies = append(anomalies, rep.holds.Anomalies...)
	}
	rep.wall = time.Since(r.begin)
	return rep
}

// chaosStray is a live stray process (chaosStrayMark) of one run.
type chaosStray struct {
	pid     int
	job     string
	attempt int64
}

// chaosStrayProcs is the live stray processes of the run whose records
// file is records.
func chaosStrayProcs(records string) []chaosStray {
	var out []chaosStray
	mark := []byte(chaosStrayMark + records + " ")
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range cmdlines {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasPrefix(b, mark) {
			continue
		}
		s := chaosStray{}
		// argv[0] is "<mark><records> <job> <attempt>", then NUL and the sleep's argument.
		arg0, _, _ := bytes.Cut(b[len(mark):], []byte{0})
		if _, err := fmt.Sscanf(string(arg0), "%s %d", &s.job, &s.attempt); err != nil {
			continue
		}
		s.pid, _ = strconv.Atoi(filepath.Base(filepath.Dir(path)))
		out = append(out, s)
	}
	return out
}

// liveStrays names the run's stray processes still alive whose worker has
// ended (their job is closed, or on a later attempt), and kills each, so
// that none outlives the run.
func (r *chaosRun) liveStrays(final map[string]chaosJobInfo) []string {
	var out []string
	for _, s := range chaosStrayProcs(r.records) {
		if ji, ok := final[s.job]; ok && !ji.closed && s.attempt >= ji.attempt {
			continue // its worker may still run
		}
		out = append(out, fmt.Sprintf("pid %d, of %s attempt %d, is alive after its worker ended", s.pid, s.job, s.attempt))
		_ = syscall.Kill(s.pid, syscall.SIGKILL)
	}
	return out
}

func chaosOrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// chaosStuckText says where an open job stands.
func chaosStuckText(ji chaosJobInfo) string {
	if ji.st == nil {
		return fmt.Sprintf("%s, attempt %d (status query failed: %v)", chaosOrNone(ji.state), ji.attempt, ji.queryErr)
	}
	st := ji.st
	parts := []string{fmt.Sprintf("%s, attempt %d, restarts %d/%d", st.State, st.Attempt, st.Restarts, st.MaxRetry)}
	if st.Reason != "" {
		parts = append(parts, "waiting: "+st.Reason)
	}
	if st.Message != "" {
		parts = append(parts, "message: "+st.Message)
	}
	if n := len(st.Attempts); n > 0 {
		a := st.Attempts[n-1]
		if len(a.Placement) > 0 {
			var p []string
			for _, w := range a.Placement {
				p = append(p, fmt.Sprintf("w%d@%s%v", w.Worker, w.Node, w.GPUs))
			}
			parts = append(parts, "placement "+strings.Join(p, " "))
		}
	}
	return strings.Join(parts, "; ")
}

// checkGPUs asks the allocator's queue query until every GPU is free and
// no job runs or waits, for up to 30 seconds, and reports the last answer.
func (r *chaosRun) checkGPUs(rep *chaosReport) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, err := tqclient.New(r.c, nil).Queue(ctx, chaosRegion, chaosAllocation)
		cancel()
		if err == nil {
			rep.gpusNotFree, rep.gpuProblem = 0, ""
			var nodes []string
			free, total := 0, 0
			for _, n := range v.Nodes {
				free += n.FreeGPUs
				total += n.GPUs
				rep.gpusNotFree += n.GPUs - n.FreeGPUs
				if n.FreeGPUs != n.GPUs {
					nodes = append(nodes, fmt.Sprintf("%s %d/%d free (allocated %d, releasing %d)", n.Name, n.FreeGPUs, n.GPUs, n.AllocatedGPUs, n.ReleasingGPUs))
				}
			}
			var running []string
			for _, j := range v.Running {
				running = append(running, fmt.Sprintf("%s#%d", j.Job, j.Attempt))
			}
			if len(v.Running) > 0 || v.WaitingTotal > 0 {
				rep.gpuProblem = fmt.Sprintf("%d (%d jobs hold capacity, %d wait)", rep.gpusNotFree, len(v.Running), v.WaitingTotal)
			}
			rep.gpuText = fmt.Sprintf("%d/%d GPUs free", free, total)
			if len(nodes) > 0 {
				rep.gpuText += "; " + strings.Join(nodes, "; ")
			}
			if len(running) > 0 {
				sort.Strings(running)
				rep.gpuText += "; holding capacity: " + strings.Join(running, " ")
			}
			if v.WaitingTotal > 0 {
				rep.gpuText += fmt.Sprintf("; waiting: %d jobs (%s)", v.WaitingTotal, chaosCounts(v.WaitingByClass))
			}
			c := v.Counters
			rep.counters = &c
			if rep.gpuProblem == "" && rep.gpusNotFree == 0 {
				return
			}
		} else {
			rep.gpuProblem = "unknown: " + err.Error()
			if errors.Is(err, tqclient.ErrNoAllocator) {
				rep.gpuProblem = "unknown: the allocator is not running"
			}
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// chaosCampaignSummary is the campaign's table: one row per seed, then the
// faults and the required figures summed over the seeds.
func chaosCampaignSummary(size chaosSize, seeds []uint64, reports []*chaosReport) string {
	var b strings.Builder
	failed := 0
	for _, rep := range reports {
		if len(rep.failedFigures()) > 0 {
			failed++
		}
	}
	fmt.Fprintf(&b, "### trainq chaos campaign: %s size, %d seeds (%s): %d passed, %d failed, %d did not finish\n\n",
		size.name, len(seeds), chaosSeedList(seeds), len(reports)-failed, failed, len(seeds)-len(reports))
	b.WriteString("| seed | verdict | wall | faults | failed figures |\n|---|---|---|---|---|\n")
	injected := map[chaosFaultKind]int{}
	sums := map[string]int{}
	var names []string
	for _, rep := range reports {
		verdict := "PASS"
		ff := rep.failedFigures()
		if len(ff) > 0 {
			verdict = "**FAIL**"
		}
		for k, n := range rep.injected {
			injected[k] += n
		}
		for _, f := range rep.figures() {
			if f.required {
				if _, ok := sums[f.name]; !ok {
					names = append(names, f.name)
				}
				n := 0
				if !f.ok {
					_, _ = fmt.Sscan(f.value, &n)
					n = max(n, 1)
				}
				sums[f.name] += n
			}
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", rep.plan.seed, verdict, rep.wall.Round(time.Second),
			chaosKindCounts(rep.injected), strings.ReplaceAll(strings.Join(ff, "; "), "|", "\\|"))
	}
	fmt.Fprintf(&b, "\nFaults injected over the campaign: %s.\n\n", chaosKindCounts(injected))
	b.WriteString("| required figure | sum over the seeds |\n|---|---|\n")
	for _, n := range names {
		fmt.Fprintf(&b, "| %s | %d |\n", n, sums[n])
	}
	return b.String()
}

func chaosSeedList(seeds []uint64) string {
	var parts []string
	for _, s := range seeds {
		parts = append(parts, fmt.Sprint(s))
	}
	return strings.Join(parts, ",")
}
