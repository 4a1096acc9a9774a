package workflows

// Found by an adversarial review of the recovery and reset paths; each
// failed before its fix.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// a real reset to attempt 2 while attempt 3 holds. The reset run's
// request is sent by a local activity inside the workflow task that also
// upserts TrainqAttempt=2, so until that task completes Describe still says
// attempt 1 (the value before the reset point). CurrentAttempts answering 1
// makes the allocator drop the request for good: the job waits for ever and
// the abandoned attempt 3 keeps its GPUs.
func TestResetRequestWaitsForTheJobsAttemptToShow(t *testing.T) {
	h := newAllocHarness(t)
	h.attempts["j"] = 3
	h.signalRequest(time.Minute, fixture.Request{Job: "j", Attempt: 3, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	reset := fixture.Request{Job: "j", Attempt: 2, Class: scheduler.Medium, Workers: 1, Seq: 1, SubmittedAt: testStart}.Capacity()
	h.at(3*time.Minute, func() {
		h.mu.Lock()
		h.attempts["j"] = 1 // Describe: the reset run's upsert of 2 is not recorded yet
		h.mu.Unlock()
		h.env.SignalWorkflow(protocol.SignalRequest, reset)
	})
	h.at(3*time.Minute+time.Second, func() {
		h.mu.Lock()
		h.attempts["j"] = 2 // the job's workflow task completed
		h.mu.Unlock()
	})
	h.runAllocator(allocInput(allocNodes(1, 2)), time.Hour)

	g := h.grantsTo("j")
	t.Logf("grants to j: %d; refusals: %d; stops: %d", len(g), len(h.refusals), len(h.stops))
	v := h.queue()
	t.Logf("running: %+v waiting: %v", v.Running, waitingJobs(v))
	assert.Len(t, g, 2, "the reset job's attempt 2 was never granted (and never refused): it waits for ever")
	assert.NotEmpty(t, h.stops, "the abandoned attempt 3 was never reclaimed")
}

// a reset's reclaim is slow (its StopWorker retries); an operator
// recovery meanwhile rebuilds the pool from the jobs, the reset job is
// granted attempt 1, fails fast, and is granted attempt 2 (of the reset run).
// The pre-recovery reclaim goroutine then finishes and, matching by attempt
// number only, cancels the HEALTHY new attempt 2, then replays the stale
// afterReclaim request of attempt 1.
func TestReclaimOutlivingARecoveryChangesNothing(t *testing.T) {
	h := newAllocHarness(t)
	h.stopDelay = 50 * time.Second
	h.attempts["j"] = 2
	h.signalRequest(time.Minute, fixture.Request{Job: "j", Attempt: 2, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	reset := fixture.Request{Job: "j", Attempt: 1, Class: scheduler.Medium, Workers: 1, Seq: 1, SubmittedAt: testStart}.Capacity()
	h.at(3*time.Minute, func() {
		h.mu.Lock()
		h.attempts["j"] = 1
		h.mu.Unlock()
		h.env.SignalWorkflow(protocol.SignalRequest, reset)
	})
	// recovery while the reclaim's StopWorker is running
	h.at(3*time.Minute+5*time.Second, func() {
		h.mu.Lock()
		h.holds = []protocol.JobHold{{Job: "j", Phase: protocol.HoldWaiting, Request: reset}}
		h.mu.Unlock()
	})
	h.recoverAt(3*time.Minute + 6*time.Second)
	// attempt 1 granted after recovery; it fails at once and asks for attempt 2
	h.at(3*time.Minute+20*time.Second, func() {
		h.mu.Lock()
		h.attempts["j"] = 2
		h.mu.Unlock()
		h.env.SignalWorkflow(protocol.SignalRelease, protocol.ReleaseSignal{Job: "j", Attempt: 1, Workers: []int{0}, Stopping: true})
	})
	a2 := fixture.Request{Job: "j", Attempt: 2, Class: scheduler.Medium, Workers: 1, Seq: 1, SubmittedAt: testStart}.Capacity()
	h.signalRequest(3*time.Minute+21*time.Second, a2)
	var mid protocol.QueueView
	h.at(3*time.Minute+30*time.Second, func() { mid = h.queue() })
	h.runAllocator(allocInput(allocNodes(1, 2)), 10*time.Minute)

	for _, g := range h.grantsTo("j") {
		t.Logf("grant j attempt %d epoch %s", g.Attempt, g.Epoch)
	}
	t.Logf("mid: running %+v", mid.Running)
	v := h.queue()
	t.Logf("end: running %+v waiting %v counters %+v", v.Running, waitingJobs(v), v.Counters)
	for _, s := range h.stops {
		t.Logf("stop %+v", s.ID)
	}
	if len(mid.Running) == 1 && mid.Running[0].Attempt == 2 {
		stillHeld := len(v.Running) == 1 && v.Running[0].Job == "j" && v.Running[0].Attempt == 2
		assert.True(t, stillHeld, "the healthy attempt 2 granted after the recovery lost its hold")
	}
}

// a job that is WAITING (no workers anywhere) and does not answer
// recovery's register update (its worker is stuck for a minute) is reported
// Unanswered and then forgotten: no node holds a worker of it, so no fence's
// registerStrangers asks it again, and it never sends its request again. It
// waits for ever although the pool is empty.
func TestWaitingJobThatDidNotAnswerIsAskedAgain(t *testing.T) {
	h := newAllocHarness(t)
	w := fixture.Request{Job: "w", Attempt: 1, Class: scheduler.Medium, Workers: 1, Seq: 1, SubmittedAt: testStart}.Capacity()
	h.holds = []protocol.JobHold{{Job: "w", Phase: protocol.HoldWaiting, Request: w}}
	h.silent["w"] = true
	h.at(2*time.Minute, func() { // its worker is back: it would answer now
		h.mu.Lock()
		delete(h.silent, "w")
		h.mu.Unlock()
	})
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)
	v := h.queue()
	t.Logf("waiting %v running %d registerCalls %d", waitingJobs(v), len(v.Running), len(h.registerCalls))
	assert.NotEmpty(t, h.grantsTo("w"), "the unanswered waiting job was never asked again nor granted")
}
