package allocation

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// explainLimit is the queue length up to which a request's reply says its
// position and reason (one dry-run pass each).
const explainLimit = 1000

// maxWithdrawn bounds the remembered early withdrawals; they are rare (a
// cancel racing its own request), and the ghost check catches any that fall
// out of the list.
const maxWithdrawn = 1000

// RequestFor turns a job's capacity request into the scheduler's form,
// checked against pool.
func RequestFor(pool *scheduler.Pool, req protocol.CapacityRequest) (scheduler.Request, error) {
	r, err := req.SchedulerRequest()
	if err != nil {
		return scheduler.Request{}, err
	}
	return r, pool.Admit(r)
}

func (s *State) toRequest(req protocol.CapacityRequest) (scheduler.Request, error) {
	if req.Job == "" {
		return scheduler.Request{}, errors.New("job: must not be empty")
	}
	if req.Attempt < 1 {
		return scheduler.Request{}, fmt.Errorf("attempt: must be at least 1, got %d", req.Attempt)
	}
	r, err := RequestFor(s.Pool, req)
	if err == nil && s.RefusesOverCap {
		err = s.Pool.Policy().AdmitCap(r)
	}
	return r, err
}

// Validate refuses a request that can never fit, one its job has already
// withdrawn, and a new job when the queue is full.
func (s *State) Validate(req protocol.CapacityRequest) error {
	_, err := s.admit(req)
	return err
}

// admit is Validate, returning the request converted to the pool's form,
// so that a rule that goes on to queue it converts it once.
func (s *State) admit(req protocol.CapacityRequest) (scheduler.Request, error) {
	r, err := s.toRequest(req)
	if err != nil {
		return r, fmt.Errorf("allocation %s cannot run %s: %w", s.Name(), req.Job, err)
	}
	if err := s.WithdrawnFirst(req); err != nil {
		return r, err
	}
	return r, s.queueFull(req)
}

// queueFull refuses a new job when the queue holds max_waiting requests, or
// its workspace as many of its class as its waiting limit allows. A rerun of
// an admitted job is never refused: it already had its place.
func (s *State) queueFull(req protocol.CapacityRequest) error {
	if req.Attempt > 1 || req.Seq != 0 {
		return nil
	}
	if _, ok := s.Pool.Waiting(req.Job); ok {
		return nil // a repeated request
	}
	if _, ok := s.Pool.Running(req.Job); ok {
		return nil // a job reset to before its grant: it has its place
	}
	if s.Config.MaxWaiting > 0 && s.Pool.WaitingCount() >= s.Config.MaxWaiting {
		return &protocol.QueueFullError{Region: s.Config.Region, Allocation: s.Config.Allocation, Waiting: s.Pool.WaitingCount()}
	}
	class := req.Class
	if req.Kind == scheduler.KindNotebook {
		class = scheduler.High
	}
	if limit := s.Config.WaitingLimits.Cap(req.Workspace, class); limit >= 0 && s.Pool.WaitingIn(req.Workspace, class) >= limit {
		return &protocol.WorkspaceQueueFullError{Region: s.Config.Region, Allocation: s.Config.Allocation, Workspace: req.Workspace,
			Class: class, Waiting: s.Pool.WaitingIn(req.Workspace, class), Limit: limit}
	}
	return nil
}

// WithdrawnFirst refuses a request whose withdrawal came first: the job was
// cancelled while its request was on its way, and queueing it now would
// leave a ghost that holds a place, or even preempts, for nobody.
func (s *State) WithdrawnFirst(req protocol.CapacityRequest) error {
	for _, w := range s.Withdrawn {
		if w.Job == req.Job && w.Attempt >= req.Attempt {
			return fmt.Errorf("%s withdrew attempt %d before its request arrived", req.Job, w.Attempt)
		}
	}
	return nil
}

func (s *State) rememberWithdrawal(w protocol.WithdrawSignal) {
	s.Withdrawn = appendRemembered(s.Withdrawn, w)
}

