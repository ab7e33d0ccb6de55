"""The prefix-sum matrix and the base class of its factorizations.

Each learner of the online federated algorithm of Zhang, Zhu, Fay and
Johansson releases noisy *prefix sums* of its clipped gradients,

    A G + B z,    A = B C,    z ~ N(0, sigma^2 I) entrywise,

where ``A`` is the ``R x R`` lower-triangular all-ones (prefix-sum) matrix
(paper eqs. 3-4). The release is the Gaussian mechanism applied to ``C G``
followed by post-processing with ``B``, so its L2 sensitivity is the largest
column norm of ``C`` times the per-round sensitivity (Appendix B, eq. 15),
while ``||B||_F^2 / R`` is the mean squared error per round and coordinate
(for unit noise).

Privacy statements made about factorizations are about one participation of
one input per round: replacing the input of a single round changes ``C G`` by
at most the column norm of ``C`` times the per-round bound, which the caller
enforces by clipping.
"""

import numpy as np
from scipy import linalg

from ._horizon import _as_shape, _check_n_rounds
from ._noise_stream import _resolve_rng, _ScaledSource

__all__ = ["PrefixSumFactorization", "prefix_sum_matrix"]


def prefix_sum_matrix(n_rounds):
    """Return the ``R x R`` lower-triangular all-ones prefix-sum matrix ``A``.

    Parameters
    ----------
    n_rounds : int
        Number of rounds ``R``.

    Returns
    -------
    A : ndarray of shape (n_rounds, n_rounds)
        ``A[r, s] = 1`` for ``s <= r`` and ``0`` otherwise.

    References
    ----------
    Zhang, Zhu, Fay, Johansson, "Locally differentially private online
    federated learning with correlated noise", eq. (3).
    """
    n_rounds = _check_n_rounds(n_rounds)
    return np.tri(n_rounds)


def _lower_toeplitz(coef):
    return linalg.toeplitz(coef, np.zeros_like(coef))


class PrefixSumFactorization:
    """Base class of factorizations ``A = B C`` of the prefix-sum matrix.

    Subclasses compute, exactly from the factors (never from a paper's
    bound), the quantities that calibrate and score the mechanism.

    Attributes
    ----------
    n_rounds : int
        ``R``, the size of ``A``.
    n_noise : int
        Number of columns of ``B`` (rows of ``C``), i.e. of iid noise draws.
    sensitivity : float
        Largest column L2 norm of ``C``: the L2 sensitivity of ``C G`` when
        one round's input changes by at most 1 in L2 norm (paper Appendix B,
        eq. 15). Multiply by the clipping bound of one round.
    sensitivity_squared : float
        ``sensitivity ** 2``.
    frobenius_B_squared : float
        ``||B||_F^2``.
    mean_squared_error : float
        ``sensitivity_squared * frobenius_B_squared / n_rounds``: the mean
        over rounds of the variance of the prefix-sum noise when ``sigma`` is
        ``sensitivity`` (unit noise multiplier).

    References
    ----------
    Zhang, Zhu, Fay, Johansson, "Locally differentially private online
    federated learning with correlated noise", eqs. (3)-(4) and Appendix B,
    eqs. (15)-(16) (``V_i^2 = Delta^2 / (2 rho)`` with ``Delta`` the
    sensitivity times the per-round bound ``2 B_g / tau``).
    """

    name = None

    def __init__(self, n_rounds):
        self.n_rounds = _check_n_rounds(n_rounds)

    @property
    def n_noise(self):
        """Number of noise columns (of ``B``); one per round unless overridden."""
        return self.n_rounds

    @property
    def sensitivity(self):
        return float(np.sqrt(self.sensitivity_squared))

    @property
    def mean_squared_error(self):
        return self.sensitivity_squared * self.frobenius_B_squared / self.n_rounds

    @property
    def A(self):
        """Dense prefix-sum matrix, shape ``(n_rounds, n_rounds)``."""
        return prefix_sum_matrix(self.n_rounds)

    def noise_stream(self, rng=None, sigma=1.0, shape=()):
        """Return a stream of correlated noise increments.

        Parameters
        ----------
        rng : None, int, numpy.random.Generator or RandomState, default=None
            Randomness of the iid draws ``z``; ``None`` uses fresh OS entropy.
        sigma : float, default=1.0
            Standard deviation of each entry of ``z``.
        shape : int or tuple of int, default=()
            Shape of one round's noise, e.g. ``(n_learners, d)`` to give each
            learner its own independent noise in one vectorized call.

        Returns
        -------
        stream : NoiseStream
            ``stream.next()`` is the increment of the next round; the sum of
            the first ``r`` increments equals ``(B z)_r``. Raises
            :class:`HorizonExceededError` past ``n_rounds``.
        """
        sigma = float(sigma)
        if not np.isfinite(sigma) or sigma < 0:
            raise ValueError(f"sigma must be a finite non-negative number, got {sigma}.")
        return self._make_stream(_ScaledSource(_resolve_rng(rng).standard_normal, sigma),
                                 _as_shape(shape))

    def _make_stream(self, draw, shape):  # pragma: no cover - abstract
        """The stream of increments of ``shape`` from ``draw(size)``, the
        (scaled) iid draws ``z`` (``size = (k,) + shape``, ``k`` new columns
        of ``B`` a round)."""
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}(n_rounds={self.n_rounds})"
