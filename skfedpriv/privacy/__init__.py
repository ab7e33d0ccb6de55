"""Privacy core of skfedpriv: calibration, accounting, noise and clipping.

* :mod:`._accounting` — parameter validation, Laplace/Gaussian calibration,
  the exact Gaussian privacy profile, zCDP conversions, the
  :class:`PrivacyLedger`.
* :mod:`._budget` — the shared :class:`PrivacyBudget` (in memory or in an
  SQLite file), which admits a spend iff the composed ledger fits.
* :mod:`._mechanisms` — vectorized Laplace, Gaussian and symmetric-matrix
  Gaussian noise from a :class:`numpy.random.Generator`.
* :mod:`._clipping` — norm clipping of rows and per-example gradients, the
  only source of sensitivity bounds.
"""

from ._accounting import (
    LedgerEntry,
    PrivacyLedger,
    check_privacy_params,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_sigma,
    gaussian_zcdp,
    laplace_scale,
    zcdp_rho,
    zcdp_to_dp,
)
from ._budget import PrivacyBudget, PrivacyBudgetError
from ._clipping import clip_rows, clip_vectors
from ._mechanisms import (
    SeededNoiseWarning,
    as_generator,
    gaussian_noise,
    laplace_noise,
    symmetric_gaussian_noise,
    warn_if_seeded,
)

__all__ = [
    "LedgerEntry",
    "PrivacyBudget",
    "PrivacyBudgetError",
    "PrivacyLedger",
    "SeededNoiseWarning",
    "as_generator",
    "check_privacy_params",
    "clip_rows",
    "clip_vectors",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_noise",
    "gaussian_sigma",
    "gaussian_zcdp",
    "laplace_noise",
    "laplace_scale",
    "symmetric_gaussian_noise",
    "warn_if_seeded",
    "zcdp_rho",
    "zcdp_to_dp",
]
