"""trainq's structured answers, next to ML Space's printed ones.

``client_lib.trainq.status(name)`` returns a JobStatus dataclass: the state,
the attempt, the place in the queue and why the job waits, who preempted it,
the API's warnings. Every function takes ``client=`` (a client_lib.Client);
by default one is configured from the environment (TRAINQ_API_URL,
TRAINQ_API_TOKEN, TRAINQ_REGION)."""

import datetime
import http.client
import json
import os
import re
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

from . import errors
from ._transport import Client, read_all
from .types import plain

__all__ = ["JobStatus", "Preemptor", "Submitted", "JobRow", "Queue", "submit", "status", "wait", "jobs", "logs",
           "log_text", "kill", "restart", "preemptors", "queue", "configs", "instance_types", "available", "TERMINAL", "ML_SPACE_WORD"]

# trainq's status words. Terminal ones end a job for good.
STATES = ("Pending", "Starting", "Running", "Restarting", "Completing", "Stopping",
          "Completed", "Failed", "Stopped", "Preempted")
TERMINAL = frozenset(("Completed", "Failed", "Stopped", "Preempted"))
# ML Space's words that trainq does not use, read when an answer has them.
_OTHER_WORDS = ("Inqueue", "Succeeded", "Terminated", "Terminating", "Deleted")
_WORDS = {w.lower(): w for w in STATES + _OTHER_WORDS}

# The word ML Space's printed answers use for a trainq state, where they
# differ: ML Space has no "Preempted" (a poll loop that stops on
# completed/failed/stopped/... would never stop), so a job preempted for good
# reads "Stopped" there; trainq.status() says Preempted and who did it.
ML_SPACE_WORD = {"Preempted": "Stopped"}


def _client(client):
    return client if client is not None else Client.from_env()


def _q(name):
    return urllib.parse.quote(str(name), safe="")


def state_word(s):
    """A status word, in whatever case an answer has it, in trainq's
    capitalised spelling ("running" -> "Running"); unknown words are kept."""
    if s is None:
        return ""
    return _WORDS.get(str(s).strip().lower(), str(s))


