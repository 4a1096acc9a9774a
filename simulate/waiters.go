package simulate

import (
	"cmp"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// Size buckets of SizeWaits.
var sizeBuckets = []string{RowNoGPU, Row1GPU, Row2GPU, "4-7 GPUs", "8+ GPUs"}

func sizeBucket(gpus int) string {
	switch {
	case gpus >= 8:
		return sizeBuckets[4]
	case gpus >= 4:
		return sizeBuckets[3]
	}
	return sizeRow(gpus)
}

// SizeWaits is the waits of the jobs of one class and size (jobs that never fit not counted).
type SizeWaits struct {
	Class string `json:"class"`
	Size  string `json:"size"`
	Waits
}

// sizeWaits is the waits per class (the job's own) and size bucket, of the buckets with jobs,
// and per class the 4+ GPUs bucket (4-7 and 8+ together: Row4GPU), which the summary compares.
func (s *sim) sizeWaits() []SizeWaits {
	var out []SizeWaits
	for c := scheduler.High; c >= scheduler.Low; c-- {
		for _, b := range append(slices.Clone(sizeBuckets), Row4GPU) {
			var ws []time.Duration
			for i := range s.jobs {
				j := &s.w.Jobs[i]
				if j.Class != c || s.jobs[i].phase == phRejected {
					continue
				}
				if g := j.GPUs(); sizeBucket(g) == b || (b == Row4GPU && g >= 4) {
					ws = append(ws, s.jobs[i].waited)
				}
			}
			if len(ws) > 0 {
				out = append(out, SizeWaits{Class: c.String(), Size: b, Waits: waitsOf(ws)})
			}
		}
	}
	return out
}

// longestWaiters is, per class (high first), the job that waited longest (the first such), of
// the classes where some job waited at all.
func (s *sim) longestWaiters() []int32 {
	var out []int32
	for c := scheduler.High; c >= scheduler.Low; c-- {
		best := int32(-1)
		for i := range s.jobs {
			if s.w.Jobs[i].Class != c || s.jobs[i].phase == phRejected || s.jobs[i].waited <= 0 {
				continue
			}
			if best < 0 || s.jobs[i].waited > s.jobs[best].waited {
				best = int32(i)
			}
		}
		if best >= 0 {
			out = append(out, best)
		}
	}
	return out
}

// Waiter is the longest waiter of a class and what held it back.
type Waiter struct {
	Class       string  `json:"class"`
	Job         string  `json:"job"`
	Wait        Seconds `json:"wait"`
	GPUs        int     `json:"gpus"`
	Workers     int     `json:"workers"`
	Attempts    int     `json:"attempts"`
	Preemptions int     `json:"preemptions"`
	Submitted   Seconds `json:"submitted"` // since the workload's start
	Started     Seconds `json:"started"`   // its last start (-1: never)
	// Reason is the reason the pool gave (Pool.Explain) at most of the moments sampled in its
	// wait, with its WaitingFor then; ReasonShare the share of the samples it was given at
	// (0 to 1), Reasons how many distinct ones there were, LastReason the last before it started.
	Reason      string   `json:"reason"`
	ReasonShare float64  `json:"reason_share"`
	WaitingFor  []string `json:"waiting_for,omitempty"`
	Reasons     int      `json:"reasons"`
	LastReason  string   `json:"last_reason"`
	Samples     int      `json:"samples"`
	// FitsOn are the nodes of the pool where one of its workers fits at all (when empty); Holders
	// the distinct jobs seen running or stopping there at the samples, per class, and HolderGPUs
	// how many of them had each GPU count (e.g. "1": 80).
	FitsOn     []string       `json:"fits_on"`
	Holders    map[string]int `json:"holders,omitempty"`
	HolderGPUs map[string]int `json:"holder_gpus,omitempty"`
}

// WaiterSamples bounds the moments of one job's wait its reason is sampled at (every
// WaiterStep, or wider).
const (
	WaiterSamples = 300
	WaiterStep    = 10 * time.Minute
)

// watchRun samples the reasons of the longest waiters in a replay.
type watchRun struct {
	jobs    []int32
	counts  map[int32]map[string]int
	first   map[int32]map[string][]string // a reason's WaitingFor when it was first given
	text    map[int32]map[string]string   // a reason as it was first given, by reasonKey
	order   map[int32][]string            // reasons by first appearance (ties)
	last    map[int32]string
	samples map[int32]int
	fits    map[int32][]string
	holders map[int32]map[int32]bool // jobs seen on the nodes it fits on
}

// reasonKey groups reasons that differ only in their numbers (how long, how many ahead): a
// duration in any unit ("446h12m20s", "11h", "45m") is one number, and "past its estimate" or
// not is the same reason at another moment.
var (
	reasonDurations = regexp.MustCompile(`\b([0-9]+(\.[0-9]+)?(h|ms|m|s))+\b`)
	reasonDigits    = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)
	reasonEstimate  = strings.NewReplacer("past its estimate of", "estimated")
)

