"""client_lib for trainq: ML Space's in-notebook job library, over trainq's
REST API. Standard library only.

Configure it by environment:

    TRAINQ_API_URL     the API's address, e.g. http://127.0.0.1:8080
    TRAINQ_API_TOKEN   your token (sent as Authorization: Bearer <token>)
    TRAINQ_REGION      the region of jobs that name none (optional)

ML Space's surface (same return values and printed lines):

    job = client_lib.Job(base_image=..., script=..., instance_type=..., priority_class="high")
    job.submit()                 # 'Job "lm-mpi-job-..." created.'; sets job.job_name
    job.status()                 # 'Job "lm-mpi-job-..." status=Running'
    job.logs(); job.kill()
    client_lib.jobs()            # prints <created_at> : <job_name> : <status>
    client_lib.logs(name, tail=200)
    client_lib.get_job_status(name); client_lib.kill(name)
    client_lib.get_instance_types(); client_lib.get_available_resources_count()

trainq's structured answers: client_lib.trainq.status(name) (a JobStatus with
state, attempt, position, reason, preemptors, warnings), trainq.jobs(),
trainq.logs(name, follow=True) (an iterator of lines), trainq.queue(alloc), ...
"""

from . import trainq
from ._mlspace import (DEPRECATED_FIELDS, RUN_JOB_FIELDS, Job, TrainqWarning, get_available_resources_count,
                       get_instance_types, get_job_status, jobs, kill, logs, status_line)
from ._transport import Client
from .errors import (APIConnectionError, APIError, BadRequestError, ClientLibError, ConfigError, ConflictError,
                     ForbiddenError, InvalidRequestError, JobNotFoundError, NotFoundError, RequestTooLargeError,
                     RetryableError, ServiceUnavailableError, TooManyRequestsError, UnauthorizedError, ValidationError)
from .types import JobHealthAction, JobHealthParams, JobHealthSubAction, JobType, PriorityClass, RegionMT, ShmSizeClass

def preemption_notice():
    """The running worker's stop notice as a dict (reason, by, deadline, job,
    attempt), or None while it is not being stopped; see trainq.notice."""
    n = trainq.notice()
    if n is None:
        return None
    return {"reason": n.reason, "by": {"class": n.by_class, "kind": n.by_kind}, "deadline": n.deadline,
            "job": n.job, "attempt": n.attempt}


__version__ = "0.1.0"

__all__ = [
    "Job", "jobs", "logs", "kill", "get_job_status", "preemption_notice", "get_instance_types", "get_available_resources_count",
    "JobType", "RegionMT", "PriorityClass", "ShmSizeClass", "JobHealthParams", "JobHealthAction", "JobHealthSubAction",
    "Client", "trainq", "status_line", "RUN_JOB_FIELDS", "DEPRECATED_FIELDS", "TrainqWarning",
    "ClientLibError", "ConfigError", "APIError", "APIConnectionError", "InvalidRequestError", "BadRequestError",
    "ValidationError", "UnauthorizedError", "ForbiddenError", "NotFoundError", "JobNotFoundError", "ConflictError",
    "RequestTooLargeError", "RetryableError", "TooManyRequestsError", "ServiceUnavailableError",
]
