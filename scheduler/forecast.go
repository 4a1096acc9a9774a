package scheduler

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// An expected start from the projection alone is only as good as the runtime estimates it rests
// on, and learned estimates are often wrong both ways. So the pool keeps its own record of how
// wrong its expected starts have been: every ForecastSampleEvery it asks when some waiting
// requests (up to forecastFresh of those queued since the last sample, evenly spread, and one
// further along the queue in turn) are expected to start, by the projection and by their place in
// the queue ÷ the last hour's starts, and when they do start it keeps how long they really
// waited. Pool.Forecast then corrects a new projection by that record: it
// blends the projection with the queue-position figure in the proportion that erred least, shifts
// it by the record's median error, and gives the record's 10th to 90th percentile errors as the
// range (Expected.Earliest, Expected.Latest). The range is read from the samples asked with
// similar figures after a similar wait so far, counting those still waiting as censored (see
// fit); the point from the finished samples with similar figures. About 8 in 10 jobs start
// inside the range as long as the pool behaves as it did over its last ForecastKept samples;
// until it has ForecastMinSamples the pool gives the projection as it is, without a range.
const (
	ForecastSampleEvery = time.Minute
	// ForecastKept is how many finished samples the record keeps (the newest).
	ForecastKept = 512
	// ForecastMinSamples is how many finished samples a forecast needs before it corrects the
	// projection and gives a range.
	ForecastMinSamples = 20
	// ForecastRateWindow is the window of the queue-position figure's admission rate.
	ForecastRateWindow = time.Hour
	// forecastPending bounds the samples waiting for their job to start; while it is full the
	// pool takes no new one (dropping the oldest would drop the longest waits and bias the record
	// short).
	forecastPending = 512
	// forecastFresh is how many of the requests queued since the last sample the next one takes:
	// the record thins them evenly as they come (a burst of thousands is sampled across).
	forecastFresh     = 8
	forecastFreshKept = 64
	// forecastSampleEvents bounds a sample's projection: the allocator samples inside its
	// workflow task, and a projection that plays all of ProjectEvents on a long queue takes about
	// a second there. A sampled job the bound does not reach counts by its place in the queue.
	forecastSampleEvents = ProjectEvents / 5
	// forecastStarts bounds the start times kept for the admission rate.
	forecastStarts = 1024
	// forecastFloor is the scale below which two waits count as equally short: errors are ratios
	// of (wait + floor).
	forecastFloor = time.Minute
	// forecastNearShare: a forecast's errors are read from the 1 ÷ forecastNearShare of the
	// comparable samples nearest it (at least ForecastMinSamples).
	forecastNearShare = 4
)

// forecastRecord is the pool's record of its expected starts' errors.
type forecastRecord struct {
	last    time.Time // when the last sample was taken
	turn    int       // which waiting request the next sample takes besides the newest
	pending []forecastSample
	// sampled counts the pending samples per job (derived from pending: see reindex).
	sampled map[string]int
	done    []forecastSample // oldest first, at most ForecastKept
	starts  []time.Time      // the latest starts, oldest first, at most forecastStarts
	// dropped: starts older than the first kept were dropped.
	dropped bool
	// shift moves the quantile levels of the range's ends and of the point (forecastLevels) by
	// how the finished samples' own forecasts fared: a sample that started before its forecast's
	// 10th percentile lowers that level, one after raises it, so that over time about 1 in 10
	// starts before the range, 1 in 10 after it and half after the point, even when the pool's
	// waits drift away from what the record holds (adaptive conformal inference).
	shift [3]float64
	// fresh are requests queued since the last sample: one in every freshStride of them, at most
	// forecastFreshKept; freshSeen counts those queued.
	fresh       []string
	freshStride int
	freshSeen   int
}

// enqueued notes a request queued, for the next sample.
func (fc *forecastRecord) enqueued(job string) {
	fc.freshSeen++
	if fc.freshStride > 1 && fc.freshSeen%fc.freshStride != 0 {
		return
	}
	if len(fc.fresh) == forecastFreshKept { // keep every other and take half as many from now on
		for i := range forecastFreshKept / 2 {
			fc.fresh[i] = fc.fresh[2*i+1]
		}
		clear(fc.fresh[forecastFreshKept/2:])
		fc.fresh = fc.fresh[:forecastFreshKept/2]
		fc.freshStride = max(fc.freshStride, 1) * 2
	}
	fc.fresh = append(fc.fresh, job)
}

