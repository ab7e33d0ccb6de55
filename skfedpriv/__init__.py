"""skfedpriv: private, online, federated classification with the scikit-learn API."""

from .linear_model import (
    DecentralizedLogisticRegression,
    DWDClassifier,
    LogisticRegression,
    ReleasedModelError,
)
from . import preprocessing
from ._param_validation import InvalidParameterError
from ._release import release
from .linear_model._stream_position import StreamReplayError
from .preprocessing import BoundedScaler, RowNormClipper
from .privacy import PrivacyBudget, PrivacyBudgetError

__version__ = "0.1.0"

__all__ = [
    "BoundedScaler",
    "DWDClassifier",
    "DecentralizedLogisticRegression",
    "InvalidParameterError",
    "LogisticRegression",
    "PrivacyBudget",
    "PrivacyBudgetError",
    "ReleasedModelError",
    "RowNormClipper",
    "StreamReplayError",
    "__version__",
    "release",
]
