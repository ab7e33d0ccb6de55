"""Privacy core of skfedpriv: calibration, accounting, noise and clipping.

* :mod:`._calibration` — parameter validation, Laplace/Gaussian
  calibration, the exact Gaussian privacy profile, zCDP conversions.
* :mod:`._ledger` — the :class:`PrivacyLedger` of spends, its entries and
  composition rules, and :class:`PrivacyBudgetError`.
* :mod:`._budget` — the shared :class:`PrivacyBudget` (in memory or in an
  SQLite file), which admits a spend iff the composed ledger fits.
* :mod:`._mechanisms` — vectorized Laplace, Gaussian and symmetric-matrix
  Gaussian noise from a :class:`numpy.random.Generator`.
* :mod:`._clipping` — norm clipping of rows and per-example gradients, the
  only source of sensitivity bounds.
* correlated noise for continual prefix sums: :mod:`._tree` (binary-tree
  aggregation), :mod:`._noise_stream` (round-by-round noise),
  :mod:`._prefix_sum` (the factorization base class), :mod:`._factorizations`
  (closed forms and :func:`make_factorization`) and
  :mod:`._optimal_factorization` (optimized factorizations and their cache);
  :mod:`._horizon` holds the error raised past a declared horizon.
* distributed noise under secure aggregation: :mod:`._discrete_gaussian`
  (the discrete Gaussian, its distributed accounting) and
  :mod:`._secure_aggregation` (integer tree streams, modular sums).
"""

from ._budget import PrivacyBudget, write_transaction
from ._calibration import (
    check_privacy_params,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_sigma,
    gaussian_zcdp,
    laplace_scale,
    zcdp_rho,
    zcdp_to_dp,
)
from ._clipping import clip_rows, clip_vectors
from ._continual_summaries import NoiseDominatesWarning
from ._factorizations import (
    FACTORIZATIONS,
    BinaryTreeFactorization,
    IndependentFactorization,
    ToeplitzFactorization,
    make_factorization,
)
from ._horizon import HorizonExceededError
from ._ledger import LedgerEntry, PrivacyBudgetError, PrivacyLedger
from ._mechanisms import (
    SeededNoiseWarning,
    as_generator,
    gaussian_noise,
    laplace_noise,
    symmetric_gaussian_noise,
    warn_if_seeded,
)
from ._noise_stream import NoiseStream
from ._optimal_factorization import BLTFactorization, OptimalFactorization
from ._prefix_sum import PrefixSumFactorization, prefix_sum_matrix
from ._secure_aggregation import WrapAroundWarning
from ._tree import TreeAggregator

__all__ = [
    "BLTFactorization",
    "BinaryTreeFactorization",
    "FACTORIZATIONS",
    "HorizonExceededError",
    "IndependentFactorization",
    "LedgerEntry",
    "NoiseDominatesWarning",
    "NoiseStream",
    "OptimalFactorization",
    "PrefixSumFactorization",
    "PrivacyBudget",
    "PrivacyBudgetError",
    "PrivacyLedger",
    "SeededNoiseWarning",
    "ToeplitzFactorization",
    "TreeAggregator",
    "WrapAroundWarning",
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
    "make_factorization",
    "prefix_sum_matrix",
    "symmetric_gaussian_noise",
    "warn_if_seeded",
    "write_transaction",
    "zcdp_rho",
    "zcdp_to_dp",
]
