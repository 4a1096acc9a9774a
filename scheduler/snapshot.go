package scheduler

import (
	"fmt"
	"math/bits"
	"slices"
	"time"
)

// SnapshotVersion is the current Snapshot format. Restore also reads the older versions:
//
//   - 1: no lost nodes (Snapshot.Lost did not exist).
//   - 2: adds Snapshot.Lost.
const SnapshotVersion = 2

// Snapshot is the whole pool state for continue-as-new. It is compact JSON: waiting requests are
// stored column-wise with per-worker demands interned, so 10,000 waiting requests with 47-character
// job ids take well under 1 MB. Times are Unix nanoseconds (0 = zero time).
type Snapshot struct {
	Version int               `json:"v"`
	Nodes   []Node            `json:"nodes"`
	Policy  Policy            `json:"policy"`
	Now     int64             `json:"now,omitempty"` // time of the last Schedule call
	Demands []Demand          `json:"demands,omitempty"`
	Waiting SnapshotWaiting   `json:"waiting"`
	Running []SnapshotRunning `json:"running,omitempty"`
	Lost    []int32           `json:"lost,omitempty"` // indices into Nodes of the lost nodes, ascending (version 2)
}

// SnapshotWaiting holds the waiting requests in launch order, one column per field.
type SnapshotWaiting struct {
	Job         []string `json:"job,omitempty"`
	Attempt     []int    `json:"attempt,omitempty"`
	KindClass   []int8   `json:"kc,omitempty"` // class, +3 for notebooks
	Demand      []int32  `json:"d,omitempty"`  // index into Snapshot.Demands
	Workers     []int32  `json:"w,omitempty"`
	Seq         []int64  `json:"seq,omitempty"`
	SubmittedAt []int64  `json:"t,omitempty"`
}

// SnapshotRunning is one running or releasing job.
type SnapshotRunning struct {
	Job         string     `json:"j"`
	Attempt     int        `json:"a,omitempty"`
	KindClass   int8       `json:"kc"`
	Demand      int32      `json:"d"`
	Seq         int64      `json:"s,omitempty"`
	SubmittedAt int64      `json:"t,omitempty"`
	StartedAt   int64      `json:"st,omitempty"`
	Nodes       []int32    `json:"n"` // node index per worker
	GPUs        []uint64   `json:"g"` // GPU index mask per worker
	Released    []int32    `json:"r,omitempty"`
	Releasing   bool       `json:"rel,omitempty"`
	PreemptedBy *Preemptor `json:"pb,omitempty"`
}