// forecastLevels are the quantile levels aimed at: the range's ends and the point.
var forecastLevels = [3]float64{0.1, 0.5, 0.9}

// forecastStep is how far one finished sample moves a level.
const forecastStep = 0.02

// forecastSample is what was expected, at Asked, of one waiting request, as waits from Asked
// (negative: unknown), and how long it then waited.
type forecastSample struct {
	job     string
	attempt int
	asked   time.Time
	// age is how long the request had waited when asked: a request asked at its submission
	// and one asked after a day in the queue err differently with the same figures.
	age    time.Duration
	proj   time.Duration
	naive  time.Duration
	actual time.Duration
	// bounds is what the forecast said when the sample was taken, in log space (ranged: it had
	// enough samples to say it).
	bounds [3]float64
	ranged bool
}

// SampleForecasts adds to the record of expected starts' errors if ForecastSampleEvery has passed
// since its last sample (stop is Project's). The allocator calls it after its passes; it changes
// no decision.
func (p *Pool) SampleForecasts(now time.Time, stop time.Duration) {
	fc := &p.forecast
	if len(p.waiting) == 0 || len(fc.pending) >= forecastPending || (!fc.last.IsZero() && now.Sub(fc.last) < ForecastSampleEvery) {
		return
	}
	fc.last = now
	defer fc.reindex()
	live := fc.pending[:0]
	for _, s := range fc.pending {
		if w := p.waitIdx[s.job]; w != nil && w.r.Attempt == s.attempt {
			live = append(live, s)
		}
	}
	clear(fc.pending[len(live):])
	fc.pending = live
	var jobs []string
	var fresh []string
	for _, job := range fc.fresh {
		if p.waitIdx[job] != nil && !slices.Contains(fresh, job) {
			fresh = append(fresh, job)
		}
	}
	for k := range min(len(fresh), forecastFresh) {
		jobs = append(jobs, fresh[k*len(fresh)/min(len(fresh), forecastFresh)])
	}
	clear(fc.fresh)
	fc.fresh, fc.freshStride, fc.freshSeen = fc.fresh[:0], 1, 0
	fc.turn = (fc.turn + 1) % len(p.waiting)
	if w := p.waiting[fc.turn]; !slices.Contains(jobs, w.r.Job) {
		jobs = append(jobs, w.r.Job)
	}
	if room := forecastPending - len(fc.pending); len(jobs) > room {
		jobs = jobs[:room]
	}
	proj, err := p.project(now, stop, jobs, forecastSampleEvents)
	if err != nil {
		return
	}
	for _, job := range jobs {
		w := p.waitIdx[job]
		s := forecastSample{job: job, attempt: w.r.Attempt, asked: now, age: waitedSoFar(w, now), proj: -1, naive: p.naiveWait(w, now), actual: -1}
		if e := proj[job]; !e.At.IsZero() {
			s.proj = max(0, e.At.Sub(now))
		}
		if f, ok := fc.rangeFit(now, s.age, s.proj, s.naive); ok {
			b := blend(f.weight, s.proj, s.naive)
			s.bounds, s.ranged = [3]float64{b + f.q[0], b + f.q[1], b + f.q[2]}, true
		}
		fc.pending = append(fc.pending, s)
	}
}

// reindex derives sampled from pending.
func (fc *forecastRecord) reindex() {
	clear(fc.sampled)
	for _, s := range fc.pending {
		if fc.sampled == nil {
			fc.sampled = map[string]int{}
		}
		fc.sampled[s.job]++
	}
}

