package simulate

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// EstimateKind is how the runtime estimate a job carries (scheduler.Request.RunLimit, the only
// thing Pool.Project reads to end a running job) relates to its true runtime.
type EstimateKind string

const (
	// EstimateNone gives no request a RunLimit (today's behaviour): nothing is measured.
	EstimateNone EstimateKind = "none"
	// EstimateExact gives each attempt its true remaining run time.
	EstimateExact EstimateKind = "exact"
	// EstimateLimit is a user's time limit of Factor × the true runtime: the job ends at its true
	// time, before its limit.
	EstimateLimit EstimateKind = "limit"
	// EstimateLearned is learned online from the jobs of the same shape that completed before
	// the job's submission (see learner).
	EstimateLearned EstimateKind = "learned"
)

// Estimates is one model of runtime estimates (--estimates).
type Estimates struct {
	Kind   EstimateKind `json:"kind"`
	Factor float64      `json:"factor,omitempty"` // EstimateLimit: the limit is Factor × the true runtime
	// Percentile (EstimateLearned) is the quantile of the last runs taken, 0 to 1 (0:
	// LearnedPercentile).
	Percentile float64 `json:"percentile,omitempty"`
}

func (e Estimates) percentile() float64 {
	if e.Percentile > 0 {
		return e.Percentile
	}
	return scheduler.LearnedPercentile
}

func (e Estimates) String() string {
	if e.Kind == EstimateLimit {
		return "limit:" + strconv.FormatFloat(e.Factor, 'g', -1, 64) + "x"
	}
	if e.Kind == EstimateLearned && e.Percentile > 0 && e.Percentile != scheduler.LearnedPercentile {
		return "learned:p" + strconv.FormatFloat(100*e.Percentile, 'g', -1, 64)
	}
	return string(e.Kind)
}

// ParseEstimates reads --estimates: a comma-separated list of exact, limit:Kx (K ≥ 1, e.g.
// limit:2x) and learned (or learned:pNN, another percentile than p90, e.g. learned:p50); or
// none (alone), which measures nothing.
func ParseEstimates(s string) ([]Estimates, error) {
	var out []Estimates
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		switch {
		case part == string(EstimateNone):
			out = append(out, Estimates{Kind: EstimateNone})
		case part == string(EstimateExact):
			out = append(out, Estimates{Kind: EstimateExact})
		case part == string(EstimateLearned):
			out = append(out, Estimates{Kind: EstimateLearned})
		case strings.HasPrefix(part, "learned:p"):
			f, err := strconv.ParseFloat(strings.TrimPrefix(part, "learned:p"), 64)
			if err != nil || !(f > 0 && f <= 100) {
				return nil, fmt.Errorf("%q: the percentile is above 0 and at most 100 (e.g. learned:p50)", part)
			}
			out = append(out, Estimates{Kind: EstimateLearned, Percentile: f / 100})
		case strings.HasPrefix(part, "limit:"):
			k := strings.TrimSuffix(strings.TrimPrefix(part, "limit:"), "x")
			f, err := strconv.ParseFloat(k, 64)
			if err != nil || !(f >= 1) || math.IsInf(f, 0) {
				return nil, fmt.Errorf("%q: the limit is K times the true runtime, K at least 1 (e.g. limit:2x)", part)
			}
			out = append(out, Estimates{Kind: EstimateLimit, Factor: f})
		default:
			return nil, fmt.Errorf("%q is not exact, limit:Kx (e.g. limit:2x), learned, learned:pNN or none", part)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no estimates model: give exact, limit:Kx, learned or none")
	}
	if len(out) > 1 && slices.ContainsFunc(out, func(e Estimates) bool { return e.Kind == EstimateNone }) {
		return nil, fmt.Errorf("none measures nothing: give it alone, or leave it out")
	}
	if len(out) == 1 && out[0].Kind == EstimateNone {
		return nil, nil
	}
	return out, nil
}

// shapeKeys are the keys a job's runtime is learned under: its shape (Job.Shape, or its class,
// kind, per-worker demand and workers), then the coarse shape (its class and total GPUs), both
// within its workspace.
func shapeKeys(j *Job) [2]string {
	fine := j.Shape
	if fine == "" {
		d := j.Demand
		fine = fmt.Sprintf("%s %s %dx %s.%dgpu.%dvG.%dC.%dG", j.Class, j.Kind, j.Workers, d.Family, d.GPUs, d.VRAMGB, d.CPU, d.RAMGB)
	}
	return [2]string{j.Workspace + "|" + fine, fmt.Sprintf("%s|%s %d GPUs", j.Workspace, j.Class, j.GPUs())}
}