// appendRemembered appends w to a memory of attempts, keeping the newest
// maxWithdrawn.
func appendRemembered(memory []protocol.WithdrawSignal, w protocol.WithdrawSignal) []protocol.WithdrawSignal {
	memory = append(memory, w)
	if len(memory) > maxWithdrawn {
		memory = slices.Delete(memory, 0, len(memory)-maxWithdrawn)
	}
	return memory
}

// Request takes in a capacity request that came as a signal:
//   - an older attempt than the pool has for the job means the job may have
//     been reset: its workflow is asked first (CheckReset, then ResetAnswered);
//   - a request that cannot fit, or that its job withdrew, is refused;
//   - a repeated request for a granted attempt gets its grant again, and
//     one for an attempt being released asks the job whether it forgot it
//     (CheckForgotten, then ForgottenAnswered);
//   - anything else is queued, and a pass asked for.
func (s *State) Request(req protocol.CapacityRequest, now time.Time) []Command {
	if s.hasNewerAttempt(req) {
		return []Command{CheckReset{Request: req}}
	}
	if n, ok := s.forgottenSince(req); ok {
		return []Command{rerun(req.Job, req.Attempt, fmt.Sprintf("attempt %d was given up while the job did not know it held it "+
			"(was its workflow reset?); its workers were stopped, and the job reruns as a later attempt without spending max_retry", n))}
	}
	r, err := s.admit(req)
	if err != nil {
		if req.Job == "" {
			return nil
		}
		return []Command{refuse(req.Job, req.Attempt, err.Error())}
	}
	if cmds, ok := s.resendGrant(req); ok {
		return cmds
	}
	if s.releasingAgain(req) {
		return []Command{CheckForgotten{Request: req}}
	}
	_, cmds := s.enqueue(r, now)
	return append(cmds, Schedule{})
}

// Enqueue queues a request (the request-capacity update's path, and
// Request's): a new job gets the next sequence, a known one keeps its place.
func (s *State) Enqueue(req protocol.CapacityRequest, now time.Time) (protocol.CapacityReply, []Command) {
	r, err := s.toRequest(req)
	if err != nil {
		// The validator already refused such requests; the state may have
		// changed since only through continue-as-new, so report and move on.
		return protocol.CapacityReply{Epoch: s.Epoch, Reason: err.Error()}, nil
	}
	return s.enqueue(r, now)
}

// enqueue queues a request already converted and admitted.
func (s *State) enqueue(r scheduler.Request, now time.Time) (protocol.CapacityReply, []Command) {
	if running, ok := s.Pool.Running(r.Job); ok && running.Attempt == r.Attempt {
		// A repeated request for an attempt already granted (the update ID
		// deduplicates only within one run): nothing to do.
		return protocol.CapacityReply{Epoch: s.Epoch, Seq: r.Seq}, nil
	}
	if r.Seq == 0 {
		if w, ok := s.Pool.Waiting(r.Job); ok {
			r.Seq = w.Seq
		} else {
			r.Seq = s.NextSeq
			s.NextSeq++
		}
	}
	if r.SubmittedAt.IsZero() {
		r.SubmittedAt = now
	}
	if r.Seq >= s.NextSeq {
		s.NextSeq = r.Seq + 1
	}
	if err := s.Pool.Enqueue(r); err != nil {
		return protocol.CapacityReply{Epoch: s.Epoch, Seq: r.Seq, Reason: err.Error()}, nil
	}
	var cmds commands
	cmds.note("queued %s (attempt %d, %s)", r.Job, r.Attempt, r.Class)
	return protocol.CapacityReply{Epoch: s.Epoch, Seq: r.Seq}, cmds
}

// ReplyFor completes a request's reply with the job's place in the queue, or
// says it was granted.
func (s *State) ReplyFor(job string, reply protocol.CapacityReply) protocol.CapacityReply {
	if s.Pool.WaitingCount() > explainLimit {
		// Explaining costs a dry-run pass; with a long queue the caller
		// asks for the position when it needs it.
		reply.Reason = fmt.Sprintf("queued behind up to %d waiting jobs", s.Pool.WaitingCount()-1)
		return reply
	}
	if w, ok := s.Pool.Explain(job); ok {
		reply.Position, reply.Reason = w.Position, w.Reason
		return reply
	}
	if _, ok := s.Pool.Running(job); ok {
		reply.Granted = true
	}
	return reply
}