// started notes a start: for the admission rate, and as the wait of any sample of it.
func (fc *forecastRecord) started(now time.Time, job string, attempt int) {
	if len(fc.starts) == forecastStarts { // drop the older half at once: a pass may start thousands
		fc.starts = slices.Delete(fc.starts, 0, forecastStarts/2)
		fc.dropped = true
	}
	fc.starts = append(fc.starts, now)
	if fc.sampled[job] == 0 { // most starts: no scan of the samples on the grant path
		return
	}
	for i := 0; i < len(fc.pending); {
		s := fc.pending[i]
		if s.job != job || s.attempt != attempt {
			i++
			continue
		}
		s.actual = now.Sub(s.asked)
		fc.pending = slices.Delete(fc.pending, i, i+1)
		fc.sampled[job]--
		if s.ranged {
			a := logWait(s.actual)
			for _, k := range []int{0, 2} { // the range's ends; the point stays the median
				b, miss := s.bounds[k], 0.0
				if a < b {
					miss = 1
				}
				fc.shift[k] = min(max(fc.shift[k]+forecastStep*(forecastLevels[k]-miss), -forecastLevels[k]), 1-forecastLevels[k])
			}
		}
		if len(fc.done) == ForecastKept {
			fc.done = slices.Delete(fc.done, 0, 1)
		}
		fc.done = append(fc.done, s)
	}
}

// naiveWait is w's place in the queue ÷ the starts per ForecastRateWindow up to now; negative when
// nothing started in the window.
func (p *Pool) naiveWait(w *waitReq, now time.Time) time.Duration {
	starts := p.forecast.starts
	from := now.Add(-ForecastRateWindow)
	lo, _ := slices.BinarySearchFunc(starts, from, func(a, b time.Time) int {
		if a.After(b) {
			return 1
		}
		return -1
	})
	n := len(starts) - lo
	if n == 0 {
		return -1
	}
	window := ForecastRateWindow
	if lo == 0 && p.forecast.dropped { // the kept starts may span less than the window
		window = min(window, max(now.Sub(starts[0]), time.Second))
	}
	position := p.waitPos(w) + 1
	return time.Duration(float64(position) * float64(window) / float64(n))
}

// forecastFit is how the record corrects a forecast: the projection's weight in the blend and the
// 10th, 50th and 90th percentile errors, in log space (see logWait).
type forecastFit struct {
	weight  float64
	q       [3]float64 // the errors at the levels aimed at: the range's ends and the point
	samples int
}

// logWait is the scale errors are measured on: ln(1 + wait ÷ forecastFloor).
func logWait(d time.Duration) float64 { return math.Log1p(float64(d) / float64(forecastFloor)) }

func waitOfLog(x float64) time.Duration {
	return time.Duration(math.Expm1(max(x, 0)) * float64(forecastFloor))
}

// rangeFit is the fit a forecast's range comes from: over the finished samples and those still
// waiting, nearest by the projection, the queue-position figure and the wait so far (see fit).
func (fc *forecastRecord) rangeFit(now time.Time, age, proj, naive time.Duration) (forecastFit, bool) {
	return fc.fit(now, proj, naive, age, true)
}

// pointFit is the fit a forecast's point comes from: over the finished samples alone, nearest by
// the projection and the queue-position figure. Read from the range's fit, the point of a job
// asked shortly before its start sat among the samples of requests that had waited as long and
// went on waiting: on trainq simulate's pools with learned estimates its error 10 minutes
// before the start grew from 37% of the wait to 102% (multigpu50, 16 nodes).
func (fc *forecastRecord) pointFit(proj, naive time.Duration) (forecastFit, bool) {
	return fc.fit(time.Time{}, proj, naive, 0, false)
}

