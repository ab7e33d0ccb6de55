"""Linear federated classifiers."""

from ._base import ReleasedModelError
from ._decentralized import DecentralizedLogisticRegression
from ._dwd import DWDClassifier
from ._dwd_sites import DWDSites
from ._inference_stream import StreamShiftWarning
from ._local_steps import BatchLearners, LogisticLearners, RoundRequest
from ._logistic import LogisticRegression

__all__ = [
    "BatchLearners",
    "DWDClassifier",
    "DWDSites",
    "DecentralizedLogisticRegression",
    "LogisticLearners",
    "LogisticRegression",
    "ReleasedModelError",
    "RoundRequest",
    "StreamShiftWarning",
]