// Standing is what the allocator knows of req after Request, cheaply: its
// epoch, and the attempt's queue sequence if it holds capacity (Granted,
// unless it is releasing it) or waits; neither if the rules refused it or
// sent it to be checked. Its place and why it waits cost a dry-run pass
// (Pool.Explain), which the request update does not run: a replay would run
// it for every request of the run.
func (s *State) Standing(req protocol.CapacityRequest) protocol.CapacityReply {
	reply := protocol.CapacityReply{Epoch: s.Epoch}
	if r, ok := s.Pool.Running(req.Job); ok && r.Attempt == req.Attempt {
		reply.Seq, reply.Granted = r.Seq, !r.Releasing
		return reply
	}
	if w, ok := s.Pool.Waiting(req.Job); ok && w.Attempt == req.Attempt {
		reply.Seq = w.Seq
	}
	return reply
}

// resendGrant answers a repeated request for an attempt the pool has granted
// and that is not stopping: the grant is sent again. The job takes a grant
// only while it waits for that attempt, so a duplicate request (a retried
// activity) changes nothing; but a job reset to before it took its grant
// waits for one that was delivered to the run the reset replaced, and would
// otherwise wait for ever while the pool holds its GPUs.
func (s *State) resendGrant(req protocol.CapacityRequest) ([]Command, bool) {
	r, ok := s.Pool.Running(req.Job)
	if !ok || r.Attempt != req.Attempt || r.Releasing {
		return nil, false
	}
	var cmds commands
	cmds.note("sent %s its grant of attempt %d again: it asked again", req.Job, req.Attempt)
	cmds.add(Signal{Job: req.Job, Name: protocol.SignalGrant, Arg: s.grantSignal(r)})
	return cmds, true
}

// releasingAgain says whether req asks for the attempt the pool holds and is
// releasing (preempted, drained, or stopping). The job that holds it does not
// ask for it again, but a copy of its request can still arrive (a retried
// request, a check racing the grant); a job reset (`temporal workflow reset`)
// to before it took the grant asks for it again and knows nothing of it. Only
// the job can tell which, so it is asked first (CheckForgotten).
func (s *State) releasingAgain(req protocol.CapacityRequest) bool {
	r, ok := s.Pool.Running(req.Job)
	return s.ReclaimsForgotten && s.Epoch != "" && ok && r.Attempt == req.Attempt && r.Releasing
}

// ForgottenAnswered acts on a job's answer to CheckForgotten: hold is what it
// holds or waits for (nil: its run has ended, or was replaced by a reset). A
// job that waits for the very attempt the pool is releasing has forgotten it:
// no run of the job will release its workers, and granting it again would
// start workers on capacity already promised to others. The allocator stops
// the workers itself (a reclaim) and tells the job to rerun as a later
// attempt, which spends no retry; the attempt is remembered (Forgotten), so
// that a late copy of its request, or a request of a run reset to it or to an
// earlier attempt, is told the same instead of being granted again: a node
// keeps what a worker ran under its name, and a worker started again under an
// old name would be taken for the one that ran. A job that holds the attempt
// sent a copy, which is dropped; so is the question once the pool no longer
// releases that attempt.
func (s *State) ForgottenAnswered(req protocol.CapacityRequest, hold *protocol.JobHold, err error) []Command {
	var cmds commands
	switch {
	case !s.releasingAgain(req):
		cmds.note("%s attempt %d is no longer releasing; its request's question is moot", req.Job, req.Attempt)
	case err != nil:
		// The job checks its request again later, and asks anew.
		cmds.warn("could not ask a job whether it forgot the attempt being released; dropping its request", "job", req.Job, "attempt", req.Attempt, "error", err)
	case hold == nil:
		// Ended, or closed under the question by a reset whose run will ask
		// for this attempt again.
		s.rememberForgotten(req.Job, req.Attempt)
		cmds.note("%s's run ended while its attempt %d was being released: reclaiming it", req.Job, req.Attempt)
		cmds.add(Reclaim{Job: req.Job})
	case hold.Phase != protocol.HoldWaiting || hold.Request.Attempt != req.Attempt:
		cmds.note("dropped a copy of %s's request for attempt %d: the job holds it or has moved on", req.Job, req.Attempt)
	default:
		s.rememberForgotten(req.Job, req.Attempt)
		cmds.note("%s waits for attempt %d, which it holds and the allocation is releasing: reclaiming it, and the job reruns", req.Job, req.Attempt)
		cmds.add(Reclaim{Job: req.Job})
		cmds.add(rerun(req.Job, req.Attempt, fmt.Sprintf("the job asked again for attempt %d while the allocation was releasing it (was its workflow reset?): "+
			"the allocator stopped that attempt's workers, and the job reruns without spending max_retry", req.Attempt)))
	}
	return cmds
}