// fit finds, over the samples most like this forecast (those whose projection and
// queue-position figure, and with withWaiting the wait so far, were nearest these, on the log
// scale: errors grow with the horizon, differ near the start, and differ between a request just
// queued and one that has waited a day), the blend whose errors spread least, and their
// percentiles. proj or naive is negative when unknown; ok is false with fewer than
// ForecastMinSamples comparable finished samples.
//
// With withWaiting, the samples still waiting take part as what they are, censored: their job
// waits at least as long as it has so far (now − asked). Leaving them out reads the errors from
// the jobs that started, which are the short waits whenever the queue grows, and the range then
// ends too early (on trainq simulate's multigpu50 list at 14 nodes, 46% of the record's own
// samples started after its 90th percentile); counting what they have waited so far as their
// wait makes the lower end fall to nothing. So the percentiles are the Kaplan–Meier
// estimator's, which counts a censored sample among those that may still err more until its
// wait so far is passed.
func (fc *forecastRecord) fit(now time.Time, proj, naive, age time.Duration, withWaiting bool) (forecastFit, bool) {
	type near struct {
		s    *forecastSample
		dist float64
	}
	var use []near
	finished := 0
	groups := [][]forecastSample{fc.done, fc.pending}
	if !withWaiting {
		groups = groups[:1]
	}
	for _, group := range groups {
		for i := range group {
			s := &group[i]
			if (proj >= 0) != (s.proj >= 0) && proj >= 0 || (naive >= 0) != (s.naive >= 0) && naive >= 0 {
				continue // it lacks a figure this forecast uses
			}
			d := 0.0
			if proj >= 0 {
				d += math.Abs(logWait(s.proj) - logWait(proj))
			}
			if naive >= 0 {
				d += math.Abs(logWait(s.naive) - logWait(naive))
			}
			if withWaiting {
				d += math.Abs(logWait(s.age) - logWait(age))
			}
			if s.actual >= 0 {
				finished++
			}
			use = append(use, near{s, d})
		}
	}
	if finished < ForecastMinSamples {
		return forecastFit{}, false
	}
	// The nearest first, and of equally near ones the latest asked; at least ForecastMinSamples
	// of them, and enough to hold half as many finished ones.
	slices.SortFunc(use, func(a, b near) int {
		if c := cmp.Compare(a.dist, b.dist); c != 0 {
			return c
		}
		return b.s.asked.Compare(a.s.asked)
	})
	k, seen := max(ForecastMinSamples, len(use)/forecastNearShare), 0
	for i, n := range use {
		if n.s.actual >= 0 {
			seen++
		}
		if i+1 >= k && 2*seen >= ForecastMinSamples {
			k = i + 1
			break
		}
	}
	use = use[:k]
	weights := []float64{1}
	switch {
	case proj < 0:
		weights = []float64{0}
	case naive >= 0:
		weights = []float64{1, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0}
	}
	errs := make([]censoredErr, len(use))
	dev := make([]float64, len(use))
	best, bestSpread := forecastFit{samples: len(use)}, math.Inf(1)
	for _, wt := range weights {
		for i, n := range use {
			wait, waited := n.s.actual, false
			if wait < 0 {
				wait, waited = max(0, now.Sub(n.s.asked)), true
			}
			errs[i] = censoredErr{logWait(wait) - blend(wt, n.s.proj, n.s.naive), waited}
		}
		slices.SortFunc(errs, cmpCensoredErr)
		mid := kaplanMeierQuantile(errs, 0.5)
		dev = dev[:0]
		for _, e := range errs {
			if !e.censored {
				dev = append(dev, math.Abs(e.err-mid))
			}
		}
		slices.Sort(dev)
		if spread := quantileOf(dev, 0.5); spread < bestSpread {
			bestSpread = spread
			best = forecastFit{weight: wt, samples: len(use)}
			for k, l := range forecastLevels {
				best.q[k] = kaplanMeierQuantile(errs, l+fc.shift[k])
			}
			slices.Sort(best.q[:]) // levels that crossed keep the point inside the range
		}
	}
	return best, true
}

// censoredErr is one sample's error; censored: its job is still waiting, and err is the least
// its error can be.
type censoredErr struct {
	err      float64
	censored bool
}

// cmpCensoredErr orders errors ascending, a finished sample before a censored one of the same
// error (it was still at risk then).
func cmpCensoredErr(a, b censoredErr) int {
	if c := cmp.Compare(a.err, b.err); c != 0 {
		return c
	}
	switch {
	case a.censored == b.censored:
		return 0
	case b.censored:
		return -1
	}
	return 1
}

// kaplanMeierQuantile is the error below which a share q of the samples fall by the
// Kaplan–Meier estimate over sorted (cmpCensoredErr): each finished sample takes its share of
// those still at risk, a censored one leaves the risk set when its error so far is passed. Past
// the last finished sample the estimate knows nothing more: a q beyond it is the largest error
// seen, finished or not, the least the quantile can be.
func kaplanMeierQuantile(sorted []censoredErr, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	below := 0.0 // the estimated share below the errors passed so far
	for i, e := range sorted {
		if e.censored {
			continue
		}
		below += (1 - below) / float64(len(sorted)-i)
		if below >= q-1e-12 {
			return e.err
		}
	}
	return sorted[len(sorted)-1].err
}

