package simulate

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// What the expected-start measurement looks at: the jobs whose first attempt waited at least
// ETAMinWait, their expected start at submission and again ETALead before their actual start.
const (
	ETAMinWait = 10 * time.Minute
	ETALead    = 10 * time.Minute
	// DefaultRateWindow is the baseline's window: its admission rate is the starts in the last
	// hour.
	DefaultRateWindow = time.Hour
)

// BaselineName names the baseline model in ETAReport.Models, ForecastName the estimates model's
// projection corrected by the pool's record of its errors (scheduler.Pool.Forecast).
const (
	BaselineName = "position÷rate"
	ForecastName = "forecast"
)

// ETAErrors is how far one model's expected starts were from the actual starts, over the
// measured jobs (ETAReport.Measured).
type ETAErrors struct {
	// Known is the jobs that had an expected start; NoEstimate those whose start rested on a job
	// without a RunLimit (or, for the baseline, that had no admission in the window), Horizon
	// those it was beyond the projection's bounds for.
	Known      int     `json:"known"`
	NoEstimate int     `json:"unknown_no_estimate"`
	Horizon    int     `json:"unknown_beyond_horizon"`
	UnknownPct float64 `json:"unknown_pct"`
	// AbsP50 and AbsP90 are the nearest-rank quantiles of |expected − actual start| over the
	// known; RelP50 and RelP90 those of |expected − actual| ÷ the job's wait (submission to
	// its first start), in percent.
	AbsP50 Seconds `json:"abs_error_p50"`
	AbsP90 Seconds `json:"abs_error_p90"`
	RelP50 float64 `json:"rel_error_p50_pct"`
	RelP90 float64 `json:"rel_error_p90_pct"`
	// Late is the known jobs that started later than expected; LatePct of Known.
	Late    int     `json:"late"`
	LatePct float64 `json:"late_pct"`
	// Now is the known jobs expected to start at the very moment asked (as if they could start
	// at once; with estimates, mostly because a running job past its RunLimit is taken to end
	// then), NowPct of Known.
	Now    int     `json:"now"`
	NowPct float64 `json:"now_pct"`
}

// ETAModel is one model's errors at submission and ETALead before the start.
type ETAModel struct {
	Name         string    `json:"estimates"`
	AtSubmission ETAErrors `json:"at_submission"`
	BeforeStart  ETAErrors `json:"before_start"`
	// WithEstimate (learned) is the measured jobs that carried an estimate at submission.
	WithEstimate int `json:"with_estimate,omitempty"`
	// Accuracy is how the model's estimates compared with the true runtimes, over every job
	// that carried one (not only the measured jobs).
	Accuracy *EstimateAccuracy `json:"accuracy,omitempty"`
	// RangeAtSubmission and RangeBeforeStart say how the forecast's ranges held.
	RangeAtSubmission *ETARange `json:"range_at_submission,omitempty"`
	RangeBeforeStart  *ETARange `json:"range_before_start,omitempty"`
	// RangeEveryWaiter is RangeAtSubmission over every job that waited after its submission's
	// pass, however briefly (in the sample): whether a job will wait long is not known when asked.
	RangeEveryWaiter *ETARange `json:"range_every_waiter,omitempty"`
	// Projections counts the Pool.Project calls, ProjectWall what they cost in wall-clock time.
	Projections int     `json:"projections,omitempty"`
	ProjectWall Seconds `json:"project_wall,omitempty"`
}

// ETAReport is the expected-start measurement of a run (Options.Estimates).
type ETAReport struct {
	MinWait    Seconds `json:"min_wait"`
	Lead       Seconds `json:"lead"`
	Sample     float64 `json:"sample"`
	RateWindow Seconds `json:"rate_window"`
	// Waited is the jobs whose first attempt waited at least MinWait; Measured those of them in
	// the sample: every figure is over these.
	Waited   int `json:"waited"`
	Measured int `json:"measured"`
	// Models are the Options.Estimates models, then the baseline (BaselineName): the job's
	// position in the queue ÷ the admissions per hour over the last RateWindow.
	Models []ETAModel `json:"models"`
}

