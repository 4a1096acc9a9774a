"""The typed helpers ML Space users import: job types, regions and the
health parameters of a job."""

import enum
from dataclasses import dataclass, field
from typing import List, Optional, Union


class _StrEnum(str, enum.Enum):
    # A member is its value wherever a string is expected (json, ==, format).
    def __str__(self):
        return self.value

    def __format__(self, spec):
        return format(self.value, spec)


class JobType(_StrEnum):
    """RunJobRequest's ``type``; also ``client_lib.Job.Type``."""
    binary = "binary"
    horovod = "horovod"
    pytorch = "pytorch"
    pytorch2 = "pytorch2"
    torchrun = "torchrun"
    pytorch_elastic = "pytorch_elastic"
    nogpu = "nogpu"
    binary_exp = "binary_exp"


class RegionMT(_StrEnum):
    """RunJobRequest's ``region``. DGX2-MT and A100-MT are spelled with '_'."""
    DGX2_MT = "DGX2-MT"
    A100_MT = "A100-MT"
    SR003 = "SR003"
    SR004 = "SR004"
    SR005 = "SR005"
    SR006 = "SR006"
    SR008 = "SR008"


class PriorityClass(_StrEnum):
    """RunJobRequest's ``priority_class``."""
    shared_low = "shared-low"
    shared_medium = "shared-medium"
    low = "low"
    medium = "medium"
    high = "high"


class ShmSizeClass(_StrEnum):
    """RunJobRequest's ``shm_size_class``: /dev/shm of 16, 32 or 64 GB per GPU."""
    small = "small"
    medium = "medium"
    large = "large"


class JobHealthAction(_StrEnum):
    """What happens to a job whose workers write no log line for log_period minutes."""
    restart = "restart"
    delete = "delete"


class JobHealthSubAction(_StrEnum):
    """What else happens: ``notify``."""
    notify = "notify"


@dataclass
class JobHealthParams:
    """RunJobRequest's ``health_params``. Only what is given is sent:
    ``JobHealthParams(log_period=30, action=JobHealthAction.restart)`` sends
    ``{"log_period": 30, "action": "restart"}``."""
    log_period: Optional[int] = None
    action: Optional[Union[JobHealthAction, str]] = None
    sub_actions: Optional[List[Union[JobHealthSubAction, str]]] = field(default=None)

    def to_json(self):
        out = {}
        if self.log_period is not None:
            out["log_period"] = self.log_period
        if self.action is not None:
            out["action"] = plain(self.action)
        if self.sub_actions is not None:
            out["sub_actions"] = [plain(a) for a in self.sub_actions]
        return out


def plain(v):
    """v as JSON sends it: enums as their values, helpers as dicts."""
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, JobHealthParams):
        return v.to_json()
    if isinstance(v, dict):
        return {str(plain(k)): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v