func reasonKey(r string) string {
	return reasonDigits.ReplaceAllString(reasonDurations.ReplaceAllString(reasonEstimate.Replace(r), "D"), "N")
}

// newWatchRun plans the samples of r at the moments of the jobs' waits in the plain run s.
func newWatchRun(s, r *sim, jobs []int32) *watchRun {
	wr := &watchRun{jobs: jobs, counts: map[int32]map[string]int{}, first: map[int32]map[string][]string{}, text: map[int32]map[string]string{},
		order: map[int32][]string{}, last: map[int32]string{}, samples: map[int32]int{}, fits: map[int32][]string{},
		holders: map[int32]map[int32]bool{}}
	for _, i := range jobs {
		d := s.w.Jobs[i].Demand
		for _, n := range s.w.Nodes {
			if n.Family == d.Family && n.GPUs >= d.GPUs && n.CPU >= d.CPU && n.RAMGB >= d.RAMGB {
				wr.fits[i] = append(wr.fits[i], n.Name)
			}
		}
		wr.holders[i] = map[int32]bool{}
		wr.counts[i], wr.first[i], wr.text[i] = map[string]int{}, map[string][]string{}, map[string]string{}
		st := &s.jobs[i]
		step := max(WaiterStep, st.waited/WaiterSamples)
		for _, sp := range st.spans {
			for t := sp.from; t < sp.to; t += step {
				r.push(t, evExplain, i, 0, 0)
			}
		}
	}
	return wr
}

// sample records why job i waits now, if it waits.
func (wr *watchRun) sample(s *sim, i int32) {
	if s.jobs[i].phase != phWaiting {
		return
	}
	info, ok := s.pool.Explain(s.w.Jobs[i].ID)
	if !ok {
		return
	}
	wr.samples[i]++
	k := reasonKey(info.Reason)
	if _, seen := wr.counts[i][k]; !seen {
		wr.order[i] = append(wr.order[i], k)
		wr.first[i][k] = info.WaitingFor
		wr.text[i][k] = info.Reason
	}
	wr.counts[i][k]++
	wr.last[i] = info.Reason
	for k := range s.jobs {
		if ph := s.jobs[k].phase; ph == phRunning || ph == phNotice || ph == phStopping {
			if overlaps(s.jobs[k].nodes, wr.fits[i]) {
				wr.holders[i][int32(k)] = true
			}
		}
	}
}

func (wr *watchRun) report(s *sim) []Waiter {
	var out []Waiter
	for _, i := range wr.jobs {
		j, st := &s.w.Jobs[i], &s.jobs[i]
		w := Waiter{Class: j.Class.String(), Job: j.ID, Wait: Seconds(st.waited), GPUs: j.GPUs(), Workers: j.Workers,
			Attempts: st.attempt, Preemptions: st.preempted, Started: -1, Samples: wr.samples[i], LastReason: wr.last[i]}
		if len(st.spans) > 0 {
			w.Submitted = Seconds(st.spans[0].from)
			w.Started = Seconds(st.spans[len(st.spans)-1].to)
		}
		counts := wr.counts[i]
		w.Reasons = len(counts)
		if len(counts) > 0 {
			top := slices.MaxFunc(wr.order[i], func(a, b string) int { return cmp.Compare(counts[a], counts[b]) })
			// MaxFunc returns the first maximum: the reason given longest, ties to the earliest.
			w.Reason, w.WaitingFor = wr.text[i][top], wr.first[i][top]
			w.ReasonShare = float64(counts[top]) / float64(wr.samples[i])
		}
		w.FitsOn = wr.fits[i]
		for k := range wr.holders[i] {
			if w.Holders == nil {
				w.Holders, w.HolderGPUs = map[string]int{}, map[string]int{}
			}
			w.Holders[s.w.Jobs[k].Class.String()]++
			w.HolderGPUs[strconv.Itoa(s.w.Jobs[k].GPUs())]++
		}
		out = append(out, w)
	}
	return out
}
