"""Streaming correlated noise: :class:`NoiseStream` and its implementations.

``factorization.noise_stream(rng, sigma, shape)`` returns a stream whose
``next()`` gives the noise *increment* of the next round, so that the
increments summed over rounds ``1..r`` equal ``(B z)_r`` for the
factorization's ``B`` and iid draws ``z``. Each stream keeps only the state
its factorization needs: none (independent noise), a tree (binary tree),
every past draw (Toeplitz, optimal) or a few buffers (BLT).
"""

import numpy as np

from ._horizon import HorizonExceededError
from ._tree import TreeAggregator

__all__ = ["NoiseStream"]


class _ScaledSource:
    """Picklable ``size -> scale * source(size)`` (the z-source of a stream)."""

    def __init__(self, source, scale):
        self.source = source
        self.scale = float(scale)

    def __call__(self, size):
        z = np.asarray(self.source(size), dtype=float)
        if z.shape != tuple(size):
            raise ValueError(
                f"the noise source returned shape {z.shape}, expected {tuple(size)}."
            )
        return z if self.scale == 1.0 else self.scale * z


def _resolve_rng(rng):
    if isinstance(rng, (np.random.Generator, np.random.RandomState)):
        return rng
    return np.random.default_rng(rng)


class NoiseStream:
    """Round-by-round correlated noise of a prefix-sum factorization.

    Do not instantiate directly: use
    :meth:`PrefixSumFactorization.noise_stream`. ``next()`` returns the noise
    increment of the next round; the sum of the increments of rounds ``1..r``
    is ``(B z)_r``, with ``z`` the stream's iid draws (one per column of
    ``B``, each an array of ``shape``).

    Attributes
    ----------
    n_rounds : int
        Horizon ``R``.
    shape : tuple of int
        Shape of each increment (e.g. ``(n_learners, d)``).
    round_ : int
        Number of increments produced so far.
    """

    def __init__(self, n_rounds, shape, draw):
        self.n_rounds = n_rounds
        self.shape = shape
        self._draw = draw
        self.round_ = 0

    def next(self):
        """Return the noise increment of the next round.

        Returns
        -------
        increment : ndarray of shape ``shape``

        Raises
        ------
        HorizonExceededError
            Past ``n_rounds``; the stream is left unchanged.
        """
        if self.round_ >= self.n_rounds:
            raise HorizonExceededError(
                f"the factorization was built for n_rounds={self.n_rounds}; "
                "no noise exists for later rounds."
            )
        increment = self._step()
        self.round_ += 1
        return increment

    def _step(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self):
        return (
            f"{type(self).__name__}(n_rounds={self.n_rounds}, shape={self.shape}, "
            f"round_={self.round_})"
        )


class _IndependentStream(NoiseStream):
    """Increment ``z_r``; no state."""

    def _step(self):
        return self._draw((1,) + self.shape)[0]


class _TreeStream(NoiseStream):
    """Tree noise through :class:`TreeAggregator` fed with zeros.

    State: the aggregator (``2 (floor(log2 R) + 1)`` arrays of ``shape``) and
    the previous prefix (one array).
    """

    def __init__(self, n_rounds, shape, draw, estimator):
        super().__init__(n_rounds, shape, draw)
        self._tree = TreeAggregator(n_rounds, shape, noise=draw, estimator=estimator)
        self._previous = np.zeros(shape)

    def _step(self):
        prefix = self._tree.add(0.0)
        increment = prefix - self._previous
        self._previous = prefix
        return increment


class _HistoryStream(NoiseStream):
    """Increment ``sum_{s<=r} D[r, s] z_s`` for a lower-triangular ``D = C^{-1}``.

    State: every past draw ``z_1..z_r`` (``r`` arrays of ``shape``, grown by
    doubling) plus either the ``R`` Toeplitz coefficients of ``D`` or the
    dense ``R x R`` matrix ``D``; round ``r`` costs ``O(r prod(shape))``.
    """

    def __init__(self, n_rounds, shape, draw, toeplitz=None, dense=None):
        super().__init__(n_rounds, shape, draw)
        self._toeplitz = toeplitz
        self._dense = dense
        self._history = np.empty((0,) + shape)

    def _step(self):
        r = self.round_
        z = self._draw((1,) + self.shape)[0]
        if r >= self._history.shape[0]:
            capacity = min(max(2 * self._history.shape[0], 8), self.n_rounds)
            grown = np.empty((capacity,) + self.shape)
            grown[:r] = self._history[:r]
            self._history = grown
        self._history[r] = z
        if self._toeplitz is not None:
            coef = self._toeplitz[r::-1]
        else:
            coef = self._dense[r, : r + 1]
        return np.tensordot(coef, self._history[: r + 1], axes=(0, 0))


class _BLTStream(NoiseStream):
    """Increment ``(C^{-1} z)_r`` for a BLT ``C``: ``n_buffers`` arrays of state.

    ``w_r = z_r - sum_j omega_j s_j`` then ``s_j <- theta_j s_j + w_r``.
    """

    def __init__(self, n_rounds, shape, draw, theta, omega):
        super().__init__(n_rounds, shape, draw)
        self._theta = np.asarray(theta, dtype=float)
        self._omega = np.asarray(omega, dtype=float)
        self._buffers = np.zeros((len(self._theta),) + shape)

    def _step(self):
        z = self._draw((1,) + self.shape)[0]
        w = z - np.tensordot(self._omega, self._buffers, axes=(0, 0))
        expand = (slice(None),) + (None,) * len(self.shape)
        self._buffers = self._theta[expand] * self._buffers + w
        return w
