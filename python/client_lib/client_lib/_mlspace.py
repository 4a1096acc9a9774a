"""ML Space's client_lib surface: Job and the module functions, with the
return values and printed line shapes that users' scripts rely on."""

import os
import sys
import warnings as _warnings

from . import trainq
from ._transport import Client
from .types import JobType

# RunJobRequest's 33 fields, in the order of ML Space's table.
RUN_JOB_FIELDS = (
    "script", "base_image", "instance_type", "region", "type", "n_workers", "processes_per_worker", "job_desc",
    "internet", "conda_env", "max_retry", "priority_class", "queue_name", "allocation_name", "checkpoint_dir",
    "logs_dir", "health_params", "shm_size_class", "flags", "env_variables", "pytorch_use_env",
    "elastic_min_workers", "elastic_max_workers", "elastic_max_restarts", "include_nodes", "exclude_nodes",
    "tmp_storage", "stop_timer", "cuda11", "preflight_check", "forbid_internet", "forbid_s3", "in_communal_cluster",
)
# trainq's own fields beyond ML Space's: how a gang's workers share the
# allocation's topology levels (a level name, e.g. "rack"; at most one of
# them), and no_move=True to never be moved out of a rack for such a gang.
TRAINQ_FIELDS = ("required_topology", "preferred_topology", "no_move")
DEPRECATED_FIELDS = ("stop_timer", "cuda11", "preflight_check", "forbid_internet", "forbid_s3", "in_communal_cluster")


class TrainqWarning(UserWarning):
    """A warning of the API about a request (a deprecated field, ...)."""


def _client(client):
    return client if client is not None else Client.from_env()


def status_line(st):
    """ML Space's status string of a trainq.JobStatus: the status word comes
    last, after '=' (``Job "lm-mpi-job-..." status=Running``), so that
    ``s.split("=")[-1].lower()`` is the word."""
    word = trainq.ML_SPACE_WORD.get(st.state, st.state)
    extra = ""
    if word != st.state:
        p = st.preemptor
        extra = " (%s%s)" % (st.state, " by %s %s %s" % (p.priority, p.type, p.name) if p else "")
    return 'Job "%s"%s status=%s' % (st.job_name, extra, word)


class Job:
    """A training job, as ML Space's ``client_lib.Job``: the keyword
    arguments are RunJobRequest's fields; only those given (not None) are
    sent, so the API's defaults apply to the rest::

        job = client_lib.Job(base_image="...", script="train.py", instance_type="a100.1gpu",
                             type=client_lib.Job.Type.binary, priority_class="high")
        print(job.submit())      # Job "lm-mpi-job-..." created.
        job.status()             # 'Job "lm-mpi-job-..." status=Running'
    """

    Type = JobType

    def __init__(self, script=None, base_image=None, instance_type=None, region=None, type=None, n_workers=None,
                 processes_per_worker=None, job_desc=None, internet=None, conda_env=None, max_retry=None,
                 priority_class=None, queue_name=None, allocation_name=None, checkpoint_dir=None, logs_dir=None,
                 health_params=None, shm_size_class=None, flags=None, env_variables=None, pytorch_use_env=None,
                 elastic_min_workers=None, elastic_max_workers=None, elastic_max_restarts=None, include_nodes=None,
                 exclude_nodes=None, tmp_storage=None, stop_timer=None, cuda11=None, preflight_check=None,
                 forbid_internet=None, forbid_s3=None, in_communal_cluster=None, *, required_topology=None,
                 preferred_topology=None, no_move=None, client=None):
        given = dict(locals())
        for f in RUN_JOB_FIELDS + TRAINQ_FIELDS:
            setattr(self, f, given[f])
        self.client = client
        self.job_name = None
        self.warnings = []
        self.notes = []
        self.submitted = None  # the trainq.Submitted of the last submit()

    def request(self):
        """The RunJobRequest this job sends: the fields given, and the region
        of TRAINQ_REGION when the job names none."""
        fields = {f: getattr(self, f) for f in RUN_JOB_FIELDS + TRAINQ_FIELDS}
        if fields["region"] is None:
            c = self.client
            if c is None:
                region = os.environ.get("TRAINQ_REGION", "").strip() or None
            else:
                region = c.region
            fields["region"] = region
        return trainq.request_body(fields)

    def submit(self):
        """Submits the job; returns ``Job "<job_name>" created.`` and sets
        job_name (and warnings, the API's about deprecated fields)."""
        sub = trainq.Submitted.from_json(_client(self.client).submit(self.request()))
        self.submitted, self.job_name, self.warnings, self.notes = sub, sub.job_name, sub.warnings, sub.notes
        for w in sub.warnings:
            _warnings.warn("%s: %s" % (sub.job_name, w), TrainqWarning, stacklevel=2)
        return 'Job "%s" created.' % sub.job_name

    def _name(self):
        if not self.job_name:
            raise RuntimeError("the job is not submitted yet: call submit() first")
        return self.job_name

    def status(self):
        """The status string; its text after the last '=' is the word."""
        return get_job_status(self._name(), client=self.client)

    def logs(self, tail=None, verbose=None, follow=False, **more):
        """Prints the job's log (see client_lib.logs)."""
        return logs(self._name(), tail=tail, verbose=verbose, follow=follow, client=self.client, **more)

    def kill(self):
        """Stops the job."""
        return kill(self._name(), region=self.region, client=self.client)

    def __repr__(self):
        given = ", ".join("%s=%r" % (f, getattr(self, f)) for f in RUN_JOB_FIELDS + TRAINQ_FIELDS if getattr(self, f) is not None)
        return "Job(%s)%s" % (given, " job_name=%s" % self.job_name if self.job_name else "")