_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def parse_time(v):
    """An RFC 3339 time (any fraction of a second, as Go writes it) or epoch
    seconds, as an aware UTC datetime; None for none."""
    if v is None or v == "" or v == 0:
        return None
    if isinstance(v, (int, float)):
        return datetime.datetime.fromtimestamp(v, datetime.timezone.utc)
    m = _TS.match(str(v).strip())
    if not m:
        return None
    base, frac, zone = m.groups()
    micro = int((frac or ".0")[1:7].ljust(6, "0"))
    t = datetime.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(microsecond=micro)
    if zone == "Z":
        tz = datetime.timezone.utc
    else:
        sign = 1 if zone[0] == "+" else -1
        tz = datetime.timezone(sign * datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    return t.replace(tzinfo=tz).astimezone(datetime.timezone.utc)


@dataclass
class Preemptor:
    """A job that took this job's capacity."""
    name: str
    priority: str
    type: str = "job"
    id: str = ""
    attempt: int = 0
    preempted_at: Optional[datetime.datetime] = None

    @classmethod
    def from_json(cls, d):
        return cls(name=d.get("name", ""), priority=d.get("priority", ""), type=d.get("type", "job"), id=d.get("id", ""),
                   attempt=d.get("attempt") or 0, preempted_at=parse_time(d.get("preempted_at")))


@dataclass
class JobStatus:
    """GET /jobs/{name}, typed. ``state`` is trainq's word (Pending, Running,
    Completed, Preempted, ...); ``position`` and ``reason`` say where and why
    a pending job waits; ``warnings`` are the API's (deprecated fields)."""
    job_name: str
    state: str
    attempt: int = 0
    position: int = 0
    reason: str = ""
    preemptors: List[Preemptor] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    message: str = ""
    priority_class: str = ""
    type: str = ""
    kind: str = ""
    region: str = ""
    allocation_name: str = ""
    instance_type: str = ""
    n_workers: int = 0
    gpu_count: int = 0
    max_retry: int = 0
    restarts: int = 0
    waiting_for: List[str] = field(default_factory=list)
    created_at: Optional[datetime.datetime] = None
    pending_at: Optional[datetime.datetime] = None
    running_at: Optional[datetime.datetime] = None
    completed_at: Optional[datetime.datetime] = None
    attempts: List[Dict[str, Any]] = field(default_factory=list)
    #: With ``status(name, expected_start=True)``, for a pending job: when it
    #: is expected to start (None: unknown) and the assumption, or why unknown.
    expected_start_at: Optional[datetime.datetime] = None
    expected_start: str = ""
    #: The range it will likely start in (8 in 10 jobs of the allocation do),
    #: once the allocation has a record of how wrong its expected starts were;
    #: None until then.
    expected_start_earliest: Optional[datetime.datetime] = None
    expected_start_latest: Optional[datetime.datetime] = None
    #: ML Space's stop_timer in minutes (0: none).
    stop_timer: int = 0
    #: For a job without a stop_timer: how long it is expected to run, learned
    #: from the completed jobs like it (None: too few completed), and from which.
    runtime_estimate_seconds: Optional[int] = None
    runtime_estimate: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def terminal(self):
        """Whether the job has ended for good."""
        return self.state in TERMINAL

    @property
    def preemptor(self):
        """The latest preemptor, or None."""
        return self.preemptors[-1] if self.preemptors else None

    @property
    def on_loan(self):
        """Whether the running attempt started on capacity reserved for a job
        that has waited longer, because its time limit or runtime estimate
        ends it first: past that, it gets a notice (reason ``loan_due``) and
        gives the capacity back, then reruns without spending max_retry."""
        if not self.attempts:
            return False
        last = self.attempts[-1]
        return bool(last.get("on_loan")) and not last.get("ended_at")

    @property
    def started(self):
        """Whether an attempt of the job has started on its nodes."""
        return any(a.get("started_at") for a in self.attempts) or self.running_at is not None

    @classmethod
    def from_json(cls, d):
        state = state_word(d.get("status"))
        return cls(job_name=d.get("job_name", ""), state=state, attempt=d.get("attempt") or 0,
                   position=d.get("position") or 0, reason=d.get("reason") or "",
                   preemptors=[Preemptor.from_json(p) for p in d.get("preemptors") or []],
                   warnings=list(d.get("warnings") or []), message=d.get("message") or "",
                   priority_class=d.get("priority_class") or "", type=d.get("type") or "", kind=d.get("kind") or "",
                   region=d.get("region") or "", allocation_name=d.get("allocation_name") or "",
                   instance_type=d.get("instance_type") or "", n_workers=d.get("n_workers") or 0,
                   gpu_count=d.get("gpu_count") or 0, max_retry=d.get("max_retry") or 0, restarts=d.get("restarts") or 0,
                   waiting_for=list(d.get("waiting_for") or []), created_at=parse_time(d.get("created_at")),
                   pending_at=parse_time(d.get("pending_at")), running_at=parse_time(d.get("running_at")),
                   completed_at=parse_time(d.get("completed_at")), attempts=list(d.get("attempts") or []),
                   expected_start_at=parse_time(d.get("expected_start_at")), expected_start=d.get("expected_start") or "",
                   expected_start_earliest=parse_time(d.get("expected_start_earliest")),
                   expected_start_latest=parse_time(d.get("expected_start_latest")),
                   stop_timer=d.get("stop_timer") or 0, runtime_estimate_seconds=d.get("runtime_estimate_seconds"),
                   runtime_estimate=d.get("runtime_estimate") or "", raw=d)


@dataclass
class Submitted:
    """The answer to a submission: the job's name, its first status, and the
    API's warnings (deprecated fields) and notes (ignored fields)."""
    job_name: str
    status: str
    warnings: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    restarted_from: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d):
        return cls(job_name=d.get("job_name", ""), status=state_word(d.get("status")) or "Pending",
                   warnings=list(d.get("warnings") or []), notes=list(d.get("notes") or []),
                   restarted_from=d.get("restarted_from") or "", raw=d)


