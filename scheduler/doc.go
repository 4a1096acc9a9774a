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
//     re-queued (preempted) job keeps its Seq and so returns to the front of its class. With
//     Policy.Ordering fair-share, a class is ordered by its workspaces' and users' recent usage
//     before Seq (see Fair share).
//   - A request needs Workers workers, each with the whole per-worker Demand on one node of the
//     requested family, all on distinct nodes, all at once (gang). GPUs are handed out as the
//     lowest free indices on the node.
//   - A request with allowed nodes (Request.Nodes: ML Space's include_nodes minus exclude_nodes,
//     within its queue's nodes) is placed only on those of its family: every rule below reads
//     "node" as "allowed node" for it. It is granted, holds free and releasing capacity, starts
//     on capacity nominated to it and reserves nodes only there; it preempts, or takes over
//     nominated capacity, only for capacity there: the victim search looks at no other node, and
//     counts no victim's capacity elsewhere. A victim with workers on several nodes still stops
//     them all, and all its capacity is nominated to its preemptor as for any other, also on
//     nodes the preemptor may not use, until it starts. Requests that differ only in their
//     allowed nodes are of different shapes: one failing in a pass tells nothing of the other.
//     An empty list means any node of the family; names of nodes of other families are never
//     used; the pool keeps the list sorted, each name once.
//   - Capacity is free only when no worker holds it. A stopping job's capacity is "releasing": it
//     is never granted to anyone and becomes free worker by worker, as each Release is reported.
//   - Capacity of a preempted job is nominated to its preemptor: while the job stops, and once
//     a worker has stopped, the free capacity it left (a hold), until the preemptor is granted or
//     withdrawn. No other request sees nominated capacity, but a request of a strictly higher
//     class may take it over (rule c). Capacity nominated to a request that was granted stays out
//     of sight until the victim has stopped, and for free capacity until the next event.
//   - Schedule walks the waiting requests in order. For each request:
//     (a) a request for which jobs were preempted (not one that took their capacity over) waits
//     for that capacity rather than start elsewhere: if it fits on nodes that include capacity of
//     its victims (those first), it starts there if they are free, else it holds them and waits,
//     and capacity freed elsewhere meanwhile serves the requests behind it;
//     (b) if it fits on free capacity, it is granted: best fit, the feasible nodes that leave the
//     fewest free GPUs, then the fewest free CPU cores, then config order (nodes with capacity
//     nominated to it first);
//     (b') else an elastic gang (Request.MinWorkers: torchrun's --nnodes=min:max) that fits with
//     fewer workers, at least MinWorkers, starts on free capacity with as many as fit, on the
//     nodes rule (b) would choose first; a started gang keeps its size (its grant's placement
//     says how many workers it got), and it is not grown when capacity frees later. Free
//     capacity now beats holding or preempting for the whole gang;
//     (c) else, if it fits on free plus releasing capacity, it holds that capacity and waits: the
//     nodes with capacity nominated to it first, then those that need the least releasing
//     capacity, then config order (no best fit here, so that a second pass holds what the first
//     held); on each node free capacity is taken first. An elastic gang that cannot hold its
//     whole size holds its least, as it would preempt for it, so that what frees there is not
//     taken by a later request that the next pass would preempt;
//     (d) else it may preempt (see below) or take over capacity nominated to a strictly
//     lower-class request; the victims' capacity becomes releasing and nominated to it;
//     an elastic gang preempts for the whole gang if that can be made, else for MinWorkers
//     (as Kueue's partial admission tries the full count first), and once its victims stop it
//     starts with as many workers as fit; it waits for, and reserves, its least size;
//     (e) else, a medium or low request (with Policy.Backfill, of any class) that has been the
//     first waiting request of its class for Policy.ReserveAfter reserves the nodes where it will
//     fit soonest (see Reservations, and Backfill for how a reservation with a start binds).
//   - Queueing best-effort-fifo (default): a later request may use capacity no better request
//     holds. strict-fifo: after the first request that cannot start in a pass, nothing later
//     starts, holds, preempts or reserves in that pass.
//   - A second pass at the same instant, with no event in between, decides nothing. A pass with no
//     event since a pass that decided nothing returns at once, unless Pool.NextWake has come (a
//     running job reached MinRuntimeBeforePreemption, or a class's first request reached
//     ReserveAfter or StarvationAfter); the allocator should call Schedule then. A pass that runs keeps its working
//     copy of the nodes' capacity from the last pass and restores only the nodes that changed
//     since, so its cost grows with the waiting requests it walks and the nodes touched, not with
//     the pool's size.
//   - Pool.ScheduleAtMost is a pass for a caller that can act on only so many decisions at once
//     (the allocator sends each grant and preemption as a signal, at most
//     protocol.AllocatorSignalsInFlight in flight): once it has decided that many grants and
//     preemptions it stops before the next waiting request, deciding nothing for it or any after
//     it (no grant, hold, preemption or reservation; the first request of a class it did not
//     reach keeps what it reserved), and says so (Decisions.More); the victims
//     of its last request may take it past the limit. What it decided is what a full pass decides
//     for the requests before the cut, and the pool counts as changed, so the next pass walks the
//     queue again from its head; passes at the same time end where one full pass would (the
//     property test checks both).
//   - A lost node (Pool.MarkNodeLost: its agent stopped answering) is fenced: nothing is granted on
//     it and no pass counts its free or releasing capacity for anyone, so nothing is nominated on
//     it and nobody is preempted for capacity there. Jobs placed on it keep holding until they are
//     Released or Cancelled, as anywhere else. Pool.MarkNodeUp returns it to scheduling.
//   - Limits (Policy.Limits) cap the GPUs a workspace (Request.Workspace) may hold in a class:
//     the unreleased workers of its running and releasing jobs of that class, plus the capacity
//     nominated to its waiting requests of that class when the pass begins, plus what its
//     requests take in the pass. Before rules (a) to (e), a request whose cap leaves room for
//     fewer GPUs than it needs (an elastic gang: at its least size), counting as its own the
//     capacity nominated to it already, is capped: it waits, and is skipped as if it were not
//     there (it is no strict-fifo blocker, preempts, holds and reserves nothing); an elastic
//     gang whose room is below its size starts (rule b') or preempts for its least size, with
//     no more workers than its room. A cap never makes a victim, and capped requests bypass
//     the failure caches (their outcome depends on more than their shape).
//   - Admission (Pool.Admit) rejects requests that could not fit even the empty pool (an elastic
//     gang: at its least size): among them
//     a request whose allowed nodes name a node not in the pool, or leave fewer nodes of its
//     family large enough for a worker than it has workers. A running job's allowed nodes are not
//     checked (Pool.Adopt, Restore): it holds its placement already.
//   - Pool.Adopt rebuilds a lost allocator state from the jobs: it records a job that already holds
//     capacity as if it had been granted its placement, and refuses anything held twice. It cannot
//     know nominations, holds, reservations or checkpoints; they start afresh.
//   - Pool.Reconfigure swaps nodes and policy all-or-nothing: nodes may be added or reordered; a
//     node may be removed or changed only while no running or releasing job is placed on it.
//     Waiting requests that no longer pass Admit (a node they are allowed on was removed, say) are
//     removed and returned to the caller.
//
// # Victim ordering
//
// A request that can neither start nor hold enough free and releasing capacity may preempt
// running (not already releasing) jobs that are all of:
//
//   - of a strictly lower class, and not notebooks;
//   - running for at least Policy.MinRuntimeBeforePreemption;
//   - preempted fewer than Policy.MaxPreemptions times so far (default 3; max_preemptions in the
//     config, -1 for no limit), counting every attempt of the job (see Request.Preemptions);
//   - such that preempting them loses at most Policy.MaxLossGPUHours of work (default 24;
//     max_loss_gpu_hours in the config, -1 for no limit): their GPUs × the time since their
//     attempt started or since their last checkpoint (Pool.Checkpointed), whichever is later.
//
// The second and fourth of these do not hold against a starving request (see Starvation; nor
// the third, once), nor against the owner of a backfill reservation for a job that overran on
// its nodes (see Backfill). With Policy.LossWithinWait the fourth is not waived but widened:
// such a request may preempt a job that MaxLossGPUHours protects only if the job's work at
// stake is at most the GPU-hours the request has waited, its GPUs (an elastic gang: at its
// least size) × the time since it was submitted. A request then never throws away more work
// than the wait it ends; with estimates that are often wrong (learned ones), waiving the limit
// outright lost 3 to 6 % of the useful GPU-hours in trainq simulate, mostly long multi-GPU
// medium jobs preempted by starving high requests.
//
// The work at stake of a job that honours its preemption notice is counted from the notice's
// deadline instead: with Policy.PreemptionNotice > 0 (the allocation's preemption_notice), a
// running job whose request says HonorsNotice (on its earlier preemptions with a notice it saved a
// checkpoint and exited before the deadline) is taken to save when told and to be gone by the
// deadline, the pass's time + PreemptionNotice; preempting it loses GPUs × max(0, now −
// deadline) = nothing, whatever it ran since its last checkpoint. Such a job is never ruled out by
// MaxLossGPUHours (MaxPreemptions and MinRuntimeBeforePreemption still apply), and in the order
// below it loses the least. The pool trusts the flag; with PreemptionNotice 0 it means nothing.
//
// It may also take over capacity nominated to a request of a strictly lower class (that loses no
// work). On each node of its family (not lost, not reserved in this pass, one of its allowed
// nodes if it has any), the candidates are ordered by:
//
//  1. class, lowest first (for a takeover, the class of the request it takes from);
//  2. a takeover before a preemption;
//  3. for preemptions: unprotected before protected, where a job is protected while its current
//     attempt, after k earlier preemptions, has run less than 15m × 2^(k-1) (at most 24h);
//  4. the least work lost: first the jobs that honour their notice (they lose none), then the
//     GPUs the job holds × the time since its attempt started or last checkpointed, compared
//     exactly (to the nanosecond, not in whole seconds); then that time;
//  5. job id (for takeovers, the nomination's age).
//
// This order is not re-sorted on every pass. Each node keeps its running jobs (not stopping, not
// notebooks) in a list sorted by class, the GPUs the job holds, then the start of the work at
// stake (latest first; a job that honours its notice counts as later than any), then job id; the
// list changes only when a job starts, stops or reports a checkpoint, and a reconfiguration
// rebuilds it. Among jobs of one class and GPU count that order is the order of rule 4 at any
// time (the same GPUs × a longer time is more work), so a victim search merges, per class, the
// runs of each GPU count by rules 4 and 5, and puts the protected jobs (rule 3; only jobs
// restarted after a preemption) after them, sorted. Takeovers, a handful per node, are sorted.
//
// In that order, every candidate that frees nothing the worker still lacks on that node (no job
// is preempted for a resource it does not hold) is skipped and the others are added until one
// worker fits there; then, walking the chosen ones backwards, every one the worker fits without
// is dropped. Nodes are then ranked by the highest class among their victims, the number of
// protected victims, the work lost (in whole GPU-seconds, then seconds), the number of victims,
// and config order, and the cheapest
// nodes are taken until every worker has a node (nodes that fit without victims count first).
// Finally the union of their victims, walked from the most valuable down, drops every victim the
// request still fits without (a job with workers on several nodes may make another unneeded).
// The result is the set that loses the least work, not the fewest jobs: eight 1-GPU jobs that ran
// an hour go before one 8-GPU job that ran two. Victims become releasing and remember their
// preemptor (RunningInfo.PreemptedBy).
//
// # Topology
//
// With Policy.Topology (levels, coarsest first) and each node's domain at every level
// (Node.Topology), placement keeps gangs together. How a gang shares the levels is its own
// Request.Topology, else the allocation's Policy.GangTopology, else the finest level preferred:
//
//   - A preferred level never makes a gang wait. The gang takes, of the candidates it would take
//     without a topology (the same nodes, in cmpNodeCandidate order), the first k of one domain of
//     that level, the domain whose k-th candidate comes earliest in that order; if no such domain
//     holds k, the same one level up; else the first k, as without a topology. A gang with
//     capacity nominated to it (its victims') takes the first k, those nodes first; and where
//     releasing capacity counts (a request that will wait), a node that needs some competes only
//     if the k-th does. So a gang starts exactly when it would without a topology, on the same
//     nodes whenever those are one domain, and never leaves what was preempted for it unused. An
//     elastic gang that does not fit whole takes as many workers as fit first, then the same
//     rule. Preemption, reservations and backfill choose nodes as without a topology.
//   - A required level binds every rule: the gang starts, holds releasing capacity and reserves
//     only inside one domain of that level, by the same order (no level up, no fallback); an
//     elastic gang starts with as many workers as one domain holds, at least its least size. When
//     it preempts, it frees one domain: of the domains its victims could make hold it, the one
//     whose cheapest nodes cost least (the node costs of the Victim ordering, added up: highest
//     class, then protected victims, then lost work), so victims spread over several domains are
//     never chosen. Admission refuses a required level that no domain (within the allowed nodes)
//     has enough nodes for, naming the field; a reconfigure that leaves none ends the waiting
//     request with that reason. While it waits, Explain says that the nodes with room are spread
//     out, and how many one domain has; past DefragmentAfter it may move smaller jobs out of one
//     domain (see Defragmentation).
//   - A single worker is placed by best fit alone. (Filling the busiest rack first among nodes
//     that fit alike kept more racks whole for gangs in trainq simulate, but made the 4+-GPU
//     jobs' p95 wait worse by more than a tenth in 14 of 40 runs where gang placement alone did
//     in 5.)
//   - A node's topology steers only placement: a reconfigure may relabel a node while jobs run
//     there, even a gang that required its domain.
//
// # Defragmentation
//
// A gang whose topology level is required, that has waited Policy.DefragmentAfter (default 15
// minutes) since it was submitted and can neither start, hold capacity nor preempt, moves smaller
// jobs out of one domain of that level instead of waiting for it to drain by chance. One gang of
// a class at a time: in a pass, such gangs of each class look in launch order until one moves
// jobs, one per shape (a gang no move can help must not stop the others: in trainq simulate
// every gang of a class once waited weeks behind one whose only rack a long gang held), and none
// of a class does while a job moved for a gang of that class is still stopping, so a second pass
// at the same instant decides no new move and a long queue of gangs costs a pass at most one
// search per gang shape and class. (Gangs of two classes may count one free node as their
// movers' landing place in one pass.) Per domain it counts the nodes a worker
// fits on already (free and releasing capacity in its sight) and, for the rest, what it takes to
// clear a node: the movable jobs there, those losing the least work first, then the fewest GPUs,
// until a worker fits. A job is movable if it runs one worker (it can rerun whole on one node), is
// not a notebook, is of the gang's class or below, has run Policy.MinRuntimeBeforeMove in its
// attempt (default an hour, so that none moves more often), would lose no more work than
// MaxLossGPUHours allows a preemption to (none if it saves on its notice), is under
// MaxPreemptions (a move counts as a preemption) and has not opted out (Request.NoMove). The gang
// takes the domain whose movers lose the least work in all, then hold the fewest GPUs, then are
// fewest, then the lowest domain, at most 16 movers, and only if every mover fits, one after
// another, on free capacity of its family outside that domain within its allowed nodes. That
// capacity is not held for the movers: a request ahead of one in the queue may take it first,
// and the mover then waits in its place. The movers are told as victims are (Preemption.Move:
// the allocation's notice, reason defragment), their capacity is nominated to the gang, which
// waits for it by rule (a), and each reruns without spending a retry, keeping its place in the
// queue. While the gang waits, a mover's next attempt is placed only outside the domain it left:
// ahead of the gang in the queue, it would otherwise take back the capacity the gang counts on
// there (even its own node, nominated to the gang: see (a)), and be moved again. Once the gang
// starts or leaves the queue, the mover may be placed anywhere again. Moves come after preemption: a gang preempts strictly lower classes when it can, and
// moves only when it cannot; a low gang moves low jobs.
//
// # Reservations
//
// With Policy.ReserveAfter > 0 (the config default is 30m), a medium or low request that has been
// the first waiting request of its class for that long, and can neither start, hold capacity nor
// preempt, reserves nodes so that they drain for it: per node (of its allowed nodes, if it has
// any) it counts what it would still lack once the free and releasing capacity in its sight and
// every job it may preempt are gone, and takes the nodes that lack the fewest GPUs, then CPU,
// then RAM, then those it reserved in the last pass, then config order (a starving request puts the
// nodes it reserved when it starved first: see Starvation). On each it holds the free
// and releasing capacity up to its demand, and no later request of the pass may preempt there,
// so nothing later in the queue starts on it (requests ahead of it, of higher classes, still
// may). High requests do not reserve: they are blocked only by high-priority work and notebooks,
// and reserving nodes for them held back other high-priority jobs in the simulator (trainq
// simulate) without starting them any sooner.
// View shows the reserved nodes (NodeInfo.ReservedFor, WaitingInfo.Reserved).
//
// # Backfill
//
// With Policy.Backfill (opt-in; it needs ReserveAfter > 0 and best-effort-fifo) a reservation
// gets a start, and high requests reserve too:
//
//   - The start of a reservation for request R on nodes N is the earliest time at which one
//     worker of R (an elastic gang: its least size) fits on every node of N, counting as
//     available the free and releasing capacity in sight (not nominated to another request) and
//     the capacity of each running job there once it is expected to end: by its RunLimit
//     (started + RunLimit, or now if it ran longer: it overran; one more RunLimit from now if
//     the RunLimit is an estimate, Request.RunEstimated), or when its progress reports
//     (Pool.Progressed) say, at the rate since its first report of the attempt (one report: since
//     the attempt started, from nothing done), if that is sooner or it has no enforced
//     RunLimit. If a job that R needs gone has neither, or has run past a RunLimit that is only
//     an estimate, reports no progress, and may not be taken back by R (see Overruns), the start
//     is unknown (unless R is starving): the reservation drains exactly as without backfill
//     (rule (e), Reservations), binding only the requests after R; a high request then does not
//     reserve at all. Pool.Project ends running jobs by the same count, but for an outrun
//     estimate, which it counts as one more RunLimit from now.
//     A reservation made in a pass counts the jobs granted earlier in that pass as running from
//     now, ending by their RunLimits, as the next pass will.
//   - The spare of a node of N is what it will have at that start, by the same count, beyond
//     R's worker's demand (per GPU, CPU and RAM).
//   - A reservation with a known start binds the pass that makes it from R on, and the next pass
//     (while R is still the first of its class) from its first request on, whatever their class:
//     for every request but R, a node of N shows only so much of its free plus releasing capacity
//     as its spare leaves (what is held back is taken from releasing capacity first), nobody but
//     R preempts or takes over there, and each request's take there lowers the spare; but a
//     request with a RunLimit that, started now, ends by the start (now + RunLimit ≤ start) sees
//     all of it, and its take leaves the spare as it was (it starts on loan, below), unless it is
//     a notebook or has been preempted MaxPreemptions times. A request without a RunLimit never
//     ends by a start. (So a higher-class request ahead of R waits, at most until the start,
//     unless it ends by then, fits the spare, or goes elsewhere.)
//   - R sees all of its reservation in its own walk and gives it up: it starts, holds, preempts
//     or reserves anew under rules (a) to (e) as without backfill; what it reserves then is the
//     reservation of the next pass. Reservations are made and bound in class order, high first;
//     a node is in at most one.
//   - Overruns: a running job that has run for its RunLimit or longer counts as ending now if
//     the RunLimit is enforced or it runs on loan. If it holds a node of R's reservation and its
//     class is strictly lower than R's, R may preempt it whatever MinRuntimeBeforePreemption and
//     MaxLossGPUHours say (not a notebook, and not past MaxPreemptions; with LossWithinWait,
//     only if its work at stake is at most what R has waited: see Victim ordering); it is then
//     ordered as any other victim. Past an estimate, a job R may take back so counts as one more RunLimit
//     from now; any other's end is unknown for R's start (an estimate that proved wrong
//     promises nothing: counted as one more estimate from now, it moved the start later pass
//     after pass while the nodes stayed reserved), except for a starving R, whose reservation
//     binds every class anyway and whose provisional start lets loans use its nodes meanwhile.
//   - Loans: a request granted on a node of a reservation whose capacity it saw only because it
//     ends by the start runs on loan (Grant.OnLoan, RunningInfo.OnLoan, kept in the snapshot).
//     Its RunLimit counts as enforced for every reservation's start, so an estimate that proves
//     too short never moves a start later nor lets another borrower in behind it. Once it has
//     run for its RunLimit, the owner of a reservation that holds one of its nodes may take the
//     node back in its walk whatever the borrower's class: the due loans there come first among
//     the victims (they cost the node no class), then the others in victim order, and only if
//     the owner then fits (no preemption for nothing). The borrower gets a Preemption with Loan
//     set, a reason that says so, and the allocation's notice; the yield counts as a preemption
//     (MaxPreemptions bounds how often a job borrows) but its rerun spends no retry. A loan
//     inside its RunLimit is never taken back, even when the owner could start sooner than
//     planned. A low owner takes its loans back too, although low requests preempt nobody else.
//   - While R preempts or holds capacity on the nodes it reserved, it keeps its reservation for
//     the next pass, and the capacity nominated to it there counts as in its sight for the
//     start: what frees there meanwhile stays hidden from the others as it was while R waited.
//     When R reserves nodes it did not own as the pass began, it takes back the due loans and
//     preempts the overrun jobs there at once, as its walk in the next pass would.
//   - A job is never preempted at the instant it started (with MinRuntimeBeforePreemption 0, a
//     request a reservation held back would otherwise preempt R in a second pass at the same
//     time, and that pass must decide nothing).
//   - NextWake includes the next time a running job on a reserved node reaches its RunLimit,
//     and, after a pass that started a job or in which a head moved its reservation to other
//     nodes (the requests walked before it saw the old ones reserved), the next instant: so a
//     pass that no event follows still decides there what it may from then on. A second pass at
//     the same instant may decide such preemptions already (Schedule's promise that it decides
//     nothing holds without Backfill).
//
// The only state this adds is a running job's loan (in the snapshot): the reserved nodes are
// those the last pass reserved (Pool.heads, in the snapshot), and the starts are recomputed each
// pass from the running jobs' starts and RunLimits, which the snapshot keeps. (When the last
// grant was and when a head last moved its reservation serve only NextWake; a restored pool
// runs its first pass in full anyway.)
//
// # Starvation
//
// With Policy.StarvationAfter > 0 (starvation_after in the config; 0, the default, turns it
// off), a medium or high request that has been the first waiting request of its class
// (Pool.heads, the clock of ReserveAfter) for StarvationAfter or longer is starving. In its walk:
//
//   - MinRuntimeBeforePreemption and MaxLossGPUHours protect no victim from it (with
//     LossWithinWait, MaxLossGPUHours is widened instead: see Victim ordering), and a job
//     preempted MaxPreemptions times may be preempted once more (never a job preempted more
//     often than that; with Policy.StrictMaxPreemptions, not once more either: it is then
//     waited for as a job of its own class, and the bound below includes its run);
//   - a reservation of a strictly lower class (Backfill) holds nothing from it: it walks as if
//     the reservation were not there, so it may start, preempt and reserve on its nodes; if it
//     takes capacity or reserves there, the reservation is gone for the rest of the pass (its
//     owner may reserve anew in its own walk), else it holds again for the requests after it;
//   - with Backfill, the start of its own reservation counts every job there it may preempt
//     (strictly lower class, not a notebook, preempted at most MaxPreemptions times) as gone
//     now: the start is when the jobs it may not preempt end, and a job without a RunLimit that
//     it may preempt no longer leaves the start unknown;
//   - with Backfill, its reservation binds every request of the pass, whatever its class, even
//     when its start is unknown (a job of its own or a higher class there has no RunLimit): then
//     nobody ends by the start, so nobody borrows, and each node shows the others only what is
//     in sight beyond its demand.
//
// With Policy.LossWithinWait, MaxLossGPUHours is not waived but widened to the GPU-hours the
// request has waited (see Victim ordering): a victim whose work at stake grows faster than that
// (it holds more GPUs, or started earlier and holds as many) protects itself until it ends, and
// the bound below then includes its run. The start of the starving request's reservation still
// counts such a victim as gone now (it may become preemptible), so nothing borrows its nodes.
//
// Everything else holds: only running jobs of a strictly lower class, never notebooks, never at
// the instant they started under Backfill; each stopped gracefully, its capacity nominated to
// the request and freed worker by worker; the victims are chosen in victim order, so the work
// lost is the least that makes room. So, with Backfill, a request waits as first of its class at
// most StarvationAfter, plus the time the jobs of its own or a higher class and the notebooks
// running on the nodes it reserves when it starves take to end (a loan there: at most its
// RunLimit), plus its victims' stop: nothing starts on those nodes meanwhile that could keep it
// waiting longer, except a starving request of a higher class (a lower class's reservation holds
// nothing from it), whose run there it then waits for too; and capacity there already being freed
// for a request of its own or a higher class (it may not take that over) goes to that request,
// whose run it waits for too; and a job that starts there on loan meanwhile, by a RunLimit ending
// by the start the reservation has by the RunLimits of the jobs there (which may end before
// them), is not taken back inside its RunLimit, so it waits for that loan too. It keeps the
// nodes it reserves when it starves (Reservations orders them first while it starves, and a
// snapshot keeps them): a node where it lacks less now need not free sooner, and a move on
// estimates that prove wrong could keep it waiting past the bound. In a
// pass in which a higher class's starving request reserves one of them, it reserves elsewhere,
// and returns once they are free of that request (if that request starts there, it waits for
// its run, as the bound says). trainq simulate checks this bound for every request that starves
// (its report's starvation bound line). Without Backfill only the
// lower classes are bound; requests of higher classes
// ahead of it may keep taking what frees. Only the first request of each class starves, so at most one per class
// at a time overrides the limits. The clock starts again when another request goes first (a
// preempted job of the class returns to the front). NextWake includes the moment the first
// request of a class starts to starve. The nodes a starving request keeps are its only state
// (SnapshotHead.Pinned).
//
// # Fair share
//
// With Policy.Ordering fair-share (opt-in per allocation), the waiting requests of one class are
// ordered by, in turn:
//
//  1. their workspace's ranked usage, least first (requests without a workspace share one
//     account, that of the workspace "");
//  2. their user's ranked usage within that workspace (Request.User, per workspace), least first;
//  3. Seq, then Job, as without fair share.
//
// Class still comes first: a heavy workspace's high request goes before a light one's medium.
// Usage is decayed GPU-seconds: a GPU held for one second at time s counts 2^-((t−s)/H) at time
// t, with H Policy.FairShareHalfLife (default 7 days, Slurm's PriorityDecayHalfLife). What a
// workspace (or user) holds is the GPUs of the unreleased workers of its running and releasing
// jobs, of every class, as for Limits. Usage is accrued at passes: from the end of one pass to
// the next, an account is charged exactly (∫ g·2^-((t−s)/H) ds) for the GPUs g it held when the
// earlier pass ended; the allocator runs a pass right after every event, so a release is charged
// until the pass that follows it. The arithmetic is IEEE double precision with no fused
// operations and no library exponential, so that every replay computes the same bits.
//
// Ranked usage is the usage when the accounts were last ranked: at a pool's first pass and then
// at the first pass Policy.FairShareInterval (default 5m, Slurm's PriorityCalcPeriod) or more after the last
// ranking. NextWake includes the next ranking while two or more requests wait. Between rankings
// the order changes only as requests come and go, so that the queue stays sorted, a pass that
// follows no event still costs nothing, and the requests granted in one pass do not reorder the
// rest of it: the least-used workspace may take all that is free at once, and gives way at the
// next ranking once its usage passes another's. Usage below one GPU-second is ranked as none:
// accounts that never ran, or whose usage has decayed away, tie and fall back to Seq, so that
// with no usage at all the order is the submission order. A ranking that moves any request
// counts as an event (the next pass runs in full); one that changes nothing does not. The
// first request of a class (Reservations) is the first in this order, so it can change at a
// ranking, and its ReserveAfter wait then starts again.
//
// Usage is part of the snapshot, so it survives continue-as-new and Reconfigure while the
// ordering stays fair-share (switching it on starts every account at none; switching it off
// forgets it). Pool.Adopt cannot know it; Pool.CarryUsage gives a rebuilt pool the usage of the
// pool it replaces, and Pool.ChargeAdopted then charges the time since that pool last accrued
// to the jobs the rebuilt pool adopted, each from its start (the pool replaced may be the one of
// a reset point, whose holders have long ended; jobs that started and ended in between are not
// known). A job the recovery missed and that is adopted later is charged from the same time by
// Pool.ChargeAdoptedJob. Pool.Usage lists each workspace's usage, share and GPUs held.
//
// # Expected starts
//
// Pool.Project plays the pool forward by its own rules on a copy, running jobs ending by their
// RunLimits. Pool.Forecast corrects that by the pool's record of how wrong it has been (see
// ForecastSampleEvery in forecast.go): it changes no decision, only what a waiting job is told.
// A forecast blends the projection with the job's place in the queue ÷ the last hour's starts
// in the proportion that erred least on the samples most like it, shifts by their median
// error, and gives as its range their 10th to 90th percentile errors, whose levels move by how
// the samples' own ranges held (so that about 1 in 10 starts falls on each side, even when
// waits drift). The range's samples are those most like it in their figures and in how long
// their request had waited when asked, the ones still waiting among them counted as waiting
// at least as long as they have so far (Kaplan–Meier); the point's are the finished samples
// most like it in their figures. With fewer than ForecastMinSamples comparable samples it is
// the projection, without a range. Measured by trainq simulate (the report's "forecast" rows).
//
// # Cohorts
//
// With Policy.Cohort the pool is shared by several allocations, each with a share of GPUs (its
// own nodes' GPUs) that its requests may always hold; every request names its allocation
// (Request.Allocation). Queue order, classes and every other rule are the pool's, with these
// differences:
//   - A request's allocation may hold beyond its share only what the others leave unused, up to
//     its BorrowingLimit; a request the limit leaves no room waits (outcome borrow-capped), as a
//     capped one does. Notebooks, which are never preempted, never borrow. A job that starts
//     beyond its share is borrowed (Grant.Borrowed) and runs on loan.
//   - A request whose allocation, with it, stays within its share takes back borrowed jobs of
//     the other allocations, whatever their class and whatever MaxLossGPUHours,
//     MinRuntimeBeforePreemption and MaxPreemptions say (Preemption.Reclaim, with Loan: the
//     rerun spends no retry). They come first among its victims (yields), and a node whose
//     victims are all taken back comes before any node where it would preempt a job of its own
//     allocation (nodeCost.takenClass), the lower class first.
//   - No request preempts, or takes over capacity nominated to, another allocation's job
//     otherwise: beyond its share an allocation's jobs are preempted only by its own.
//
// Reservations and heads stay the pool's, across allocations; the reasons a job waits name the
// jobs in its way whatever their allocation.
//
// # Terms
//
// The comments in this package use these words in these senses only:
//
//   - pass: one run of the rules over the waiting requests, in launch order (Schedule,
//     ScheduleAtMost; View and Explain run one without applying it). It works on a copy of the
//     nodes' capacity (scratch), never on the Pool.
//   - walker: the waiting request the pass is deciding for right now (decide). Only the walker
//     sees the capacity nominated to it; after it, what it did not take is hidden again.
//   - shape: a request's family, per-worker demand (resources: GPUs, CPU cores, RAM), workers,
//     least size and allowed nodes. Requests of one shape fare alike in a pass, so a shape that
//     failed is not tried again (the failure cache, reset per pass by bumping its epoch).
//   - gang: a request's workers, placed all at once on distinct nodes; an elastic gang
//     (Request.MinWorkers) may start smaller, at its least size (MinWorkers) or more.
//   - free capacity: held by no worker. Releasing capacity: held by a worker of a stopping
//     job, free once that worker is Released. In sight: what the walker may count, that is
//     free or releasing, not on a lost node, and not nominated to another request nor hidden by
//     a reservation.
//   - nominated capacity: a stopping victim's (or, once it stopped, a hold's) capacity, set
//     aside for its nominee, the request it was preempted for or that took it over. A hold is
//     the free capacity a stopped victim left, still nominated; a takeover is a strictly
//     higher-class request taking nominated capacity for itself (rule (d)).
//   - victim: a running job chosen to be preempted. A node's victim list is its running jobs
//     that a victim search may consider, kept in victim order (see Victim ordering); a
//     protected victim is one whose attempt, after k earlier preemptions, has run less than
//     15m × 2^(k-1) (rule 3 there); the work at stake is what preempting it throws away (GPUs × time since its attempt
//     started or last checkpointed).
//   - lost (fenced) node: one whose agent stopped answering: no pass counts its capacity. The
//     live nodes of a family are the others, in config order.
//   - head: the first waiting request of a class, and since when it has been first (Pool.heads);
//     after Policy.ReserveAfter as head it may reserve (rule (e)).
//   - reservation: nodes a head drains for (rule (e)); with Backfill its start is when the head
//     is expected to fit there, and a node's spare is what it will have then beyond the head's
//     demand (what others may still take there).
//   - bucket: a family's live nodes with the same number of free GPUs in the pass, so that a
//     one-worker grant scans only the nodes that fit it most tightly.
//   - capped: a request whose workspace's Policy.Limits leave it no room in its class.
//   - blocker: under strict-fifo, the first request that could not start; nothing after it
//     moves in that pass.
//   - outcome: what the pass decided for one request (granted, nominated, preempting,
//     reserving, capped, no fit, strict-blocked, previous attempt), the base of its reason.
//   - explain mode: a pass run for View or Explain that records each request's outcome and the
//     requests before it that took capacity (consumers); it applies nothing.
//   - account: a workspace, or a user in one, whose usage the fair share ranks (see Fair share).
//   - overrun: a running job past its RunLimit (see Backfill).
//   - starving: the walker, when it has been the first waiting request of its class for
//     Policy.StarvationAfter; MinRuntimeBeforePreemption, MaxLossGPUHours and lower classes'
//     reservations then hold nothing from it (see Starvation).
package scheduler