// forgottenSince says whether req asks for an attempt the allocator gave up
// as forgotten, or an earlier one, and which.
func (s *State) forgottenSince(req protocol.CapacityRequest) (int, bool) {
	for _, f := range s.Forgotten {
		if f.Job == req.Job && f.Attempt >= req.Attempt {
			return f.Attempt, true
		}
	}
	return 0, false
}

func (s *State) rememberForgotten(job string, attempt int) {
	s.Forgotten = appendRemembered(s.Forgotten, protocol.WithdrawSignal{Job: job, Attempt: attempt})
}

func (s *State) grantSignal(r scheduler.RunningInfo) protocol.GrantSignal {
	return protocol.GrantSignal{Epoch: s.Epoch, Seq: r.Seq, Attempt: r.Attempt, Placement: r.Placement, OnLoan: r.OnLoan,
		StopGracePeriod: s.Config.StopGracePeriod, NodeTimeout: s.NodeTimeout(),
		Notice: s.Config.NoticeFor(r.Class, r.Kind), NoticeSignal: s.Config.NoticeSignal}
}

// hasNewerAttempt says whether the pool holds or queues a later attempt of
// req's job than req's.
func (s *State) hasNewerAttempt(req protocol.CapacityRequest) bool {
	if w, ok := s.Pool.Waiting(req.Job); ok && w.Attempt > req.Attempt {
		return true
	}
	r, ok := s.Pool.Running(req.Job)
	return ok && r.Attempt > req.Attempt
}

// ResetSettled says whether a job's answer to CheckReset can be acted on: the
// reset run upserts its attempt in the same workflow task that sends the
// request, so the job's record can show the newer attempt for a moment, and
// the workflow asks again, backing off, until it settles or tries run out.
func ResetSettled(req protocol.CapacityRequest, attempts []int, err error) bool {
	return err == nil && len(attempts) == 1 && attempts[0] >= req.Attempt
}

// ResetAnswered serves a request once its job's workflow said which attempt
// it is at. A job asks for one attempt at a time, in order, so a job back at
// the request's attempt was reset (`temporal workflow reset`) to before its
// newer attempt, which belongs to a run that no longer exists: that attempt
// is dropped if waiting, reclaimed if held, and the request queued after. A
// job at another attempt sent a late duplicate, which is dropped. Refusing a
// reset job's request instead would leave it waiting for ever while the
// abandoned workers keep their GPUs.
func (s *State) ResetAnswered(req protocol.CapacityRequest, attempts []int, err error) []Command {
	var cmds commands
	switch {
	case err != nil || len(attempts) != 1:
		cmds.warn("could not tell whether a job was reset; dropping its old request", "job", req.Job, "attempt", req.Attempt, "error", err)
	case attempts[0] != req.Attempt:
		cmds.note("dropped a late request of %s attempt %d: the job is at attempt %d", req.Job, req.Attempt, attempts[0])
	case !s.hasNewerAttempt(req):
		cmds.add(Requeue{Request: req}) // the newer attempt ended meanwhile
	default:
		cmds.add(s.serveReset(req)...)
	}
	return cmds
}