@dataclass
class JobRow:
    """One job of GET /jobs."""
    job_name: str
    status: str
    created_dt: str = ""
    region: str = ""
    allocation_name: str = ""
    instance_type: str = ""
    job_desc: str = ""
    job_author: str = ""
    priority_class: str = ""
    gpu_count: int = 0
    attempt: int = 0
    duration: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def created_at(self):
        return parse_time(self.created_dt)

    @classmethod
    def from_json(cls, d):
        return cls(job_name=d.get("job_name", ""), status=state_word(d.get("status")), created_dt=d.get("created_dt") or "",
                   region=d.get("region") or "", allocation_name=d.get("allocation_name") or "",
                   instance_type=d.get("instance_type") or "", job_desc=d.get("job_desc") or "",
                   job_author=d.get("job_author") or "", priority_class=d.get("priority_class") or "",
                   gpu_count=d.get("gpu_count") or 0, attempt=d.get("attempt") or 0, duration=d.get("duration") or 0, raw=d)


@dataclass
class Queue:
    """GET /allocations/{name}/queue: waiting jobs in launch order (with
    their reasons), running jobs, and the GPUs of the allocation."""
    region: str
    allocation_name: str
    total_gpus: int = 0
    free_gpus: int = 0
    allocated_gpus: int = 0
    releasing_gpus: int = 0
    waiting_total: int = 0
    waiting: List[Dict[str, Any]] = field(default_factory=list)
    running: List[Dict[str, Any]] = field(default_factory=list)
    nodes: List[Dict[str, Any]] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def idle(self):
        """Nothing waits, runs or is being released."""
        return not self.waiting_total and not self.running and not self.releasing_gpus

    @classmethod
    def from_json(cls, d):
        return cls(region=d.get("region", ""), allocation_name=d.get("allocation_name", ""), total_gpus=d.get("total_gpus") or 0,
                   free_gpus=d.get("free_gpus") or 0, allocated_gpus=d.get("allocated_gpus") or 0,
                   releasing_gpus=d.get("releasing_gpus") or 0, waiting_total=d.get("waiting_total") or 0,
                   waiting=list(d.get("waiting") or []), running=list(d.get("running") or []),
                   nodes=list(d.get("nodes") or []), raw=d)


def request_body(fields):
    """A RunJobRequest dict of exactly the fields given (None = not given)."""
    return {k: plain(v) for k, v in fields.items() if v is not None}


def submit(client=None, idempotency_key=None, **fields):
    """Submits a RunJobRequest of exactly the fields given; returns Submitted.
    A retried POST (after a 503) carries the same Idempotency-Key, so it
    cannot start the job twice."""
    return Submitted.from_json(_client(client).submit(request_body(fields), key=idempotency_key))


def status(name, expected_start=False, client=None):
    """The job's status as a JobStatus. With ``expected_start``, a pending
    job's status also says when it is expected to start (the allocator plays
    its queue forward, which costs more). Raises JobNotFoundError for a name
    that is not a job of your workspace."""
    query = {"expected_start": "true"} if expected_start else None
    d = _client(client).call("GET", "/jobs/" + _q(name), query=query)
    if str(d.get("status", "")).strip().lower() == "job not found":  # ML Space's way of saying 404
        raise errors.JobNotFoundError(404, "not_found", "no such job", method="GET", path="/jobs/" + str(name))
    return JobStatus.from_json(d)


