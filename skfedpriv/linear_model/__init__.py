"""Linear federated classifiers."""

from ._decentralized import DecentralizedLogisticRegression
from ._dwd import DWDClassifier

__all__ = ["DWDClassifier", "DecentralizedLogisticRegression"]
