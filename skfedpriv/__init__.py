"""skfedpriv: private, online, federated classification with the scikit-learn API."""

from .linear_model import DWDClassifier

__version__ = "0.1.0.dev0"

__all__ = ["DWDClassifier", "__version__"]