// waitedSoFar is how long w has waited by now, since it was submitted (0 when it does not say
// when).
func waitedSoFar(w *waitReq, now time.Time) time.Duration {
	if w.r.SubmittedAt.IsZero() {
		return 0
	}
	return max(0, now.Sub(w.r.SubmittedAt))
}

// blend is the forecast before correction, in log space: the projection weighted by weight, the
// queue-position figure by the rest.
func blend(weight float64, proj, naive time.Duration) float64 {
	switch weight {
	case 1:
		return logWait(proj)
	case 0:
		return logWait(naive)
	}
	return weight*logWait(proj) + (1-weight)*logWait(naive)
}

// quantileOf is the linearly interpolated quantile q of sorted.
func quantileOf(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	x := q * float64(len(sorted)-1)
	i := int(x)
	if i >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (x-float64(i))*(sorted[i+1]-sorted[i])
}

// Forecast is Project corrected by the pool's record of how wrong its expected starts have been
// (see ForecastSampleEvery): each waiting job of want gets its best expected start and, once the
// record has ForecastMinSamples comparable samples, the range 8 in 10 jobs have started in.
// A job the projection has no start for gets one from its place in the queue alone, if the
// record can say how good that is.
func (p *Pool) Forecast(now time.Time, stop time.Duration, want []string) (map[string]ExpectedStart, error) {
	out, err := p.Project(now, stop, want)
	if err != nil {
		return nil, err
	}
	if now.Before(p.lastNow) {
		now = p.lastNow
	}
	fc := &p.forecast
	for _, w := range p.waiting { // in launch order, not the map's: the allocator's passes replay
		e, asked := out[w.r.Job]
		if !asked {
			continue
		}
		job := w.r.Job
		naive := p.naiveWait(w, now)
		var proj time.Duration = -1
		if !e.At.IsZero() {
			proj = max(0, e.At.Sub(now))
		}
		if proj < 0 && naive < 0 {
			continue
		}
		f, ok := fc.rangeFit(now, waitedSoFar(w, now), proj, naive)
		if !ok {
			continue
		}
		b := blend(f.weight, proj, naive)
		lo, point, hi := b+f.q[0], b+f.q[1], b+f.q[2]
		weight := f.weight // the point's blend, which the assumption names
		if g, ok := fc.pointFit(proj, naive); ok {
			point, weight = min(max(blend(g.weight, proj, naive)+g.q[1], lo), hi), g.weight
		}
		c := e
		c.At = now.Add(waitOfLog(point))
		c.Earliest, c.Latest = now.Add(waitOfLog(lo)), now.Add(waitOfLog(hi))
		c.Samples = f.samples
		c.Projected = e.At
		switch {
		case proj < 0:
			c.Because = fmt.Sprintf("from its place in the queue (%s) and the starts of the last hour; the projection has none: %s",
				ordinal(p.waitPos(w)+1), strings.TrimPrefix(e.Because, "unknown: "))
		case weight < 1:
			c.Because += "; blended with its place in the queue and the last hour's starts"
		}
		out[job] = c
	}
	return out, nil
}

// CarryForecast gives p the record of from's expected starts (the allocator rebuilt from its jobs
// keeps what it learned of its own errors): the finished samples, the levels and the recent
// starts. The samples still waiting stay behind: the requests they follow are queued again.
func (p *Pool) CarryForecast(from *Pool) {
	fc := &from.forecast
	p.forecast = forecastRecord{last: fc.last, turn: fc.turn, done: slices.Clone(fc.done), starts: slices.Clone(fc.starts),
		dropped: fc.dropped, shift: fc.shift}
}

