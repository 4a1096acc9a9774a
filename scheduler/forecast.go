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
// range (Expected.Earliest, Expected.Latest). About 8 in 10 jobs start inside it as long as the
// pool behaves as it did over its last ForecastKept samples; until it has ForecastMinSamples the
// pool gives the projection as it is, without a range.
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
	proj    time.Duration
	naive   time.Duration
	actual  time.Duration
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
		s := forecastSample{job: job, attempt: w.r.Attempt, asked: now, proj: -1, naive: p.naiveWait(w, now), actual: -1}
		if e := proj[job]; !e.At.IsZero() {
			s.proj = max(0, e.At.Sub(now))
		}
		if f, ok := fc.fit(s.proj, s.naive); ok {
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

// fit finds, over the finished samples most like this forecast (those whose projection and
// queue-position figure were nearest these, on the log scale: errors grow with the horizon and
// differ near the start), the blend whose errors spread least, and their percentiles. proj or
// naive is negative when unknown; ok is false with fewer than ForecastMinSamples comparable
// samples.
func (fc *forecastRecord) fit(proj, naive time.Duration) (forecastFit, bool) {
	type near struct {
		s    forecastSample
		dist float64
	}
	var use []near
	// The samples still waiting are left out: counting what they have waited so far as their wait
	// made the range's lower end fall to nothing (measured: trainq simulate, default list).
	for _, s := range fc.done {
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
		use = append(use, near{s, d})
	}
	if len(use) < ForecastMinSamples {
		return forecastFit{}, false
	}
	k := max(ForecastMinSamples, len(use)/forecastNearShare)
	slices.SortStableFunc(use, func(a, b near) int { return cmp.Compare(a.dist, b.dist) })
	use = use[:k]
	weights := []float64{1}
	switch {
	case proj < 0:
		weights = []float64{0}
	case naive >= 0:
		weights = []float64{1, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0}
	}
	errs := make([]float64, len(use))
	dev := make([]float64, len(use))
	best, bestSpread := forecastFit{samples: len(use)}, math.Inf(1)
	for _, wt := range weights {
		for i, n := range use {
			errs[i] = logWait(n.s.actual) - blend(wt, n.s.proj, n.s.naive)
		}
		slices.Sort(errs)
		mid := quantileOf(errs, 0.5)
		for i, e := range errs {
			dev[i] = math.Abs(e - mid)
		}
		slices.Sort(dev)
		if spread := quantileOf(dev, 0.5); spread < bestSpread {
			bestSpread = spread
			best = forecastFit{weight: wt, samples: len(use)}
			for k, l := range forecastLevels {
				best.q[k] = quantileOf(errs, l+fc.shift[k])
			}
			slices.Sort(best.q[:]) // levels that crossed keep the point inside the range
		}
	}
	return best, true
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
		f, ok := fc.fit(proj, naive)
		if !ok {
			continue
		}
		b := blend(f.weight, proj, naive)
		c := e
		c.At = now.Add(waitOfLog(b + f.q[1]))
		c.Earliest, c.Latest = now.Add(waitOfLog(b+f.q[0])), now.Add(waitOfLog(b+f.q[2]))
		c.Samples = f.samples
		c.Projected = e.At
		switch {
		case proj < 0:
			c.Because = fmt.Sprintf("from its place in the queue (%s) and the starts of the last hour; the projection has none: %s",
				ordinal(p.waitPos(w)+1), strings.TrimPrefix(e.Because, "unknown: "))
		case f.weight < 1:
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
	Actual  int64  `json:"w"`
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
		ss := SnapshotForecastSample{Job: x.job, Attempt: x.attempt, Asked: tn(x.asked), Proj: int64(x.proj), Naive: int64(x.naive), Actual: -1}
		if x.ranged {
			ss.Bounds = x.bounds[:]
		}
		s.Pending = append(s.Pending, ss)
	}
	for _, x := range fc.done {
		s.Done = append(s.Done, SnapshotForecastSample{Asked: tn(x.asked), Proj: int64(x.proj), Naive: int64(x.naive), Actual: int64(x.actual)})
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
		fs := forecastSample{job: x.Job, attempt: x.Attempt, asked: nt(x.Asked), proj: time.Duration(x.Proj), naive: time.Duration(x.Naive), actual: -1}
		fs.ranged = copy(fs.bounds[:], x.Bounds) == len(fs.bounds)
		fc.pending = append(fc.pending, fs)
	}
	fc.reindex()
	for _, x := range s.Done {
		fc.done = append(fc.done, forecastSample{asked: nt(x.Asked), proj: time.Duration(x.Proj), naive: time.Duration(x.Naive), actual: time.Duration(x.Actual)})
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