// serveReset drops the reset job's newer waiting attempt, reclaims its newer
// held one, and queues req (after the reclaim, if there is one).
func (s *State) serveReset(req protocol.CapacityRequest) []Command {
	var cmds commands
	newer := 0
	if w, ok := s.Pool.Waiting(req.Job); ok && w.Attempt > req.Attempt {
		newer = w.Attempt
	}
	r, held := s.Pool.Running(req.Job)
	held = held && r.Attempt > req.Attempt
	if newer != 0 {
		s.Pool.CancelAttempt(req.Job, newer)
		cmds.note("%s was reset to attempt %d: dropped the request of its attempt %d", req.Job, req.Attempt, newer)
	}
	if !held {
		cmds.add(Requeue{Request: req})
		return cmds
	}
	cmds.note("%s was reset to attempt %d: reclaiming its attempt %d", req.Job, req.Attempt, r.Attempt)
	s.AfterReclaim = slices.DeleteFunc(s.AfterReclaim, func(q protocol.CapacityRequest) bool { return q.Job == req.Job })
	s.AfterReclaim = append(s.AfterReclaim, req)
	cmds.add(Reclaim{Job: req.Job})
	return cmds
}

// Withdraw takes a job's withdrawal of an attempt: a waiting request is
// dropped; a grant the job never used is freed; a withdrawal that came before
// its request is remembered, so that the request is refused when it comes.
func (s *State) Withdraw(w protocol.WithdrawSignal) []Command {
	var cmds commands
	if q, ok := s.Pool.Waiting(w.Job); ok && q.Attempt == w.Attempt {
		s.Pool.CancelAttempt(w.Job, w.Attempt)
		cmds.note("%s withdrew its request", w.Job)
		return cmds
	}
	// Granted but the job was cancelled before it saw the grant: it started
	// no worker, so the capacity is free at once.
	if r, ok := s.Pool.Running(w.Job); ok && r.Attempt == w.Attempt {
		s.Pool.CancelAttempt(w.Job, w.Attempt)
		cmds.note("%s gave back its grant unused", w.Job)
		return cmds
	}
	s.rememberWithdrawal(w)
	return nil
}

// Release takes a job's release of some of its workers. Nodes where the job
// could not confirm its workers stopped are fenced first, so that their
// capacity never looks free for a moment.
func (s *State) Release(r protocol.ReleaseSignal) []Command {
	if held, ok := s.Pool.Running(r.Job); !ok || held.Attempt != r.Attempt {
		return nil
	}
	var cmds commands
	for _, node := range r.LostNodes {
		why := fmt.Sprintf("%s could not confirm its workers there stopped: the node's agent did not answer", r.Job)
		if slices.Contains(r.GPUsBusy, node) {
			why = fmt.Sprintf("%s found GPUs it was granted there used by a live worker the allocation did not know of", r.Job)
		}
		cmds.add(s.NodeLost(node, why)...)
	}
	if r.Stopping {
		s.Pool.BeginRelease(r.Job)
	}
	for _, w := range r.Workers {
		s.Pool.Release(r.Job, r.Attempt, w)
	}
	cmds.note("%s released worker(s) %v", r.Job, r.Workers)
	return cmds
}

// Pass runs one scheduling pass and turns its decisions into signals: a
// grant whose job is gone frees its capacity again; a preemption whose victim
// is gone reclaims the victim's workers.
func (s *State) Pass(now time.Time) []Command {
	cmds, _ := s.PassAtMost(now, -1)
	return cmds
}

// PassAtMost is Pass that stops once it has decided maxSignals grants and
// preemptions, or more by the victims of its last request (a negative
// maxSignals: no limit; see scheduler.Pool.ScheduleAtMost); more says that
// it stopped with requests it did not look at, and a pass right after goes
// on. The allocator sizes maxSignals to the signals it can send at once, so
// that a pass never decides much more than it can deliver.
func (s *State) PassAtMost(now time.Time, maxSignals int) (cmds []Command, more bool) {
	d := s.Pool.ScheduleAtMost(now, maxSignals)
	s.Pool.SampleForecasts(now, s.stopBound())
	return s.decided(d), d.More
}