def get_job_status(job_name, region=None, client=None):
    """The job's status string, e.g. ``Job "lm-mpi-job-..." status=Completed``:
    callers take the text after the last '=' and lower-case it. ``region`` is
    accepted for ML Space's scripts; a job's name finds it in any region."""
    return status_line(trainq.status(job_name, client=client))


def jobs(region=None, allocation_name=None, status=None, job_author=None, limit=None, client=None):
    """Prints one line per job of your workspace, newest first:
    ``<created_at> : <job_name> : <status>``."""
    for row in trainq.jobs(region=region, allocation_name=allocation_name, status=status, job_author=job_author,
                           limit=limit, client=client):
        print("%s : %s : %s" % (row.created_dt, row.job_name, trainq.ML_SPACE_WORD.get(row.status, row.status)))


def logs(job_name, region=None, tail=None, verbose=None, follow=False, attempt=None, worker=None, client=None):
    """Prints the job's log to stdout as it arrives (``follow=True``: until the
    job ends). ``tail=N`` prints the last N lines of each worker; ``region``
    is accepted for ML Space's scripts."""
    out = sys.stdout
    for line in trainq.logs(job_name, tail=tail, verbose=verbose, follow=follow, attempt=attempt, worker=worker, client=client):
        out.write(line + "\n")
        if follow:
            out.flush()


def kill(job_name, region=None, client=None):
    """Stops the job (stopping a job that ended does nothing); returns
    ``Job "<job_name>" status=<word>``."""
    d = trainq.kill(job_name, region=region, client=client)
    word = trainq.state_word(d.get("status"))
    return 'Job "%s" status=%s' % (d.get("job_name", job_name), trainq.ML_SPACE_WORD.get(word, word))


def _table(rows, header):
    rows = [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    for r in [tuple(header)] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def get_instance_types(region=None, allocation_name=None, client=None):
    """Prints the instance types of each allocation (of ``region``, default
    TRAINQ_REGION or all): GPUs per worker and how many workers fit at most."""
    rows = [(it["region"], it["allocation_name"], it["name"], it["gpus"], it["max_workers"])
            for it in trainq.instance_types(region=region, allocation_name=allocation_name, client=client)]
    _table(rows, ("region", "allocation", "instance_type", "gpus", "max_workers"))


def get_available_resources_count(region=None, allocation_name=None, client=None):
    """Prints, per allocation and instance type, how many workers of it fit
    on the GPUs free now."""
    rows = [(a["allocation_name"], a["key"], a["count"])
            for a in trainq.available(region=region, allocation_name=allocation_name, client=client)]
    _table(rows, ("allocation", "instance_type", "count"))
