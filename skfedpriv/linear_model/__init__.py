"""Linear federated classifiers."""

from ._base import ReleasedModelError
from ._decentralized import DecentralizedLogisticRegression
from ._dwd import DWDClassifier
from ._dwd_sites import DWDSites
from ._logistic import LogisticRegression

__all__ = [
    "DWDClassifier",
    "DWDSites",
    "DecentralizedLogisticRegression",
    "LogisticRegression",
    "ReleasedModelError",
]
