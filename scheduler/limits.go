package scheduler

import (
	"fmt"
	"slices"
)

// Limit caps what one workspace may hold in one class of the pool, as Slurm's QOS GrpTRES caps
// an account: the GPUs of its running and releasing jobs of that class, plus the capacity
// nominated to its waiting requests of that class, never exceed MaxGPUs through a grant or a
// preemption. A request the cap leaves no room for waits, with a reason that names the cap; it
// is skipped as if it were not there (it blocks nobody, even under strict-fifo, and preempts and
// reserves nothing). A cap never makes a running job a victim, and a pool whose limits were
// lowered below what a workspace holds stops nothing: new requests wait until it is under again.
// An elastic gang starts with no more workers than its room allows.
type Limit struct {
	// Workspace is the workspace capped; "" caps every workspace, each on its own, that has no
	// limit of its own for the class.
	Workspace string `json:"workspace,omitempty"`
	Class     Class  `json:"class"`
	MaxGPUs   int    `json:"max_gpus"`
}

// checkLimits reports the first limit that is not valid: a class out of range, a negative cap,
// or two limits for the same workspace and class.
func checkLimits(ls []Limit) error {
	for i, l := range ls {
		if !l.Class.valid() {
			return fmt.Errorf("limit %d: unknown priority class %d: allowed values are low, medium, high", i+1, int(l.Class))
		}
		if l.MaxGPUs < 0 {
			return fmt.Errorf("limit %d (%s): max_gpus must not be negative, got %d", i+1, l.Class, l.MaxGPUs)
		}
		if slices.ContainsFunc(ls[:i], func(o Limit) bool { return o.Workspace == l.Workspace && o.Class == l.Class }) {
			who := "every workspace"
			if l.Workspace != "" {
				who = "workspace " + l.Workspace
			}
			return fmt.Errorf("limit %d: %s has two %s limits", i+1, who, l.Class)
		}
	}
	return nil
}

// LimitOf is workspace ws's GPU cap in class c under ls: its own limit, else the limit for
// every workspace, else -1 (none).
func LimitOf(ls []Limit, ws string, c Class) int {
	out := -1
	for _, l := range ls {
		if l.Class != c {
			continue
		}
		if l.Workspace == ws {
			return l.MaxGPUs
		}
		if l.Workspace == "" {
			out = l.MaxGPUs
		}
	}
	return out
}

// AdmitCap says why r could never start under its workspace's cap in its class
// (Policy.Limits): even holding nothing else, the workspace may not hold the GPUs the request
// needs at least (an elastic gang: its least size). Such a request would wait for ever, so the
// edge, the job's capacity request and the allocator refuse it, and DropOverCap ends the waiting
// ones a lowered cap leaves over. Admit does not check it, nor does Restore: a cap may be lowered
// under jobs already queued or running, which the allocator then judges.
func (pol Policy) AdmitCap(r Request) error {
	r = normalize(r)
	if r.Workspace == "" {
		return nil
	}
	limit, need := LimitOf(pol.Limits, r.Workspace, r.Class), r.leastWorkers()*r.Demand.GPUs
	if limit < 0 || need <= limit {
		return nil
	}
	return fmt.Errorf("workspace %s may hold at most %d %s GPUs in this allocation (limit %s.max_gpus), and the job needs %d (%s of %d): it could never start; use another priority class or a smaller job",
		r.Workspace, limit, r.Class, r.Class, need, workersText(&r), r.Demand.GPUs)
}

// noWorkspace is the index of a request without a workspace: no limit applies to it.
const noWorkspace int32 = -1

// workspaceOf interns a workspace name; "" is noWorkspace.
func (p *Pool) workspaceOf(name string) int32 {
	if name == "" {
		return noWorkspace
	}
	if i, ok := p.wsIdx[name]; ok {
		return i
	}
	i := int32(len(p.wsNames))
	p.wsIdx[name] = i
	p.wsNames = append(p.wsNames, name)
	var caps perClass
	for c := range caps {
		caps[c] = LimitOf(p.policy.Limits, name, Class(c))
	}
	p.wsCap = append(p.wsCap, caps)
	p.wsHeld = append(p.wsHeld, perClass{})
	p.wsWaiting = append(p.wsWaiting, perClass{})
	p.fs.ws = append(p.fs.ws, account{})
	return i
}

