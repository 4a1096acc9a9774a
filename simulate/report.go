package simulate

import (
	"encoding/json"
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

// Seconds is a duration that encodes in JSON as a number of seconds.
type Seconds time.Duration

func (s Seconds) MarshalJSON() ([]byte, error) {
	return json.Marshal(math.Round(time.Duration(s).Seconds()*1e6) / 1e6)
}

// D is the duration.
func (s Seconds) D() time.Duration { return time.Duration(s) }

// Row is the figures of one group of jobs (a class, a size, or all).
type Row struct {
	Name string `json:"name"`
	Jobs int    `json:"jobs"`
	// Waits are per job: the time it spent queued over all its attempts (submission to start,
	// plus every re-queue to restart). Jobs that could never fit the pool are not counted.
	WaitP50 Seconds `json:"wait_p50"`
	WaitP95 Seconds `json:"wait_p95"`
	WaitP99 Seconds `json:"wait_p99"`
	WaitMax Seconds `json:"wait_max"`
	// WaitsPastStop counts the jobs that waited longer than the stop delay + 5 s in all
	// (Options.StopDelay + PastStopSlack): the preemption target bounds the high ones' p95 so.
	WaitsPastStop int `json:"waits_past_stop_delay,omitempty"`
	// UsefulGPUHours is the work of the completed jobs; LostGPUHours the work preemption threw
	// away (progress since the attempt started, or since its last checkpoint).
	UsefulGPUHours float64 `json:"useful_gpu_hours"`
	LostGPUHours   float64 `json:"lost_gpu_hours"`
	LostPct        float64 `json:"lost_pct"` // of useful
	// Preemptions of jobs of this group; ForNothing those whose preemptor then started on nodes
	// where the victim did not run (elsewhere), unless the victim's capacity was taken over:
	// TakenOver counts those where, before the preemptor started, a job of a higher class than
	// the preemptor started on the victim's nodes (rule 7: a strictly higher class may take over
	// the capacity nominated to a preemptor, which then waits for other capacity).
	Preemptions int `json:"preemptions"`
	ForNothing  int `json:"preemptions_for_nothing"`
	TakenOver   int `json:"preemptions_taken_over,omitempty"`
	MaxPerJob   int `json:"max_preemptions_of_one_job"`
	// Honoured counts the preemptions whose victim saved on the notice and exited (it lost nothing).
	Honoured   int `json:"notices_honoured,omitempty"`
	GivenUp    int `json:"given_up,omitempty"` // preempted more than max_retry times
	Rejected   int `json:"rejected,omitempty"` // could never fit the pool
	Unfinished int `json:"unfinished,omitempty"`
}

// Timing is what the Schedule calls cost in wall-clock time.
type Timing struct {
	Calls int     `json:"calls"`
	Total Seconds `json:"total"`
	Mean  Seconds `json:"mean"`
	P99   Seconds `json:"p99"`
	Max   Seconds `json:"max"`
}

// Result is one policy's run.
type Result struct {
	Policy   Policy  `json:"policy"`
	Options  Options `json:"options"`
	Workload string  `json:"workload"`
	Nodes    int     `json:"nodes"`
	GPUs     int     `json:"gpus"`
	Rows     []Row   `json:"rows"` // high, medium, low, then by size, then all
	// Makespan is from the first arrival to the last job's end.
	Makespan Seconds `json:"makespan"`
	// Utilisation is the GPU-time held by jobs (running or stopping) over GPUs × makespan;
	// UsefulUtilisation counts only the work of completed jobs.
	Utilisation       float64 `json:"utilisation"`
	UsefulUtilisation float64 `json:"useful_utilisation"`
	Schedule          Timing  `json:"schedule"`
	// PreemptorWait is how long the jobs that preempted others waited for them: from the first
	// preemption made for a job to its start, per start.
	PreemptorWait Waits `json:"preemptor_wait"`
	// Loans counts the attempts started on loan on a reservation's capacity; Yields those that
	// ran past their RunLimit there and gave it back, throwing away YieldLostGPUHours of work
	// (counted in the rows' preemptions and lost GPU-hours too).
	// Starvation is the check of the starvation bound (with backfill and starvation_after).
	Starvation        *StarvationBound `json:"starvation_bound,omitempty"`
	Loans             int              `json:"loans"`
	Yields            int              `json:"yields"`
	YieldLostGPUHours float64          `json:"yield_lost_gpu_hours"`
	// Moves counts the jobs moved out of a topology domain for a gang that requires one
	// (scheduler.Preemption.Move), throwing away MoveLostGPUHours of work (none when they honour
	// their notice).
	Moves            int     `json:"moves,omitempty"`
	MoveLostGPUHours float64 `json:"move_lost_gpu_hours,omitempty"`
	// MostMovesOfOneJob is the most times one job was moved, and ClosestMovesOfOneJob the
	// shortest time between two moves of one job (absent while no job was moved twice): a job
	// is moved only once its attempt has run min_runtime_before_move.
	MostMovesOfOneJob    int     `json:"most_moves_of_one_job,omitempty"`
	ClosestMovesOfOneJob Seconds `json:"closest_moves_of_one_job,omitempty"`
	// Honor is the share of jobs that honoured preemption notices in this run (see Options.Honor).
	Honor float64 `json:"honor,omitempty"`
	// Teams are the figures per workspace, when the jobs have workspaces.
	Teams []TeamRow `json:"teams,omitempty"`
	// CapExplains is how many Pool.Explain calls it took to count TeamRow.CapHits.
	CapExplains int `json:"cap_explains,omitempty"`
	// SizeWaits are the waits per class and size (no GPU, 1, 2-3, 4-7, 8+ GPUs).
	SizeWaits []SizeWaits `json:"waits_by_size,omitempty"`
	// Longest is the longest waiter of each class, and what held it back.
	Longest []Waiter `json:"longest_waiters,omitempty"`
	// ETA is the expected-start measurement (Options.Estimates).
	ETA *ETAReport `json:"eta,omitempty"`
	// Gangs are the figures of the jobs of two or more workers, if any.
	Gangs *GangStats `json:"gangs,omitempty"`
}

// Waits summarises a set of waits.
type Waits struct {
	N   int     `json:"n"`
	P50 Seconds `json:"p50"`
	P95 Seconds `json:"p95"`
	Max Seconds `json:"max"`
}

func waitsOf(ws []time.Duration) Waits {
	s := slices.Sorted(slices.Values(ws))
	out := Waits{N: len(s), P50: Seconds(quantile(s, 0.5)), P95: Seconds(quantile(s, 0.95))}
	if len(s) > 0 {
		out.Max = Seconds(s[len(s)-1])
	}
	return out
}

// Row returns the row named name (or the zero Row).
func (r *Result) Row(name string) Row {
	for _, x := range r.Rows {
		if x.Name == name {
			return x
		}
	}
	return Row{Name: name}
}

// PastStopSlack is what Row.WaitsPastStop allows beyond the stop delay.
const PastStopSlack = 5 * time.Second

// Row names besides the classes.
const (
	RowAll    = "all"
	RowNoGPU  = "no GPU"
	Row1GPU   = "1 GPU"
	Row2GPU   = "2-3 GPUs"
	Row4GPU   = "4+ GPUs"
	rowsFirst = 3 // class rows come first
)

func sizeRow(gpus int) string {
	switch {
	case gpus == 0:
		return RowNoGPU
	case gpus == 1:
		return Row1GPU
	case gpus < 4:
		return Row2GPU
	}
	return Row4GPU
}

type acc struct {
	row   Row
	waits []time.Duration
}

// finish computes the row's wait quantiles and lost share from what was accumulated.
func (a *acc) finish() Row {
	slices.Sort(a.waits)
	a.row.WaitP50, a.row.WaitP95, a.row.WaitP99 = Seconds(quantile(a.waits, 0.50)), Seconds(quantile(a.waits, 0.95)), Seconds(quantile(a.waits, 0.99))
	if len(a.waits) > 0 {
		a.row.WaitMax = Seconds(a.waits[len(a.waits)-1])
	}
	if a.row.UsefulGPUHours > 0 {
		a.row.LostPct = 100 * a.row.LostGPUHours / a.row.UsefulGPUHours
	}
	return a.row
}

func (s *sim) result(first time.Duration) *Result {
	names := []string{scheduler.High.String(), scheduler.Medium.String(), scheduler.Low.String(), RowNoGPU, Row1GPU, Row2GPU, Row4GPU, RowAll}
	accs := make([]acc, len(names))
	for i := range accs {
		accs[i].row.Name = names[i]
	}
	pos := func(name string) int { return slices.Index(names, name) }
	end := first
	for i := range s.jobs {
		j, st := &s.w.Jobs[i], &s.jobs[i]
		end = max(end, st.endedAt)
		for _, k := range []int{2 - int(j.Class), pos(sizeRow(j.GPUs())), len(names) - 1} {
			a := &accs[k]
			a.row.Jobs++
			switch st.phase {
			case phRejected:
				a.row.Rejected++
				continue
			case phDone:
				a.row.UsefulGPUHours += j.Runtime.Hours() * float64(j.GPUs())
			case phGivenUp:
				a.row.GivenUp++
			default:
				a.row.Unfinished++
			}
			a.waits = append(a.waits, st.waited)
			if st.waited > s.opt.StopDelay+PastStopSlack {
				a.row.WaitsPastStop++
			}
			a.row.LostGPUHours += st.lost / 3600
			a.row.Preemptions += st.preempted
			a.row.Honoured += st.honoured
			a.row.MaxPerJob = max(a.row.MaxPerJob, st.preempted)
		}
	}
	for _, p := range s.preempts {
		if !p.forNothing && !p.takenOver {
			continue
		}
		j := &s.w.Jobs[p.victim]
		for _, k := range []int{2 - int(j.Class), pos(sizeRow(j.GPUs())), len(names) - 1} {
			if p.forNothing {
				accs[k].row.ForNothing++
			} else {
				accs[k].row.TakenOver++
			}
		}
	}
	res := &Result{Policy: s.pol, Options: s.opt, Workload: s.w.Name, Nodes: len(s.w.Nodes), GPUs: s.w.GPUs()}
	for i := range accs {
		if accs[i].row.Jobs > 0 {
			res.Rows = append(res.Rows, accs[i].finish())
		}
	}
	res.Makespan = Seconds(end - first)
	if gpuSeconds := float64(res.GPUs) * (end - first).Seconds(); gpuSeconds > 0 {
		res.Utilisation = s.heldArea / gpuSeconds
		res.UsefulUtilisation = res.Row(RowAll).UsefulGPUHours * 3600 / gpuSeconds
	}
	res.Schedule = timing(s.schedTimes)
	res.PreemptorWait = waitsOf(s.preemptorWaits)
	res.Loans, res.Yields, res.YieldLostGPUHours = s.loans, s.yields, s.yieldLost/3600
	if s.boundChecked() {
		b := s.bound
		res.Starvation = &b
	}
	res.Moves, res.MoveLostGPUHours = s.moves, s.moveLost/3600
	res.MostMovesOfOneJob, res.ClosestMovesOfOneJob = s.mostMoves, Seconds(s.closestMoves)
	res.Gangs = s.gangStats()
	if s.pol.Scheduler.PreemptionNotice > 0 {
		res.Honor = s.pol.HonorShare(s.opt)
	}
	res.Teams, res.CapExplains = s.teams.rows(s), s.teams.explains
	return res
}

// quantile is the nearest-rank quantile of sorted values.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}

func timing(ts []time.Duration) Timing {
	t := Timing{Calls: len(ts)}
	if len(ts) == 0 {
		return t
	}
	var total time.Duration
	for _, d := range ts {
		total += d
	}
	s := slices.Sorted(slices.Values(ts))
	t.Total, t.Mean, t.P99, t.Max = Seconds(total), Seconds(total/time.Duration(len(ts))), Seconds(quantile(s, 0.99)), Seconds(s[len(s)-1])
	return t
}

// Dur formats a simulated duration compactly: 0s, 42s, 7m42s, 3h12m, 8.6d.
func Dur(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%.1fd", d.Hours()/24)
}

// wall formats a wall-clock cost: 850ns, 12µs, 3.4ms, 1.20s.
func wall(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// Describe says what a policy is, e.g. "best-effort-fifo, min_runtime_before_preemption 1h".
func (p Policy) Describe() string {
	q := p.Scheduler.Queueing
	if q == "" {
		q = scheduler.BestEffortFIFO
	}
	parts := []string{string(q)}
	if p.NoPriorities {
		parts = append(parts, "no priorities (every job medium, no preemption)")
	}
	parts = append(parts, policyKnobs(p.Scheduler)...)
	if p.Honor != nil {
		parts = append(parts, fmt.Sprintf("%g%% of jobs honour notices", 100**p.Honor))
	}
	if p.NoHonorsNotice {
		parts = append(parts, "requests never say HonorsNotice")
	}
	return strings.Join(parts, ", ")
}

// WriteMarkdown prints one table per policy, then a side-by-side summary of the figures the
// policy targets are judged by (against the first policy, the baseline).
func WriteMarkdown(w io.Writer, rs []*Result) {
	if len(rs) == 0 {
		return
	}
	r0 := rs[0]
	o := r0.Options
	retry := "unlimited"
	if o.MaxRetry >= 0 {
		retry = fmt.Sprint(o.MaxRetry)
	}
	rerun := "from zero"
	if o.Checkpoint > 0 {
		rerun = "from the last checkpoint (every " + Dur(o.Checkpoint) + ")"
	}
	arrivals := "as in the trace"
	if o.Burst {
		arrivals = "all at once"
	}
	passes := "after every event and at the pool's NextWake, as the allocator's wake timer does"
	if o.EventsOnly {
		passes = "after every event only (no wake timer)"
	}
	notice := ""
	if slices.ContainsFunc(rs, func(r *Result) bool { return r.Policy.Scheduler.PreemptionNotice > 0 }) {
		notice = fmt.Sprintf(" Under a preemption notice the victim is told first: a job that honours notices (%g%% of them unless a policy says otherwise) saves and exits %s later, losing nothing; any other runs on to the deadline and is stopped %s after it.",
			100*o.Honor, Dur(o.saveTime()), Dur(o.StopDelay))
	}
	fmt.Fprintf(w, "Workload %s: %d jobs on %d nodes (%d GPUs); arrivals %s; a preempted job stops in %s and reruns %s, max_retry %s; Schedule runs %s.%s\n\n",
		r0.Workload, r0.Row(RowAll).Jobs, r0.Nodes, r0.GPUs, arrivals, Dur(o.StopDelay), rerun, retry, passes, notice)
	for _, r := range rs {
		fmt.Fprintf(w, "### %s (%s)\n\n", r.Policy.Name, r.Policy.Describe())
		fmt.Fprintln(w, "| jobs | n | wait p50 | p95 | p99 | longest | GPU-h lost (% of useful) | preemptions | for nothing | most of one job |")
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
		for _, row := range r.Rows {
			name := row.Name
			if row.Name == RowAll {
				name = "**all**"
			}
			n := fmt.Sprint(row.Jobs)
			if row.Rejected > 0 {
				n += fmt.Sprintf(" (%d never fit)", row.Rejected)
			}
			if row.GivenUp > 0 {
				n += fmt.Sprintf(" (%d gave up)", row.GivenUp)
			}
			if row.Unfinished > 0 {
				n += fmt.Sprintf(" (%d unfinished)", row.Unfinished)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %.1f (%.2f%%) | %d | %d (%s) | %d |\n", name, n,
				Dur(row.WaitP50.D()), Dur(row.WaitP95.D()), Dur(row.WaitP99.D()), Dur(row.WaitMax.D()),
				row.LostGPUHours, row.LostPct, row.Preemptions, row.ForNothing, pct(row.ForNothing, row.Preemptions), row.MaxPerJob)
		}
		s := r.Schedule
		fmt.Fprintf(w, "\nUtilisation %.1f%% (useful %.1f%%), makespan %s; Schedule: %d calls, %s in all, mean %s, p99 %s, max %s.\n",
			100*r.Utilisation, 100*r.UsefulUtilisation, Dur(r.Makespan.D()), s.Calls, wall(s.Total.D()), wall(s.Mean.D()), wall(s.P99.D()), wall(s.Max.D()))
		if pw := r.PreemptorWait; pw.N > 0 {
			all := r.Row(RowAll)
			fmt.Fprintf(w, "Preemptors waited for their victims (%d starts): p50 %s, p95 %s, longest %s", pw.N, Dur(pw.P50.D()), Dur(pw.P95.D()), Dur(pw.Max.D()))
			if r.Policy.Scheduler.PreemptionNotice > 0 {
				fmt.Fprintf(w, "; %d of %d victims saved on the notice", all.Honoured, all.Preemptions)
			}
			fmt.Fprint(w, ".\n")
		}
		if r.Moves > 0 {
			fmt.Fprintf(w, "Moves: %d jobs moved out of a topology domain for gangs that require one, losing %.1f GPU-h (in the preemptions and lost GPU-h above); at most %d of one job",
				r.Moves, r.MoveLostGPUHours, r.MostMovesOfOneJob)
			if r.ClosestMovesOfOneJob > 0 {
				fmt.Fprintf(w, "; the closest two moves of any one job %s apart", Dur(r.ClosestMovesOfOneJob.D()))
			}
			fmt.Fprint(w, ".\n")
		}
		if b := r.Starvation; b != nil && b.Starved > 0 {
			fmt.Fprintf(w, "Starvation bound (scheduler/doc.go, Starvation): requests starved as first of their class %d times; %d started within the bound, %d after it",
				b.Starved, b.Held, b.Broken)
			if b.Broken > 0 {
				fmt.Fprintf(w, " (the worst %s late)", time.Duration(b.WorstExcess).Round(time.Second))
			}
			if b.Unchecked > 0 {
				fmt.Fprintf(w, "; %d reserved nothing when they starved (no bound to judge)", b.Unchecked)
			}
			if b.Displaced > 0 {
				fmt.Fprintf(w, "; %d stopped being first before they started (their clocks restarted)", b.Displaced)
			}
			fmt.Fprintln(w, ".")
		}
		if r.Loans > 0 {
			fmt.Fprintf(w, "Loans: %d attempts started on a reservation's capacity by their run limits; %d ran past them and yielded, losing %.1f GPU-h (in the preemptions and lost GPU-h above).\n",
				r.Loans, r.Yields, r.YieldLostGPUHours)
		}
		fmt.Fprintln(w)
		writeTeams(w, r)
		writeSizeWaits(w, r)
		writeLongest(w, r)
		writeETA(w, r)
	}
	writeSummary(w, rs)
}

func pct(a, b int) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}

// writeSummary prints the figures the targets name, one column per policy.
func writeSummary(w io.Writer, rs []*Result) {
	fmt.Fprintf(w, "### Side by side (against %s)\n\n| |", rs[0].Policy.Name)
	for _, r := range rs {
		fmt.Fprintf(w, " %s |", r.Policy.Name)
	}
	fmt.Fprint(w, "\n|---|")
	for range rs {
		fmt.Fprint(w, "--:|")
	}
	fmt.Fprintln(w)
	line := func(label string, f func(r *Result) string) {
		fmt.Fprintf(w, "| %s |", label)
		for _, r := range rs {
			fmt.Fprintf(w, " %s |", f(r))
		}
		fmt.Fprintln(w)
	}
	base := rs[0]
	line("high wait p95", func(r *Result) string { return Dur(r.Row("high").WaitP95.D()) })
	line("high waits > stop delay + 5s", func(r *Result) string {
		h := r.Row("high")
		return fmt.Sprintf("%d (%s)", h.WaitsPastStop, pct(h.WaitsPastStop, h.Jobs-h.Rejected))
	})
	line("medium wait p95", func(r *Result) string { return Dur(r.Row("medium").WaitP95.D()) })
	line("low wait p95", func(r *Result) string { return Dur(r.Row("low").WaitP95.D()) })
	line("1-GPU wait p95", func(r *Result) string { return Dur(r.Row(Row1GPU).WaitP95.D()) })
	line("4+-GPU wait p95", func(r *Result) string { return Dur(r.Row(Row4GPU).WaitP95.D()) })
	perClass := func(f func(r *Result, class string) string) func(r *Result) string {
		return func(r *Result) string {
			var out []string
			for _, c := range []string{"high", "medium", "low"} {
				out = append(out, f(r, c))
			}
			return strings.Join(out, " / ")
		}
	}
	line("longest wait high / medium / low", perClass(func(r *Result, c string) string { return Dur(r.Row(c).WaitMax.D()) }))
	if len(base.SizeWaits) > 0 {
		line("4+-GPU wait p95 high / medium / low", perClass(func(r *Result, c string) string {
			k := slices.IndexFunc(r.SizeWaits, func(x SizeWaits) bool { return x.Class == c && x.Size == Row4GPU })
			if k < 0 {
				return "-"
			}
			return Dur(r.SizeWaits[k].P95.D())
		}))
	}
	line("4+-GPU / 1-GPU p95", func(r *Result) string {
		a, b := r.Row(Row4GPU).WaitP95.D(), r.Row(Row1GPU).WaitP95.D()
		if b == 0 {
			if a == 0 {
				return "1.0×"
			}
			return "∞"
		}
		return fmt.Sprintf("%.1f×", float64(a)/float64(b))
	})
	line("GPU-h lost, % of useful", func(r *Result) string { return fmt.Sprintf("%.2f%%", r.Row(RowAll).LostPct) })
	line("preemptions", func(r *Result) string { return fmt.Sprint(r.Row(RowAll).Preemptions) })
	line("for nothing", func(r *Result) string {
		a := r.Row(RowAll)
		text := fmt.Sprintf("%d (%s)", a.ForNothing, pct(a.ForNothing, a.Preemptions))
		if a.TakenOver > 0 {
			text += fmt.Sprintf("; %d taken over", a.TakenOver)
		}
		return text
	})
	line("most preemptions of one job", func(r *Result) string { return fmt.Sprint(r.Row(RowAll).MaxPerJob) })
	if slices.ContainsFunc(rs, func(r *Result) bool { return r.Policy.Scheduler.PreemptionNotice > 0 }) {
		line("jobs honouring notices", func(r *Result) string {
			if r.Policy.Scheduler.PreemptionNotice <= 0 || r.Policy.NoPriorities {
				return "-"
			}
			return fmt.Sprintf("%g%%", 100*r.Honor)
		})
		line("victims that saved on the notice", func(r *Result) string {
			a := r.Row(RowAll)
			return fmt.Sprintf("%d (%s)", a.Honoured, pct(a.Honoured, a.Preemptions))
		})
	}
	if slices.ContainsFunc(rs, func(r *Result) bool { return r.Gangs != nil }) {
		line("gangs in one rack / block", func(r *Result) string {
			g := r.Gangs
			if g == nil || g.Started == 0 {
				return "-"
			}
			return pct(g.OneRack, g.Started) + " / " + pct(g.OneBlock, g.Started)
		})
		line("gang wait p95 / longest", func(r *Result) string {
			if r.Gangs == nil || r.Gangs.Wait.N == 0 {
				return "-"
			}
			return Dur(r.Gangs.Wait.P95.D()) + " / " + Dur(r.Gangs.Wait.Max.D())
		})
		line("gangs never started", func(r *Result) string {
			if r.Gangs == nil {
				return "-"
			}
			return strconv.Itoa(r.Gangs.Count - r.Gangs.Started)
		})
		line("moves (GPU-h lost)", func(r *Result) string {
			return fmt.Sprintf("%d (%.1f)", r.Moves, r.MoveLostGPUHours)
		})
		line("most moves of one job / closest two of one job", func(r *Result) string {
			if r.MostMovesOfOneJob < 2 {
				return strconv.Itoa(r.MostMovesOfOneJob) + " / -"
			}
			return fmt.Sprintf("%d / %s", r.MostMovesOfOneJob, Dur(r.ClosestMovesOfOneJob.D()))
		})
	}
	line("preemptor wait p50 / p95", func(r *Result) string {
		if r.PreemptorWait.N == 0 {
			return "-"
		}
		return Dur(r.PreemptorWait.P50.D()) + " / " + Dur(r.PreemptorWait.P95.D())
	})
	line("utilisation", func(r *Result) string { return fmt.Sprintf("%.1f%%", 100*r.Utilisation) })
	line("makespan", func(r *Result) string { return Dur(r.Makespan.D()) })
	line("makespan vs "+base.Policy.Name, func(r *Result) string {
		if base.Makespan == 0 {
			return "-"
		}
		return fmt.Sprintf("%+.1f%%", 100*(float64(r.Makespan)/float64(base.Makespan)-1))
	})
	line("Schedule mean / max", func(r *Result) string { return wall(r.Schedule.Mean.D()) + " / " + wall(r.Schedule.Max.D()) })
	if len(base.Teams) <= maxTeamsSideBySide {
		for k, t := range base.Teams {
			line(t.Workspace+": high wait p95 / most high GPUs held / cap hits", func(r *Result) string {
				if k >= len(r.Teams) {
					return "-"
				}
				x := r.Teams[k]
				hits := "-"
				if len(r.Policy.Scheduler.Limits) > 0 {
					hits = fmt.Sprint(x.CapHits)
				}
				return fmt.Sprintf("%s / %d / %s", Dur(x.High.P95.D()), x.PeakGPUs[scheduler.High.String()], hits)
			})
		}
	}
	fmt.Fprintln(w)
}

// maxTeamsSideBySide bounds the workspaces the side-by-side summary has a line for.
const maxTeamsSideBySide = 10

// writeTeams prints the policy's table per workspace, when the jobs have workspaces.
func writeTeams(w io.Writer, r *Result) {
	if len(r.Teams) == 0 {
		return
	}
	capped := len(r.Policy.Scheduler.Limits) > 0
	fmt.Fprintln(w, "| workspace | jobs | useful GPU-h | share | high GPU-h | most high GPUs held | high jobs | high wait p50 / p95 | medium jobs | medium wait p50 / p95 | cap hits |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, t := range r.Teams {
		n := fmt.Sprint(t.Jobs)
		if t.Rejected > 0 {
			n += fmt.Sprintf(" (%d never fit)", t.Rejected)
		}
		peak := fmt.Sprint(t.PeakGPUs[scheduler.High.String()])
		if c := scheduler.LimitOf(r.Policy.Scheduler.Limits, t.Workspace, scheduler.High); c >= 0 && t.Workspace != NoWorkspace {
			peak += fmt.Sprintf(" (cap %d)", c)
		}
		hits := "-"
		if capped {
			hits = fmt.Sprint(t.CapHits)
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %.1f%% | %.1f | %s | %d | %s / %s | %d | %s / %s | %s |\n", t.Workspace, n,
			t.UsefulGPUHours, 100*t.Share, t.HighGPUHours, peak,
			t.High.N, Dur(t.High.P50.D()), Dur(t.High.P95.D()), t.Medium.N, Dur(t.Medium.P50.D()), Dur(t.Medium.P95.D()), hits)
	}
	fmt.Fprintln(w)
	if capped {
		fmt.Fprintf(w, "Cap hits are the jobs the pool said, at least once after a pass, wait on their workspace's cap (Pool.Explain; %d dry passes).\n\n", r.CapExplains)
	}
}

// writeSizeWaits prints the waits per class and size: p50 / p95 (jobs).
func writeSizeWaits(w io.Writer, r *Result) {
	if len(r.SizeWaits) == 0 {
		return
	}
	var sizes []string
	for _, b := range sizeBuckets {
		if slices.ContainsFunc(r.SizeWaits, func(x SizeWaits) bool { return x.Size == b }) {
			sizes = append(sizes, b)
		}
	}
	fmt.Fprint(w, "Waits by size, p50 / p95 (jobs):\n\n| class |")
	for _, b := range sizes {
		fmt.Fprintf(w, " %s |", b)
	}
	fmt.Fprint(w, "\n|---|")
	for range sizes {
		fmt.Fprint(w, "--:|")
	}
	fmt.Fprintln(w)
	for _, c := range []string{"high", "medium", "low"} {
		if !slices.ContainsFunc(r.SizeWaits, func(x SizeWaits) bool { return x.Class == c }) {
			continue
		}
		fmt.Fprintf(w, "| %s |", c)
		for _, b := range sizes {
			k := slices.IndexFunc(r.SizeWaits, func(x SizeWaits) bool { return x.Class == c && x.Size == b })
			if k < 0 {
				fmt.Fprint(w, " - |")
				continue
			}
			x := r.SizeWaits[k]
			fmt.Fprintf(w, " %s / %s (%d) |", Dur(x.P50.D()), Dur(x.P95.D()), x.N)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

// writeLongest prints the longest waiter of each class and the reason it was given longest.
func writeLongest(w io.Writer, r *Result) {
	if len(r.Longest) == 0 {
		return
	}
	fmt.Fprintln(w, "Longest waiters (the reason is the one Pool.Explain gave at most of the moments sampled in the wait):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| class | job | wait | GPUs | submitted | attempts | fits on | jobs seen there (by class; by GPUs) | reason most of the wait (share of samples) | waiting for | distinct reasons | last reason |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|---|---|---|---|--:|---|")
	for _, x := range r.Longest {
		last := x.LastReason
		if last == x.Reason {
			last = "(same)"
		}
		fits := fmt.Sprintf("%d of %d nodes", len(x.FitsOn), r.Nodes)
		if len(x.FitsOn) <= 3 {
			fits += " (" + strings.Join(x.FitsOn, ", ") + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | day %.1f | %d | %s | %s; %s | %s (%.0f%% of %d) | %s | %d | %s |\n", x.Class, x.Job, Dur(x.Wait.D()), x.GPUs,
			x.Submitted.D().Hours()/24, x.Attempts, fits, countsText(x.Holders, []string{"high", "medium", "low"}), countsText(x.HolderGPUs, nil), cell(x.Reason), 100*x.ReasonShare, x.Samples, cell(strings.Join(x.WaitingFor, ", ")), x.Reasons, cell(last))
	}
	fmt.Fprintln(w)
}

// cell makes text safe in a Markdown table cell.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.ReplaceAll(s, "|", "\\|")
}

// writeETA prints the expected-start errors of each estimates model and of the baseline.
func writeETA(w io.Writer, r *Result) {
	e := r.ETA
	if e == nil {
		return
	}
	sample := ""
	if e.Sample < 1 {
		sample = fmt.Sprintf(", sampled at %g%%", 100*e.Sample)
	}
	fmt.Fprintf(w, "Expected starts (Pool.Project), for the %d jobs whose first attempt waited %s or more (%d measured%s): error |expected − actual start| at submission and %s before the start; \"of wait\" divides it by the job's wait; \"late\" started after the expected start, \"now\" was expected to start at the very moment asked; unknown: no estimate / beyond the projection's bounds.\n\n",
		e.Waited, Dur(e.MinWait.D()), e.Measured, sample, Dur(e.Lead.D()))
	fmt.Fprintln(w, "| estimates | at submission: p50 | p90 | p50 of wait | p90 of wait | late | \"now\" | unknown | 10m before: p50 | p90 | p50 of wait | p90 of wait | unknown |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, m := range e.Models {
		a, b := m.AtSubmission, m.BeforeStart
		name := m.Name
		if m.WithEstimate > 0 || strings.HasPrefix(m.Name, string(EstimateLearned)) {
			name += fmt.Sprintf(" (%s carried one)", pct(m.WithEstimate, e.Measured))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %.0f%% | %.0f%% | %s | %s | %s | %s | %s | %s |\n", name,
			Dur(a.AbsP50.D()), Dur(a.AbsP90.D()), relText(a.RelP50), relText(a.RelP90), a.LatePct, a.NowPct, unknownText(a),
			Dur(b.AbsP50.D()), Dur(b.AbsP90.D()), relText(b.RelP50), relText(b.RelP90), unknownText(b))
	}
	fmt.Fprintln(w)
	for _, m := range e.Models {
		if a, b := m.RangeAtSubmission, m.RangeBeforeStart; a != nil || b != nil {
			fmt.Fprintf(w, "Ranges of %s (10th to 90th percentile): at submission %s; %s before the start %s; at submission, over every job that waited at all, %s.\n",
				m.Name, rangeText(a), Dur(e.Lead.D()), rangeText(b), rangeText(m.RangeEveryWaiter))
		}
	}
	fmt.Fprintln(w)
	var calls int
	var wallT time.Duration
	for _, m := range e.Models {
		calls += m.Projections
		wallT += m.ProjectWall.D()
	}
	if calls > 0 {
		fmt.Fprintf(w, "%d projections, %s in all (mean %s).\n\n", calls, wall(wallT), wall(wallT/time.Duration(calls)))
	}
	accuracy := false
	for _, m := range e.Models {
		if a := m.Accuracy; a != nil {
			fmt.Fprintf(w, "Estimates %s: %d jobs carried one; %.0f%% were shorter than the true runtime; estimate ÷ true runtime: median %.2f, p10 %.2f.\n",
				m.Name, a.Jobs, 100*a.Below, a.MedianRatio, a.P10Ratio)
			accuracy = true
		}
	}
	if accuracy {
		fmt.Fprintln(w)
	}
}

// rangeText says how one set of ranges held.
func rangeText(r *ETARange) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%.0f%% of %d ranged starts inside (%.0f%% of the known had one), median width %.0f%% of the wait", r.InsidePct, r.Ranged, r.RangedPct, r.WidthP50Pct)
}

func unknownText(x ETAErrors) string {
	n := x.NoEstimate + x.Horizon
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%.0f%% (%d / %d)", x.UnknownPct, x.NoEstimate, x.Horizon)
}

// countsText is "high 80, low 3" (keys in order, or numerically).
func countsText(m map[string]int, order []string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := order
	if keys == nil {
		keys = slices.SortedFunc(maps.Keys(m), compareNatural)
	}
	var parts []string
	for _, k := range keys {
		if n := m[k]; n > 0 {
			unit := k
			if order == nil {
				unit = k + "-GPU"
			}
			parts = append(parts, fmt.Sprintf("%s %d", unit, n))
		}
	}
	return strings.Join(parts, ", ")
}

// relText is a share in percent, "<1%" when it rounds to 0 but is not.
func relText(v float64) string {
	if v > 0 && v < 0.5 {
		return "<1%"
	}
	return fmt.Sprintf("%.0f%%", v)
}
