"""Linear federated classifiers."""

from ._dwd import DWDClassifier

__all__ = ["DWDClassifier"]