// capOf is the GPU cap of workspace ws in class c, or -1 for none.
func (p *Pool) capOf(ws int32, c Class) int {
	if ws == noWorkspace {
		return -1
	}
	return p.wsCap[ws][c]
}

// holdGPUs counts delta GPUs held by rj's workspace in its class (place and freeWorker keep
// it: running and releasing workers that have not stopped).
func (p *Pool) holdGPUs(rj *runJob, delta int) {
	if rj.ws != noWorkspace {
		p.wsHeld[rj.ws][rj.r.Class] += delta
	}
	p.holdShare(rj, delta)
	if p.fs.on {
		p.chargeGPUs(rj, delta)
	}
}

// capPass is a pass's count against the limits: per workspace and class, the GPUs held plus
// the GPUs nominated to its waiting requests, as the pass goes.
type capPass struct {
	on   bool
	used []perClass
}

// startCaps sets up the pass's count: what the workspaces hold, and what is nominated to their
// waiting requests when the pass begins.
func (sc *scratch) startCaps(p *Pool) {
	sc.caps.on = len(p.policy.Limits) > 0
	if !sc.caps.on {
		return
	}
	sc.caps.used = append(sc.caps.used[:0], p.wsHeld...)
	for i := range sc.nominations {
		x := &sc.nominations[i]
		if w := p.waitIdx[x.by]; w != nil && w.ws != noWorkspace {
			sc.caps.used[w.ws][w.r.Class] += x.demand.gpu
		}
	}
}

// ownNominatedGPUs is what is nominated to the walker, whose nominations are in sc.walkerNoms.
func (sc *scratch) ownNominatedGPUs() int {
	n := 0
	for _, k := range sc.walkerNoms {
		n += sc.nominations[k].demand.gpu
	}
	return n
}

// capRoom is, for the walker w, how many workers its workspace's cap in its class leaves room
// for (beside what is nominated to w already, which it may use), and whether that is fewer than
// it needs to start at all (it waits: outCapped). No limit: room for all its workers.
func (sc *scratch) capRoom(p *Pool, w *waitReq, sh *shape) (workers int, capped bool) {
	limit := p.capOf(w.ws, w.r.Class)
	if !sc.caps.on || limit < 0 || sh.need.gpu == 0 {
		return sh.workers, false
	}
	room := limit - (sc.caps.used[w.ws][w.r.Class] - sc.ownNominatedGPUs())
	workers = min(sh.workers, max(room, 0)/sh.need.gpu)
	return workers, workers < w.r.leastWorkers()
}

// countCapUse adds what the walker took in the pass (granted, held or nominated on the picked
// nodes) to its workspace's count, in place of what was nominated to it before.
func (sc *scratch) countCapUse(w *waitReq, sh *shape, own int) {
	if sc.caps.on && w.ws != noWorkspace {
		sc.caps.used[w.ws][w.r.Class] += len(sc.pick)*sh.need.gpu - own
	}
}

// capText is the reason a capped request waits, e.g. "team-a holds 16 of its 16 high GPUs
// (limit high.max_gpus); the job needs 8".
func (p *Pool) capText(w *waitReq, used int) string {
	limit := p.capOf(w.ws, w.r.Class)
	gpus := w.r.leastWorkers() * w.r.Demand.GPUs
	return fmt.Sprintf("%s holds %d of its %d %s GPUs (limit %s.max_gpus); the job needs %d",
		w.r.Workspace, used, limit, w.r.Class, w.r.Class, gpus)
}

// countWaiting counts w in or out of its workspace's waiting requests.
func (p *Pool) countWaiting(w *waitReq, delta int) {
	if w.ws != noWorkspace {
		p.wsWaiting[w.ws][w.r.Class] += delta
	}
}

// WaitingIn is how many requests of class c workspace ws has waiting (none without a workspace).
func (p *Pool) WaitingIn(ws string, c Class) int {
	i, ok := p.wsIdx[ws]
	if !ok || !c.valid() {
		return 0
	}
	return p.wsWaiting[i][c]
}

// WaitingByWorkspace counts the waiting requests of each workspace that has any, per class.
func (p *Pool) WaitingByWorkspace() map[string][3]int {
	out := map[string][3]int{}
	for i, n := range p.wsWaiting {
		if n != (perClass{}) {
			out[p.wsNames[i]] = n
		}
	}
	return out
}