// etaPred is one expected start: at (since Epoch), or unknown.
type etaPred struct {
	at      time.Duration
	asked   time.Duration // when it was asked
	set     bool
	unknown uint8 // 0 known, 1 no estimate, 2 beyond the projection's bounds
	// lo and hi are the forecast's range (Pool.Forecast), when ranged.
	lo, hi time.Duration
	ranged bool
}

// etaRun measures expected starts in a replay of a run (plain) whose waits it knows.
type etaRun struct {
	measured   []bool
	submitAt   []time.Duration // the first attempt's queueing, from the plain run
	sub, bef   []etaPred       // the model's
	fsub, fbef []etaPred       // the forecast's (the model's projection corrected by the pool's record)
	fall       []etaPred       // the forecast's at submission, of the jobs that waited but are not measured
	bsub, bbef []etaPred       // the baseline's
	calls      int
	wall       time.Duration
	err        error
}

// sampled reports whether job id is in the ETA sample (share p of the jobs).
func sampled(seed uint64, id string, p float64) bool {
	if p <= 0 || p >= 1 {
		return true
	}
	return float64(idHash(seed^0x9e3779b97f4a7c15, id)>>11)/(1<<53) < p
}

// newETARun plans the probes of r from the plain run s: each measured job is projected when it
// is submitted and at its start less ETALead.
func newETARun(s, r *sim) *etaRun {
	n := len(s.jobs)
	e := &etaRun{measured: make([]bool, n), submitAt: make([]time.Duration, n),
		sub: make([]etaPred, n), bef: make([]etaPred, n), fsub: make([]etaPred, n), fbef: make([]etaPred, n), fall: make([]etaPred, n),
		bsub: make([]etaPred, n), bbef: make([]etaPred, n)}
	for i := range s.jobs {
		st := &s.jobs[i]
		if st.firstAt < 0 || len(st.spans) == 0 {
			continue
		}
		from := st.spans[0].from
		if st.firstAt-from < ETAMinWait || !sampled(s.opt.ETASeed, s.w.Jobs[i].ID, s.opt.ETASample) {
			continue
		}
		e.measured[i], e.submitAt[i] = true, from
		if t := st.firstAt - ETALead; t > from {
			r.push(t, evProbe, int32(i), 1, 0)
		}
	}
	return e
}

// stopBound is how long the projection lets a stopping job take.
func (s *sim) stopBound() time.Duration { return s.pol.Scheduler.PreemptionNotice + s.opt.StopDelay }