def wait(name, until=TERMINAL, timeout=600.0, poll=1.0, client=None):
    """Polls the job until its state is one of ``until`` (trainq's words) and
    returns that JobStatus; raises TimeoutError after ``timeout`` seconds."""
    until = {state_word(u) for u in ([until] if isinstance(until, str) else until)}
    c = _client(client)
    deadline = time.monotonic() + timeout
    while True:
        st = status(name, client=c)
        if st.state in until:
            return st
        if time.monotonic() >= deadline:
            raise TimeoutError("job %s is %s after %.0f s, not %s" % (name, st.state, timeout, "/".join(sorted(until))))
        time.sleep(poll)


def jobs(region=None, allocation_name=None, status=None, job_author=None, start_date=None, end_date=None,
         limit=None, client=None):
    """The jobs of your workspace, newest first, as JobRows: every page up to
    ``limit`` jobs (all of them, at most 10,000, by default). ``status`` is a
    word or a list of them; ``region`` defaults to TRAINQ_REGION (all regions
    when unset)."""
    c = _client(client)
    region = region or c.region
    if isinstance(start_date, datetime.datetime):
        start_date = start_date.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(end_date, datetime.datetime):
        end_date = end_date.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(status, str):
        status = [status]
    want = limit if limit is not None else 10000
    out, offset = [], 0
    while len(out) < want:
        page = min(1000, want - len(out), 10000 - offset)
        if page <= 0:
            break
        d = c.call("GET", "/jobs", query={"region": region, "allocation_name": allocation_name,
                                           "status": [state_word(s) for s in status] if status else None,
                                           "job_author": job_author, "start_date": start_date, "end_date": end_date,
                                           "offset": offset, "limit": page})
        rows = d.get("jobs") or []
        out.extend(JobRow.from_json(r) for r in rows)
        offset += len(rows)
        if len(rows) < page or offset >= (d.get("count") or 0):
            break
    return out


def logs(name, tail=None, verbose=None, follow=False, attempt=None, worker=None, client=None):
    """The job's log, line by line (without the newline), as the API sends
    it: with ``follow=True`` lines come as the workers write them until the
    job ends. ``tail=N``: the last N lines of each worker (0 = all)."""
    c = _client(client)
    resp = c.open("GET", "/jobs/%s/logs" % _q(name),
                  query={"tail": tail, "verbose": verbose, "follow": True if follow else None, "attempt": attempt, "worker": worker},
                  timeout=None if not follow else max(c.timeout, 24 * 3600.0))

    def lines():
        # read1 gives what has arrived (readline would hide a cut-off stream).
        buf = b""
        with resp:
            while True:
                try:
                    chunk = resp.read1(65536)
                except (http.client.HTTPException, OSError) as e:
                    raise errors.APIConnectionError(0, "connection_lost", "the log stream was cut off: %s" % e,
                                                    method="GET", path="/jobs/%s/logs" % name) from None
                if not chunk:
                    if buf:
                        yield buf.decode("utf-8", errors="replace")
                    return
                buf += chunk
                *done, buf = buf.split(b"\n")
                for raw in done:
                    yield raw.decode("utf-8", errors="replace")
    return lines()


def log_text(name, tail=None, verbose=None, attempt=None, worker=None, client=None):
    """The job's log as it is now, as one string."""
    c = _client(client)
    path = "/jobs/%s/logs" % _q(name)
    with c.open("GET", path, query={"tail": tail, "verbose": verbose, "attempt": attempt, "worker": worker}) as resp:
        return read_all(resp, "GET", path).decode("utf-8", errors="replace")


def kill(name, region=None, client=None):
    """Stops the job (idempotent); returns the API's answer {job_name, status}."""
    c = _client(client)
    return c.call("DELETE", "/jobs/" + _q(name), query={"region": region or c.region})


def restart(name, client=None):
    """A new job with the parameters of ``name``; returns Submitted."""
    return Submitted.from_json(_client(client).call("POST", "/jobs/restart", body={"job_name": name}))