// learner keeps, per shape key, the runtimes of the last LearnedRuns completed jobs (a ring, so
// its state is bounded by the number of shapes), and estimates their quantile q.
type learner struct {
	runs map[string]*ring
	q    float64
}

type ring struct {
	d    [scheduler.LearnedRuns]time.Duration
	n    int // how many were ever added
	next int
}

func newLearner(q float64) *learner { return &learner{runs: map[string]*ring{}, q: q} }

// observe records that a job of these keys completed after running d.
func (l *learner) observe(keys [2]string, d time.Duration) {
	for _, k := range keys {
		r := l.runs[k]
		if r == nil {
			r = &ring{}
			l.runs[k] = r
		}
		r.d[r.next] = d
		r.next = (r.next + 1) % scheduler.LearnedRuns
		r.n++
	}
}

// estimate is the learned runtime for keys, and which key gave it (0 fine, 1 coarse); ok false
// when neither has LearnedMinRuns completed jobs.
func (l *learner) estimate(keys [2]string) (d time.Duration, level int, ok bool) {
	for lv, k := range keys {
		r := l.runs[k]
		if r == nil || r.n < scheduler.LearnedMinRuns {
			continue
		}
		d, _ := scheduler.LearnedRuntime(r.d[:min(r.n, scheduler.LearnedRuns)], l.q)
		return d, lv, true
	}
	return 0, 0, false
}

// EstimateAccuracy is how a run's runtime estimates compared with the jobs' true runtimes.
type EstimateAccuracy struct {
	Jobs int `json:"jobs"` // the jobs with a runtime that carried an estimate
	// Below is the share of them whose estimate was shorter than the true runtime: each such
	// job, backfilled, runs past its estimate.
	Below float64 `json:"below"`
	// MedianRatio and P10Ratio are the median and 10th percentile of estimate ÷ true runtime.
	MedianRatio float64 `json:"median_ratio"`
	P10Ratio    float64 `json:"p10_ratio"`
}

// estimateAccuracy compares the estimate each job carried at submission under the run's model
// with its true runtime; nil for a model without estimates.
func (s *sim) estimateAccuracy() *EstimateAccuracy {
	var ratios []float64
	below := 0
	for i := range s.w.Jobs {
		j, st := &s.w.Jobs[i], &s.jobs[i]
		if j.Runtime <= 0 {
			continue
		}
		var est time.Duration
		switch s.est.Kind {
		case EstimateExact:
			est = j.Runtime
		case EstimateLimit:
			est = time.Duration(s.est.Factor * float64(j.Runtime))
		case EstimateLearned:
			if !st.hasEst {
				continue
			}
			est = st.estimate
		default:
			return nil
		}
		r := float64(est) / float64(j.Runtime)
		ratios = append(ratios, r)
		if r < 1 {
			below++
		}
	}
	if len(ratios) == 0 {
		return nil
	}
	slices.Sort(ratios)
	q := func(p float64) float64 { return ratios[min(len(ratios)-1, int(p*float64(len(ratios))))] }
	return &EstimateAccuracy{Jobs: len(ratios), Below: float64(below) / float64(len(ratios)), MedianRatio: q(0.5), P10Ratio: q(0.1)}
}

// runLimit is the RunLimit job i's current attempt carries under the run's estimates model.
func (s *sim) runLimit(i int32) time.Duration {
	j, st := &s.w.Jobs[i], &s.jobs[i]
	var est time.Duration
	switch s.est.Kind {
	case EstimateExact:
		return max(st.remaining, scheduler.MinRunLimit) // the truth: what this attempt will run unless preempted
	case EstimateLimit:
		est = time.Duration(s.est.Factor * float64(j.Runtime))
	case EstimateLearned:
		if !st.hasEst {
			return 0
		}
		est = st.estimate
	default:
		return 0
	}
	return scheduler.EstimatedRunLimit(est, st.ran)
}

// learnedEstimate is the estimate job j carries from its submission on: learned from the jobs
// that completed before now (the learner has seen no other).
func (s *sim) learnedEstimate(j *Job) (time.Duration, int8, bool) {
	d, lv, ok := s.learn.estimate(shapeKeys(j))
	return d, int8(lv), ok
}
