package allocation

import (
	"fmt"

	"github.com/trainq/trainq/protocol"
)

// Command is what a rule asks the workflow to do. The workflow executes a
// rule's commands in the order returned; the order is part of the recorded
// history, so a rule must not reorder them without a gate.
type Command interface{ command() }

// Signal sends a signal to a job's workflow. IfGone says what the allocation
// does if that workflow no longer exists.
type Signal struct {
	Job  string
	Name string
	Arg  any
	// Attempt is the attempt a grant is for (see GoneFreeGrant).
	Attempt int
	IfGone  Gone
}

// Gone is what to do when a signal's job workflow no longer exists.
type Gone int

const (
	// GoneIgnore: the job held nothing the signal could change.
	GoneIgnore Gone = iota
	// GoneFreeGrant: the job never saw its grant and started nothing, so
	// the grant's capacity is free again (see GrantNotDelivered).
	GoneFreeGrant
	// GoneReclaim: the job's workers may still run; reclaim them.
	GoneReclaim
)

// FenceNode takes a node out of scheduling until its agent confirms which
// workers run there (the rule has marked it fenced already).
type FenceNode struct{ Node string }

// Reclaim stops a vanished job's workers, then frees its capacity.
type Reclaim struct{ Job string }

// CheckReset asks a job's workflow which attempt it is at before a request
// for an older attempt than the pool's is served (see Request).
type CheckReset struct{ Request protocol.CapacityRequest }

// CheckForgotten asks a job's workflow what it holds before a request for
// the attempt the pool is releasing is taken as forgotten (see Request and
// ForgottenAnswered).
type CheckForgotten struct{ Request protocol.CapacityRequest }

// Requeue takes a request in again as if it had just come (a reset job's
// request once its newer attempt is reclaimed).
type Requeue struct{ Request protocol.CapacityRequest }

// Schedule asks for a scheduling pass.
type Schedule struct{}

// Note records the latest event, for people (the Web UI's details).
type Note struct{ Text string }

// Warn is a warning for the worker's log.
type Warn struct {
	Msg string
	KV  []any
}

// Count adds one to a metric.
type Count struct {
	Metric Metric
	// VictimClass and PreemptorClass label a preemption.
	VictimClass, PreemptorClass string
}

// Metric names a counter the allocator keeps.
type Metric int

const (
	MetricPreemption Metric = iota
	MetricReclaimed
)

func (Signal) command()         {}
func (FenceNode) command()      {}
func (Reclaim) command()        {}
func (CheckReset) command()     {}
func (CheckForgotten) command() {}
func (Requeue) command()        {}
func (Schedule) command()       {}
func (Note) command()           {}
func (Warn) command()           {}
func (Count) command()          {}

// commands collects a rule's commands in order.
type commands []Command

func (c *commands) add(cmd ...Command) { *c = append(*c, cmd...) }

func (c *commands) note(format string, args ...any) {
	*c = append(*c, Note{Text: fmt.Sprintf(format, args...)})
}

func (c *commands) warn(msg string, kv ...any) { *c = append(*c, Warn{Msg: msg, KV: kv}) }

// rerun tells a job that its attempt was given up for it: it reruns as a
// later attempt without spending max_retry.
func rerun(job string, attempt int, reason string) Signal {
	return Signal{Job: job, Name: protocol.SignalRefuse, Arg: protocol.RefuseSignal{Attempt: attempt, Reason: reason, Rerun: true}}
}

func refuse(job string, attempt int, reason string) Signal {
	return Signal{Job: job, Name: protocol.SignalRefuse, Arg: protocol.RefuseSignal{Attempt: attempt, Reason: reason}}
}