// SnapshotForecast is the record of how wrong the expected starts have been (see Pool.Forecast).
type SnapshotForecast struct {
	Last    int64                    `json:"last,omitempty"`
	Turn    int                      `json:"turn,omitempty"`
	Pending []SnapshotForecastSample `json:"pending,omitempty"`
	Done    []SnapshotForecastSample `json:"done,omitempty"`
	// Starts are the latest starts' times, in Unix milliseconds; Dropped says older ones were
	// dropped.
	Starts  []int64 `json:"starts,omitempty"`
	Dropped bool    `json:"dropped,omitempty"`
	// Shift is forecastRecord.shift: absent, no level moved.
	Shift []float64 `json:"shift,omitempty"`
	// Fresh, FreshStride and FreshSeen are the requests queued since the last sample.
	Fresh       []string `json:"fresh,omitempty"`
	FreshStride int      `json:"fstride,omitempty"`
	FreshSeen   int      `json:"fseen,omitempty"`
}

// SnapshotForecastSample is one sample: its waits in nanoseconds, -1 unknown (a finished
// sample keeps only its waits).
type SnapshotForecastSample struct {
	Job     string `json:"j,omitempty"`
	Attempt int    `json:"a,omitempty"`
	Asked   int64  `json:"t,omitempty"`
	Proj    int64  `json:"p"`
	Naive   int64  `json:"n"`
	// Age is how long the request had waited when asked (absent in records written before it
	// was kept: those count as asked at submission).
	Age    int64 `json:"g,omitempty"`
	Actual int64 `json:"w"`
	// Bounds is what the forecast said when a pending sample was taken, in log space.
	Bounds []float64 `json:"b,omitempty"`
}

func (fc *forecastRecord) snapshot() *SnapshotForecast {
	if fc.last.IsZero() && len(fc.starts) == 0 && len(fc.fresh) == 0 {
		return nil
	}
	s := &SnapshotForecast{Last: tn(fc.last), Turn: fc.turn, Dropped: fc.dropped, Fresh: slices.Clone(fc.fresh), FreshStride: fc.freshStride, FreshSeen: fc.freshSeen}
	if fc.shift != [3]float64{} {
		s.Shift = fc.shift[:]
	}
	for _, x := range fc.pending {
		ss := SnapshotForecastSample{Job: x.job, Attempt: x.attempt, Asked: tn(x.asked), Proj: int64(x.proj), Naive: int64(x.naive), Age: int64(x.age), Actual: -1}
		if x.ranged {
			ss.Bounds = x.bounds[:]
		}
		s.Pending = append(s.Pending, ss)
	}
	for _, x := range fc.done {
		s.Done = append(s.Done, SnapshotForecastSample{Asked: tn(x.asked), Proj: int64(x.proj), Naive: int64(x.naive), Age: int64(x.age), Actual: int64(x.actual)})
	}
	s.Starts = make([]int64, len(fc.starts))
	for i, t := range fc.starts {
		s.Starts[i] = t.UnixMilli()
	}
	return s
}

func (fc *forecastRecord) restore(s *SnapshotForecast) {
	if s == nil {
		return
	}
	*fc = forecastRecord{last: nt(s.Last), turn: s.Turn, dropped: s.Dropped, fresh: slices.Clone(s.Fresh), freshStride: s.FreshStride, freshSeen: s.FreshSeen}
	copy(fc.shift[:], s.Shift)
	for _, x := range s.Pending {
		fs := forecastSample{job: x.Job, attempt: x.Attempt, asked: nt(x.Asked), proj: time.Duration(x.Proj), naive: time.Duration(x.Naive), age: time.Duration(x.Age), actual: -1}
		fs.ranged = copy(fs.bounds[:], x.Bounds) == len(fs.bounds)
		fc.pending = append(fc.pending, fs)
	}
	fc.reindex()
	for _, x := range s.Done {
		fc.done = append(fc.done, forecastSample{asked: nt(x.Asked), proj: time.Duration(x.Proj), naive: time.Duration(x.Naive), age: time.Duration(x.Age), actual: time.Duration(x.Actual)})
	}
	fc.starts = make([]time.Time, len(s.Starts))
	for i, ms := range s.Starts {
		fc.starts[i] = time.UnixMilli(ms).UTC()
	}
}

// ordinal is 1st, 2nd, 3rd, 4th, 11th, 21st…
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
