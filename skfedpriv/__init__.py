"""skfedpriv: private, online, federated classification with the scikit-learn API."""

from .linear_model import (
    DecentralizedLogisticRegression,
    DWDClassifier,
    LogisticRegression,
    ReleasedModelError,
)
from . import preprocessing
from ._param_validation import InvalidParameterError
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
    "__version__",
]