// decided turns a pass's decisions into commands.
func (s *State) decided(d scheduler.Decisions) []Command {
	var cmds commands
	for _, g := range d.Grants {
		s.Counters.Grants++
		cmds.note("granted %s attempt %d on %s", g.Job, g.Attempt, scheduler.PlacementText(g.Placement))
		r, _ := s.Pool.Running(g.Job)
		r.Attempt, r.Placement = g.Attempt, g.Placement
		cmds.add(Signal{Job: g.Job, Name: protocol.SignalGrant, Arg: s.grantSignal(r),
			Attempt: g.Attempt, IfGone: GoneFreeGrant})
	}
	for _, p := range d.Preemptions {
		s.Counters.Preemptions++
		victimClass, notice := "unknown", s.Config.PreemptionNotice
		if r, ok := s.Pool.Running(p.Victim); ok {
			victimClass, notice = r.Class.String(), s.Config.NoticeFor(r.Class, r.Kind)
		}
		cmds.add(Count{Metric: MetricPreemption, VictimClass: victimClass, PreemptorClass: p.Preemptor.Class.String()})
		cmds.note("preempting %s for %s", p.Victim, p.Preemptor.Job)
		sig := protocol.PreemptSignal{Epoch: s.Epoch, Attempt: p.VictimAttempt, Preemptor: p.Preemptor, Reason: p.Reason, Notice: notice, Loan: p.Loan, Move: p.Move}
		cmds.add(Signal{Job: p.Victim, Name: protocol.SignalPreempt, Arg: sig, IfGone: GoneReclaim})
	}
	return cmds
}

// GrantNotDelivered frees a grant whose job's workflow is gone: it never saw
// the grant and started nothing.
func (s *State) GrantNotDelivered(job string, attempt int) []Command {
	r, ok := s.Pool.Running(job)
	if !ok || r.Attempt != attempt {
		return nil
	}
	s.Pool.CancelAttempt(job, attempt)
	var cmds commands
	cmds.note("%s vanished before its grant; capacity returned", job)
	cmds.add(Schedule{})
	return cmds
}

// CheckRunning refuses a checkpoint report of a job that does not hold
// capacity here in that attempt.
func (s *State) CheckRunning(r protocol.CheckpointReport) error {
	info, ok := s.Pool.Running(r.Job)
	if !ok {
		return fmt.Errorf("job %s is not running on allocation %s; only a running attempt can report a checkpoint",
			r.Job, s.Name())
	}
	if info.Attempt != r.Attempt {
		return fmt.Errorf("job %s runs attempt %d, not attempt %d", r.Job, info.Attempt, r.Attempt)
	}
	return nil
}

// Checkpoint stamps a running attempt's checkpoint report with the
// allocator's clock. It changes no decision by itself, so it asks for no
// pass: the next pass that looks for victims weighs it.
func (s *State) Checkpoint(r protocol.CheckpointReport, now time.Time) (protocol.CheckpointReply, []Command, error) {
	if err := s.CheckRunning(r); err != nil {
		return protocol.CheckpointReply{}, nil, err
	}
	if err := protocol.CheckProgress(r.Progress); err != nil {
		return protocol.CheckpointReply{}, nil, err
	}
	var cmds []Command
	if r.Progress > 0 && s.Pool.Progressed(r.Job, r.Attempt, now, r.Progress) {
		// Backfill may time a reservation by it.
		cmds = append(cmds, Note{Text: fmt.Sprintf("progress %s %.0f%%", r.Job, 100*r.Progress)}, Schedule{})
	}
	if !s.Pool.Checkpointed(r.Job, r.Attempt, now) {
		// The same instant as an earlier report, or before the attempt's start.
		info, _ := s.Pool.Running(r.Job)
		return protocol.CheckpointReply{Job: r.Job, Attempt: r.Attempt, At: info.CheckpointAt}, cmds, nil
	}
	return protocol.CheckpointReply{Job: r.Job, Attempt: r.Attempt, At: now}, append(cmds, Note{Text: "checkpoint " + r.Job}), nil
}
