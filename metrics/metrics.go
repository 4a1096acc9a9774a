// Package metrics is trainq's Prometheus instrumentation: the metric names,
// the registry that trainq-worker serves on /metrics, and the collector that
// derives the gauges from the allocators' state.
//
// Two kinds of metrics share one registry:
//
//   - Gauges (GPUs by state, waiting and running jobs) are read from each
//     allocator's queue query at scrape time (see Collector). They are right
//     the moment a worker starts, without waiting for an event, and can never
//     drift from the allocator's durable state.
//   - Counters and histograms are events that happen inside the workflows.
//     The workflows emit them through workflow.GetMetricsHandler, which the
//     Temporal SDK makes replay-aware: when a worker replays a history (after
//     a restart or a cache eviction) nothing is emitted again, so nothing is
//     counted twice. The handler is the SDK's contrib/opentelemetry handler
//     over the OpenTelemetry Prometheus exporter, which also carries the SDK's
//     own metrics (task latencies, failures, poller counts) into the same
//     registry.
package metrics

import (
	"strings"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// Metric names, as scraped from /metrics. Counters end in _total, durations
// in _seconds.
const (
	// Gauges, from allocator state.
	GPUs        = "trainq_gpus"         // {region,allocation,state}: state = allocated, releasing, free
	WaitingJobs = "trainq_waiting_jobs" // {region,allocation,priority}
	RunningJobs = "trainq_running_jobs" // {region,allocation,priority}
	AllocatorUp = "trainq_allocator_up" // {region,allocation}: 1 if the last queue query answered

	// Counters, from the workflows through the replay-aware handler.
	Preemptions       = "trainq_preemptions_total"               // {region,allocation,victim_priority,preemptor_priority}
	JobRestarts       = "trainq_job_restarts_total"              // {region,allocation,priority,reason}: reason = preempted, failed
	JobsFinished      = "trainq_jobs_finished_total"             // {region,allocation,priority,state}
	JobsStuck         = "trainq_jobs_stuck_total"                // {region,allocation,priority}: health_params with sub_actions [notify]
	LeakedReclaimed   = "trainq_leaked_capacity_reclaimed_total" // {region,allocation}
	QueueWait         = "trainq_queue_wait_seconds"              // histogram {region,allocation,priority}: queued → Running, per attempt
	SchedulingPass    = "trainq_scheduling_pass_seconds"         // histogram {region,allocation}
	sdkTaskLatency    = "temporal_workflow_task_execution_latency_seconds"
	sdkActLatency     = "temporal_activity_execution_latency_seconds"
	sdkScheduleToStrt = "temporal_workflow_task_schedule_to_start_latency_seconds"
	sdkTaskFailed     = "temporal_workflow_task_execution_failed_total"
	sdkActFailed      = "temporal_activity_execution_failed_total"
	sdkRequestFailed  = "temporal_request_failure_total"
)

// Label names.
const (
	LabelRegion            = "region"
	LabelAllocation        = "allocation"
	LabelState             = "state"
	LabelPriority          = "priority"
	LabelReason            = "reason"
	LabelVictimPriority    = "victim_priority"
	LabelPreemptorPriority = "preemptor_priority"
)

// Restart reasons.
const (
	ReasonPreempted = "preempted"
	ReasonFailed    = "failed"
	ReasonNodeLost  = "node_lost"
	ReasonStuck     = "stuck"
	// ReasonNodeDrained: an operator drained a node of the attempt.
	ReasonNodeDrained = "node_drained"
)

// Trainq lists every metric trainq itself exports. A counter or histogram
// has no sample until its first event, so tests check dashboards against
// this list rather than against one scrape.
var Trainq = []string{GPUs, WaitingJobs, RunningJobs, AllocatorUp,
	Preemptions, JobRestarts, JobsFinished, JobsStuck, LeakedReclaimed, QueueWait, SchedulingPass}

// SDK lists the Temporal SDK metrics the dashboard uses, as the OpenTelemetry
// exporter names them (the SDK's timers are histograms in seconds).
var SDK = []string{sdkTaskLatency, sdkActLatency, sdkScheduleToStrt, sdkTaskFailed, sdkActFailed, sdkRequestFailed}

// Known says whether name (possibly with a histogram's _bucket, _sum or
// _count suffix) is a metric trainq-worker exports.
func Known(name string) bool {
	for _, list := range [][]string{Trainq, SDK} {
		for _, n := range list {
			if name == n || name == n+"_bucket" || name == n+"_sum" || name == n+"_count" {
				return true
			}
		}
	}
	return false
}

// instrument is the name a workflow passes to the SDK's metrics handler: the
// exporter adds _total to counters and _seconds to timers itself.
func instrument(name string) string {
	name = strings.TrimSuffix(name, "_total")
	return strings.TrimSuffix(name, "_seconds")
}

// Instrument names for workflow code (see instrument).
var (
	PreemptionsInstrument     = instrument(Preemptions)
	JobRestartsInstrument     = instrument(JobRestarts)
	JobsFinishedInstrument    = instrument(JobsFinished)
	JobsStuckInstrument       = instrument(JobsStuck)
	LeakedReclaimedInstrument = instrument(LeakedReclaimed)
	QueueWaitInstrument       = instrument(QueueWait)
	SchedulingPassInstrument  = instrument(SchedulingPass)
)

// Tags are the labels of an allocation.
func Tags(region, allocation string) map[string]string {
	return map[string]string{LabelRegion: region, LabelAllocation: allocation}
}

// Counts are the gauges of one allocation, derived from its queue view.
type Counts struct {
	GPUs    map[string]int // by state: allocated, releasing, free
	Waiting map[string]int // by priority class
	Running map[string]int // by priority class
}

// GPU states.
const (
	StateAllocated = "allocated"
	StateReleasing = "releasing"
	StateFree      = "free"
)

// CountsOf derives an allocation's gauges from the allocator's view. Every
// state and every class is present, so that dashboards show zeros, not gaps.
func CountsOf(v protocol.QueueView) Counts {
	c := Counts{GPUs: map[string]int{StateAllocated: 0, StateReleasing: 0, StateFree: 0}, Waiting: map[string]int{}, Running: map[string]int{}}
	for _, class := range []scheduler.Class{scheduler.Low, scheduler.Medium, scheduler.High} {
		c.Waiting[class.String()], c.Running[class.String()] = 0, 0
	}
	gpus := v.GPUTotals()
	c.GPUs[StateAllocated], c.GPUs[StateReleasing], c.GPUs[StateFree] = gpus.Allocated, gpus.Releasing, gpus.Free
	if v.WaitingByClass != nil {
		// The view lists only the head of a long queue; the counts cover all.
		for class, n := range v.WaitingByClass {
			c.Waiting[class] = n
		}
	} else {
		for _, w := range v.Waiting {
			c.Waiting[w.Class.String()]++
		}
	}
	for _, r := range v.Running {
		c.Running[r.Class.String()]++
	}
	return c
}