func tn(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func nt(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func kindClass(r *Request) int8 {
	kc := int8(r.Class)
	if r.Kind == KindNotebook {
		kc += 3
	}
	return kc
}

func fromKindClass(kc int8) (Kind, Class, error) {
	switch {
	case kc >= 0 && kc <= 2:
		return KindJob, Class(kc), nil
	case kc >= 3 && kc <= 5:
		return KindNotebook, Class(kc - 3), nil
	}
	return "", 0, fmt.Errorf("snapshot: bad kind/class code %d", kc)
}

// Snapshot captures the state (see Restore).
func (p *Pool) Snapshot() Snapshot {
	s := Snapshot{Version: SnapshotVersion, Nodes: p.Nodes(), Policy: p.policy, Now: tn(p.lastNow)}
	for i := range p.nodes {
		if p.nodes[i].lost {
			s.Lost = append(s.Lost, int32(i))
		}
	}
	dIdx := map[Demand]int32{}
	intern := func(d Demand) int32 {
		if i, ok := dIdx[d]; ok {
			return i
		}
		i := int32(len(s.Demands))
		s.Demands = append(s.Demands, d)
		dIdx[d] = i
		return i
	}
	n := len(p.waiting)
	sw := SnapshotWaiting{Job: make([]string, n), Attempt: make([]int, n), KindClass: make([]int8, n),
		Demand: make([]int32, n), Workers: make([]int32, n), Seq: make([]int64, n), SubmittedAt: make([]int64, n)}
	for i, w := range p.waiting {
		r := &w.r
		sw.Job[i], sw.Attempt[i], sw.KindClass[i] = r.Job, r.Attempt, kindClass(r)
		sw.Demand[i], sw.Workers[i], sw.Seq[i], sw.SubmittedAt[i] = intern(r.Demand), int32(r.Workers), r.Seq, tn(r.SubmittedAt)
	}
	s.Waiting = sw
	for _, rj := range p.sortedRunning() {
		sr := SnapshotRunning{Job: rj.r.Job, Attempt: rj.r.Attempt, KindClass: kindClass(&rj.r), Demand: intern(rj.r.Demand),
			Seq: rj.r.Seq, SubmittedAt: tn(rj.r.SubmittedAt), StartedAt: tn(rj.startedAt),
			Nodes: append([]int32(nil), rj.nodes...), GPUs: append([]uint64(nil), rj.gpus...), Releasing: rj.releasing}
		for w, rel := range rj.released {
			if rel {
				sr.Released = append(sr.Released, int32(w))
			}
		}
		if rj.preemptedBy != nil {
			pb := *rj.preemptedBy
			sr.PreemptedBy = &pb
		}
		s.Running = append(s.Running, sr)
	}
	return s
}

// Restore rebuilds a pool from a Snapshot of any version up to SnapshotVersion, validating it.
func Restore(s Snapshot) (*Pool, error) {
	switch s.Version {
	case 1:
		if len(s.Lost) > 0 {
			return nil, fmt.Errorf("snapshot: version 1 has no lost nodes, but this one lists %d", len(s.Lost))
		}
	case 2:
	default:
		return nil, fmt.Errorf("snapshot: unsupported version %d (this code reads versions 1 to %d)", s.Version, SnapshotVersion)
	}
	p, err := NewPool(s.Nodes, s.Policy)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	p.lastNow = nt(s.Now)
	for i, n := range s.Lost {
		if n < 0 || int(n) >= len(p.nodes) || (i > 0 && n <= s.Lost[i-1]) {
			return nil, fmt.Errorf("snapshot: lost node index %d is out of range or out of order", n)
		}
		p.nodes[n].lost = true
	}
	if len(s.Lost) > 0 {
		for f := range p.fams {
			p.refreshLive(int32(f))
		}
	}
	demand := func(i int32) (Demand, error) {
		if i < 0 || int(i) >= len(s.Demands) {
			return Demand{}, fmt.Errorf("snapshot: demand index %d out of range", i)
		}
		return s.Demands[i], nil
	}
	type admitKey struct {
		d, w int32
		kc   int8
	}
	admitted := map[admitKey]bool{}
	for _, sr := range s.Running {
		kind, class, err := fromKindClass(sr.KindClass)
		if err != nil {
			return nil, err
		}
		d, err := demand(sr.Demand)
		if err != nil {
			return nil, err
		}
		r := Request{Job: sr.Job, Attempt: sr.Attempt, Kind: kind, Class: class, Demand: d, Workers: len(sr.Nodes),
			Seq: sr.Seq, SubmittedAt: nt(sr.SubmittedAt)}
		if key := (admitKey{sr.Demand, int32(len(sr.Nodes)), sr.KindClass}); !admitted[key] || r.Job == "" {
			if err := p.Admit(r); err != nil {
				return nil, fmt.Errorf("snapshot: running job %q: %w", sr.Job, err)
			}
			admitted[key] = true
		}
		if p.running[r.Job] != nil || len(sr.GPUs) != len(sr.Nodes) {
			return nil, fmt.Errorf("snapshot: running job %q is duplicated or malformed", sr.Job)
		}
		rj := &runJob{r: r, fam: p.famIdx[d.Family], startedAt: nt(sr.StartedAt), nodes: slices.Clone(sr.Nodes), gpus: slices.Clone(sr.GPUs),
			released: make([]bool, len(sr.Nodes))}
		if sr.PreemptedBy != nil {
			pb := *sr.PreemptedBy
			rj.preemptedBy = &pb
		}
		for _, w := range sr.Released {
			if w < 0 || int(w) >= len(sr.Nodes) || rj.released[w] {
				return nil, fmt.Errorf("snapshot: running job %q: bad released worker %d", sr.Job, w)
			}
			rj.released[w] = true
			rj.nReleased++
		}
		if rj.nReleased == len(rj.nodes) || (rj.nReleased > 0 && !sr.Releasing) {
			return nil, fmt.Errorf("snapshot: running job %q: inconsistent release state", sr.Job)
		}
		seen := map[int32]bool{}
		for w, n := range sr.Nodes {
			if n < 0 || int(n) >= len(p.nodes) || seen[n] || p.nodes[n].fam != rj.fam {
				return nil, fmt.Errorf("snapshot: running job %q: bad node for worker %d", sr.Job, w)
			}
			seen[n] = true
			if rj.released[w] {
				continue
			}
			nd := &p.nodes[n]
			m := sr.GPUs[w]
			if bits.OnesCount64(m) != d.GPUs || m&nd.used != 0 || (nd.GPUs < 64 && m>>uint(nd.GPUs) != 0) ||
				nd.freeCPU < d.CPU || nd.freeRAM < d.RAMGB {
				return nil, fmt.Errorf("snapshot: running job %q: worker %d does not fit on node %s", sr.Job, w, nd.Name)
			}
			nd.used |= m
			nd.freeGPU -= d.GPUs
			nd.freeCPU -= d.CPU
			nd.freeRAM -= d.RAMGB
		}
		p.running[r.Job] = rj
		if sr.Releasing {
			p.beginRelease(rj)
		}
	}
	sw := &s.Waiting
	n := len(sw.Job)
	if len(sw.Attempt) != n || len(sw.KindClass) != n || len(sw.Demand) != n || len(sw.Workers) != n ||
		len(sw.Seq) != n || len(sw.SubmittedAt) != n {
		return nil, fmt.Errorf("snapshot: waiting columns have different lengths")
	}
	for i := 0; i < n; i++ {
		kind, class, err := fromKindClass(sw.KindClass[i])
		if err != nil {
			return nil, err
		}
		d, err := demand(sw.Demand[i])
		if err != nil {
			return nil, err
		}
		r := Request{Job: sw.Job[i], Attempt: sw.Attempt[i], Kind: kind, Class: class, Demand: d,
			Workers: int(sw.Workers[i]), Seq: sw.Seq[i], SubmittedAt: nt(sw.SubmittedAt[i])}
		key := admitKey{sw.Demand[i], sw.Workers[i], sw.KindClass[i]}
		if r.Job == "" {
			return nil, fmt.Errorf("snapshot: waiting request %d has no job id", i)
		}
		if !admitted[key] {
			if err := p.Admit(r); err != nil {
				return nil, fmt.Errorf("snapshot: waiting job %q: %w", r.Job, err)
			}
			admitted[key] = true
		}
		if p.waitIdx[r.Job] != nil {
			return nil, fmt.Errorf("snapshot: waiting job %q is duplicated", r.Job)
		}
		w := &waitReq{r: r, shape: p.shapeOf(&r)}
		if i > 0 && !less(&p.waiting[i-1].r, &r) {
			return nil, fmt.Errorf("snapshot: waiting requests are not in launch order at %q", r.Job)
		}
		p.waiting = append(p.waiting, w)
		p.hot = append(p.hot, hotEntry{shape: w.shape, class: r.Class, prev: p.running[r.Job] != nil})
		p.waitIdx[r.Job] = w
	}
	return p, nil
}
