// Package scheduler is trainq's scheduling policy for one allocation (a pool of GPU nodes).
//
// It is pure and deterministic so that it can run inside a Temporal workflow: it never reads the
// clock (time is passed in), starts no goroutines, uses no randomness and never depends on map
// iteration order. The allocator workflow calls Pool.Schedule on every event and applies the
// returned Decisions; the UI asks Pool.View / Pool.Explain why a job waits.
//
// # Rules
//
//   - Classes rank high > medium > low; medium is the default. Notebooks (Jupyter servers) are
//     always high and are never preempted.
//   - Waiting requests are ordered by class (high first), then by queue sequence (Seq). A
//     re-queued (preempted) job keeps its Seq and so returns to the front of its class.
//   - A request needs Workers workers, each with the whole per-worker Demand on one node of the
//     requested family, all on distinct nodes, all at once (gang). GPUs are handed out as the
//     lowest free indices on the node. Placement is best-fit: the feasible nodes that leave the
//     fewest free GPUs, then the fewest free CPU cores, then config order.
//   - Capacity is free only when no worker holds it. A stopping job's capacity is "releasing": it
//     is never granted to anyone and becomes free worker by worker, as each Release is reported.
//   - Schedule walks the waiting requests in order. For each request:
//     (a) if it fits on free capacity not reserved for a better request, it is granted;
//     (b) else, if it fits on free plus releasing capacity not reserved for a better request,
//     that capacity is reserved (nominated) for it and it waits;
//     (c) else it may preempt (see below); the victims' capacity becomes releasing and is
//     nominated to it. Nominations are derived afresh on every pass, so a better request that
//     arrives later takes them over and nothing leaks.
//   - Queueing best-effort-fifo (default): a later request may use capacity no better request
//     has reserved. strict-fifo: after the first request that cannot start in a pass, nothing
//     later starts, reserves or preempts in that pass.
//   - A lost node (Pool.MarkNodeLost: its agent stopped answering) is fenced: nothing is granted on
//     it and no pass counts its free or releasing capacity for anyone, so nothing is nominated on
//     it and nobody is preempted for capacity there. Jobs placed on it keep holding until they are
//     Released or Cancelled, as anywhere else. Pool.MarkNodeUp returns it to scheduling.
//   - Admission (Pool.Admit) rejects requests that could not fit even the empty pool.
//   - Pool.Adopt rebuilds a lost allocator state from the jobs: it records a job that already holds
//     capacity as if it had been granted its placement, and refuses anything held twice.
//   - Pool.Reconfigure swaps nodes and policy all-or-nothing: nodes may be added or reordered; a
//     node may be removed or changed only while no running or releasing job is placed on it.
//     Waiting requests that no longer pass Admit are removed and returned to the caller.
//
// # Victim ordering
//
// A request that fits neither on free nor on free+releasing capacity may preempt running (not
// already releasing) jobs of a strictly lower class, never of an equal or higher class and never
// notebooks, and only jobs that have run for at least Policy.MinRuntimeBeforePreemption.
// Candidates are ordered lowest class first, then most recently started first (then by job id),
// as Kueue and Slurm do. They are added greedily in that order until the request would fit on
// free + releasing + victims' capacity; then a minimisation pass walks the chosen victims in
// reverse order of addition and drops every victim the request still fits without. The result is
// the fewest, least valuable, least progressed jobs. Victims become releasing and remember their
// preemptor (RunningInfo.PreemptedBy).
package scheduler