// project asks the pool when job i is expected to start: by the projection, and by the forecast
// that corrects it (Pool.Forecast).
func (e *etaRun) project(s *sim, i int32) (proj, forecast etaPred) {
	id := s.w.Jobs[i].ID
	start := s.opt.Clock()
	m, err := s.pool.Forecast(Epoch.Add(s.now), s.stopBound(), []string{id})
	e.wall += s.opt.Clock().Sub(start)
	e.calls++
	if err != nil {
		e.err = cmpOr(e.err, fmt.Errorf("project %s: %w", id, err))
		return etaPred{set: true, unknown: 2}, etaPred{set: true, unknown: 2}
	}
	x, ok := m[id]
	if !ok {
		e.err = cmpOr(e.err, fmt.Errorf("project %s: no answer for a waiting job", id))
		return etaPred{set: true, unknown: 2}, etaPred{set: true, unknown: 2}
	}
	raw := x.At
	if x.Samples > 0 { // corrected: the projection's own is beside it
		raw = x.Projected
	}
	proj = etaPred{set: true, asked: s.now}
	switch {
	case raw.IsZero() && strings.Contains(x.Because, "without a time limit"):
		proj.unknown = 1
	case raw.IsZero():
		proj.unknown = 2
	default:
		proj.at = raw.Sub(Epoch)
	}
	forecast = etaPred{set: true, asked: s.now, at: x.At.Sub(Epoch), ranged: !x.Earliest.IsZero()}
	if x.At.IsZero() {
		forecast = proj
	}
	if forecast.ranged {
		forecast.lo, forecast.hi = x.Earliest.Sub(Epoch), x.Latest.Sub(Epoch)
	}
	return proj, forecast
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// baseline is the visibility-API estimate for job i now: its position ÷ the admission rate.
func (e *etaRun) baseline(s *sim, i int32) etaPred {
	at, ok := baselineETA(s.now, s.position(i), s.starts, s.rateWindow())
	if !ok {
		return etaPred{set: true, unknown: 1}
	}
	return etaPred{at: at, asked: s.now, set: true}
}

func (s *sim) rateWindow() time.Duration {
	if s.opt.RateWindow > 0 {
		return s.opt.RateWindow
	}
	return DefaultRateWindow
}

// baselineETA is now + position ÷ (the starts in (now − window, now] per window); false when
// none started in the window. starts is sorted.
func baselineETA(now time.Duration, position int, starts []time.Duration, window time.Duration) (time.Duration, bool) {
	lo := sort.Search(len(starts), func(k int) bool { return starts[k] > now-window })
	hi := sort.Search(len(starts), func(k int) bool { return starts[k] > now })
	if hi <= lo {
		return 0, false
	}
	return now + time.Duration(float64(position)*float64(window)/float64(hi-lo)), true
}

// position is job i's 1-based place in the pool's launch order: the waiting requests of a higher
// class, and of its class with an earlier queue sequence, are ahead of it.
func (s *sim) position(i int32) int {
	c, pos := s.class(i), 1
	for k := range s.jobs {
		if s.jobs[k].phase != phWaiting || int32(k) == i {
			continue
		}
		if ck := s.class(int32(k)); ck > c || ck == c && k < int(i) {
			pos++
		}
	}
	return pos
}

// submitted measures job i just after its submission's pass.
func (e *etaRun) submitted(s *sim, i int32) {
	if s.jobs[i].phase != phWaiting || s.jobs[i].attempt != 1 {
		return
	}
	if !e.measured[i] {
		if sampled(s.opt.ETASeed, s.w.Jobs[i].ID, s.opt.ETASample) {
			_, e.fall[i] = e.project(s, i) // for the ranges' calibration over every job that waited
		}
		return
	}
	e.sub[i], e.fsub[i] = e.project(s, i)
	e.bsub[i] = e.baseline(s, i)
	if s.jobs[i].firstAt < 0 && !e.bef[i].set && e.submitAt[i]+ETALead >= s.firstAtPlan(i) {
		e.bef[i], e.fbef[i], e.bbef[i] = e.sub[i], e.fsub[i], e.bsub[i] // it starts ETALead after its submission: no later probe
	}
}

// probe measures job i ETALead before its start.
func (e *etaRun) probe(s *sim, i int32) {
	if st := &s.jobs[i]; st.phase == phWaiting && st.attempt == 1 {
		e.bef[i], e.fbef[i] = e.project(s, i)
		e.bbef[i] = e.baseline(s, i)
	}
}

// etaRec is one measured job's expected and actual start.
type etaRec struct {
	pred   etaPred
	actual time.Duration
	wait   time.Duration
}

// etaErrors summarises recs.
func etaErrors(recs []etaRec) ETAErrors {
	var out ETAErrors
	var abs []time.Duration
	var rel []float64
	for _, r := range recs {
		switch {
		case !r.pred.set || r.pred.unknown == 2:
			out.Horizon++
			continue
		case r.pred.unknown == 1:
			out.NoEstimate++
			continue
		}
		out.Known++
		if r.pred.at == r.pred.asked {
			out.Now++
		}
		d := r.actual - r.pred.at
		if d > 0 {
			out.Late++
		}
		if d < 0 {
			d = -d
		}
		abs = append(abs, d)
		if r.wait > 0 {
			rel = append(rel, 100*float64(d)/float64(r.wait))
		}
	}
	slices.Sort(abs)
	slices.Sort(rel)
	out.AbsP50, out.AbsP90 = Seconds(quantile(abs, 0.5)), Seconds(quantile(abs, 0.9))
	out.RelP50, out.RelP90 = quantileF(rel, 0.5), quantileF(rel, 0.9)
	if len(recs) > 0 {
		out.UnknownPct = 100 * float64(out.NoEstimate+out.Horizon) / float64(len(recs))
	}
	if out.Known > 0 {
		out.LatePct = 100 * float64(out.Late) / float64(out.Known)
		out.NowPct = 100 * float64(out.Now) / float64(out.Known)
	}
	return out
}

// quantileF is the nearest-rank quantile of sorted values.
func quantileF(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}

// models is what e measured in run r: the model's errors and the baseline's.
func (e *etaRun) models(r *sim, name string) (ETAModel, ETAModel, ETAModel) {
	var ms, mb, fs, fb, fa, bs, bb []etaRec
	for i := range r.jobs {
		if p := e.fall[i]; p.set && r.jobs[i].firstAt >= 0 {
			fa = append(fa, etaRec{p, r.jobs[i].firstAt, r.jobs[i].firstAt - r.jobs[i].spans[0].from})
		}
	}
	with := 0
	for i := range r.jobs {
		if !e.measured[i] {
			continue
		}
		st := &r.jobs[i]
		actual, wait := st.firstAt, st.firstAt-e.submitAt[i]
		ms = append(ms, etaRec{e.sub[i], actual, wait})
		mb = append(mb, etaRec{e.bef[i], actual, wait})
		fs = append(fs, etaRec{e.fsub[i], actual, wait})
		fa = append(fa, etaRec{e.fsub[i], actual, wait})
		fb = append(fb, etaRec{e.fbef[i], actual, wait})
		bs = append(bs, etaRec{e.bsub[i], actual, wait})
		bb = append(bb, etaRec{e.bbef[i], actual, wait})
		if st.hasEst {
			with++
		}
	}
	m := ETAModel{Name: name, AtSubmission: etaErrors(ms), BeforeStart: etaErrors(mb), Projections: e.calls, ProjectWall: Seconds(e.wall), Accuracy: r.estimateAccuracy()}
	if r.est.Kind == EstimateLearned {
		m.WithEstimate = with
	}
	f := ETAModel{Name: fmt.Sprintf("%s (%s)", ForecastName, name), AtSubmission: etaErrors(fs), BeforeStart: etaErrors(fb),
		RangeAtSubmission: etaRange(fs), RangeBeforeStart: etaRange(fb), RangeEveryWaiter: etaRange(fa)}
	b := ETAModel{Name: fmt.Sprintf("%s (%s)", BaselineName, Dur(r.rateWindow())), AtSubmission: etaErrors(bs), BeforeStart: etaErrors(bb)}
	return m, f, b
}

// ETARange is how well a model's ranges held: Ranged is the known expected starts that came with
// a range, InsidePct the share of them whose job started inside it, WidthP50 the median width of
// the range ÷ the job's wait, in percent.
type ETARange struct {
	Ranged      int     `json:"ranged"`
	RangedPct   float64 `json:"ranged_pct"`
	InsidePct   float64 `json:"inside_pct"`
	WidthP50Pct float64 `json:"width_p50_pct"`
}

// etaRange summarises the ranges of recs.
func etaRange(recs []etaRec) *ETARange {
	var out ETARange
	var widths []float64
	inside, known := 0, 0
	for _, r := range recs {
		if !r.pred.set || r.pred.unknown != 0 {
			continue
		}
		known++
		if !r.pred.ranged {
			continue
		}
		out.Ranged++
		if r.actual >= r.pred.lo && r.actual <= r.pred.hi {
			inside++
		}
		if r.wait > 0 {
			widths = append(widths, 100*float64(r.pred.hi-r.pred.lo)/float64(r.wait))
		}
	}
	if out.Ranged == 0 {
		return nil
	}
	slices.Sort(widths)
	out.RangedPct = 100 * float64(out.Ranged) / float64(known)
	out.InsidePct = 100 * float64(inside) / float64(out.Ranged)
	out.WidthP50Pct = quantileF(widths, 0.5)
	return &out
}

// measure replays the run s (which has played) once per estimates model, or once without, to
// measure expected starts and sample the longest waiters' reasons, and adds what it found to res.
func (s *sim) measure(res *Result) error {
	res.SizeWaits = s.sizeWaits()
	longest := s.longestWaiters()
	runs := s.opt.Estimates
	if len(runs) == 0 {
		if len(longest) == 0 {
			return nil
		}
		runs = []Estimates{{Kind: EstimateNone}}
	}
	var rep *ETAReport
	if len(s.opt.Estimates) > 0 {
		rep = &ETAReport{MinWait: Seconds(ETAMinWait), Lead: Seconds(ETALead), Sample: s.opt.ETASample, RateWindow: Seconds(s.rateWindow())}
		if rep.Sample <= 0 || rep.Sample > 1 {
			rep.Sample = 1
		}
	}
	var baseline ETAModel
	for k, m := range runs {
		r, err := newSim(s.w, s.pol, s.opt, m)
		if err != nil {
			return err
		}
		if rep != nil {
			r.eta = newETARun(s, r)
			r.firstPlan = s
		}
		if k == 0 && len(longest) > 0 {
			r.watch = newWatchRun(s, r, longest)
		}
		if _, err := r.loop(); err != nil {
			return err
		}
		if err := sameSchedule(s, r); err != nil {
			return fmt.Errorf("estimates %s: %w", m, err)
		}
		if r.watch != nil {
			res.Longest = r.watch.report(r)
		}
		if r.eta == nil {
			continue
		}
		if r.eta.err != nil {
			return r.eta.err
		}
		mm, fm, bm := r.eta.models(r, m.String())
		rep.Models = append(rep.Models, mm, fm)
		if k == 0 {
			baseline = bm
			for i := range r.eta.measured {
				if r.eta.measured[i] {
					rep.Measured++
				}
			}
			for i := range s.jobs {
				if st := &s.jobs[i]; st.firstAt >= 0 && len(st.spans) > 0 && st.firstAt-st.spans[0].from >= ETAMinWait {
					rep.Waited++
				}
			}
		}
	}
	if rep != nil {
		rep.Models = append(rep.Models, baseline)
		res.ETA = rep
	}
	return nil
}

// firstAtPlan is when job i's first attempt starts, from the plain run (-1: never).
func (s *sim) firstAtPlan(i int32) time.Duration {
	if s.firstPlan == nil {
		return s.jobs[i].firstAt
	}
	return s.firstPlan.jobs[i].firstAt
}

// sameSchedule checks that the replay r decided what the plain run s did: a RunLimit, a
// projection or an explanation must change no decision.
func sameSchedule(s, r *sim) error {
	for i := range s.jobs {
		a, b := &s.jobs[i], &r.jobs[i]
		if a.waited != b.waited || a.endedAt != b.endedAt || a.phase != b.phase || a.preempted != b.preempted || a.firstAt != b.firstAt {
			return fmt.Errorf("the replay decided otherwise than the plain run for %s (waited %s against %s): measuring changed the pool", s.w.Jobs[i].ID, Dur(b.waited), Dur(a.waited))
		}
	}
	return nil
}