def preemptors(name, client=None):
    """Who took the job's capacity, attempt by attempt."""
    d = _client(client).call("GET", "/jobs/%s/preemptors" % _q(name))
    return [Preemptor.from_json(p) for p in d.get("preemptors") or []]


def queue(allocation_name, region=None, offset=None, limit=None, client=None):
    """The allocation's queue as a Queue."""
    c = _client(client)
    return Queue.from_json(c.call("GET", "/allocations/%s/queue" % _q(allocation_name),
                                  query={"region": region or c.region, "offset": offset, "limit": limit}))


def configs(client=None):
    """GET /configs: regions, allocations, nodes and instance types."""
    return _client(client).call("GET", "/configs")


def instance_types(region=None, allocation_name=None, client=None):
    """The instance types of each allocation, from GET /configs: a list of
    {region, allocation_name, name, family, gpus, max_workers}."""
    c = _client(client)
    region = region or c.region
    out = []
    for reg in configs(client=c).get("regions") or []:
        if region and reg.get("name") != region:
            continue
        for a in reg.get("allocations") or []:
            if allocation_name and a.get("name") != allocation_name:
                continue
            for it in a.get("instance_types") or []:
                out.append({"region": reg.get("name"), "allocation_name": a.get("name"), "name": it.get("name"),
                            "family": it.get("family"), "gpus": it.get("gpus", 0), "max_workers": it.get("max_workers", 0)})
    return out


def available(region=None, allocation_name=None, client=None):
    """How many workers of each instance type fit on the GPUs free now, per
    allocation: a list of {region, allocation_name, key, name, count}
    (ML Space's /instance_types/{region}/available, computed from each
    allocation's queue: per node of the family, free GPUs // GPUs per worker;
    a CPU-only type counts its nodes that hold no GPU job)."""
    c = _client(client)
    types = instance_types(region=region, allocation_name=allocation_name, client=c)
    nodes = {}
    out = []
    for it in types:
        key = (it["region"], it["allocation_name"])
        if key not in nodes:
            nodes[key] = queue(it["allocation_name"], region=it["region"], client=c).nodes
        count = 0
        for n in nodes[key]:
            if n.get("family") != it["family"] or n.get("lost"):
                continue
            if it["gpus"]:
                count += (n.get("free_gpus") or 0) // it["gpus"]
            elif not n.get("allocated_gpus") and not n.get("releasing_gpus"):
                count += 1
        out.append({"region": it["region"], "allocation_name": it["allocation_name"], "key": it["name"],
                    "name": it["name"], "count": count})
    return out


@dataclass
class Notice:
    """A worker's stop notice (trainq's $TRAINQ_NOTICE_FILE): why, by whom
    (the preemptor's class and kind, never its name) and by when to exit."""
    reason: str
    deadline: datetime.datetime
    job: str = ""
    attempt: int = 0
    by_class: str = ""
    by_kind: str = ""

    def seconds_left(self, now=None):
        """Seconds until the deadline (negative once it passed)."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        return (self.deadline - now).total_seconds()


def notice(path=None):
    """The worker's stop notice, or None while there is none. Inside a trainq
    worker the path comes from $TRAINQ_NOTICE_FILE; call it now and then (or
    between training steps): once it answers, save a checkpoint and exit
    before notice.deadline to lose nothing."""
    path = path or os.environ.get("TRAINQ_NOTICE_FILE")
    if not path:
        raise errors.ConfigError("TRAINQ_NOTICE_FILE", "TRAINQ_NOTICE_FILE is not set: notices reach code that runs inside a trainq worker")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    if not text.strip():
        return None  # a Kubernetes notice volume shows an empty file until the notice is set
    raw = json.loads(text)
    by = raw.get("by") or {}
    return Notice(reason=raw.get("reason", ""), deadline=parse_time(raw.get("deadline")), job=raw.get("job", ""),
                  attempt=int(raw.get("attempt", 0)), by_class=by.get("class", ""), by_kind=by.get("kind", ""))
