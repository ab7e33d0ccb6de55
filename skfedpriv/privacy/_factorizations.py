"""Closed-form prefix-sum factorizations and the registry of all of them.

* binary tree (paper eq. 5) with the plain or the Honaker estimator;
* the Toeplitz square root of Henzinger et al. (eq. 8);
* independent noise (Remark III.1);
* :data:`FACTORIZATIONS` and :func:`make_factorization`, which also build the
  optimized factorizations of :mod:`._optimal_factorization`.

See :mod:`._prefix_sum` for the mechanism ``A G + B z`` they calibrate.
"""

import numpy as np

from ._noise_stream import _HistoryStream, _IndependentStream, _TreeStream
from ._optimal_factorization import BLTFactorization, OptimalFactorization
from ._prefix_sum import PrefixSumFactorization, _lower_toeplitz
from ._tree import _honaker_weights, _n_levels, _tree_column_counts, _tree_nodes

__all__ = [
    "BinaryTreeFactorization",
    "FACTORIZATIONS",
    "IndependentFactorization",
    "ToeplitzFactorization",
    "make_factorization",
]


class BinaryTreeFactorization(PrefixSumFactorization):
    """Binary-tree factorization of the prefix-sum matrix (paper eq. 5).

    Rows of ``C`` are the dyadic nodes ``(k 2^l, (k+1) 2^l]`` that complete
    within ``R`` rounds, in post-order (completion order); row ``r`` of ``B``
    combines the nodes of the binary decomposition of ``r``.

    Parameters
    ----------
    n_rounds : int
        Number of rounds ``R``.
    estimator : {"plain", "honaker"}, default="plain"
        ``"plain"``: ``B`` sums the ``popcount(r)`` nodes of the binary
        decomposition; the nodes that no prefix uses (right children) carry
        zero columns of ``B`` in eq. 5 and are dropped, so ``C`` is ``R x R``
        (one node per round, the binary mechanism).
        ``"honaker"``: every complete node is noised (``C`` has
        ``sum_l floor(R / 2^l)`` rows) and each node of the decomposition is
        replaced by its bottom-up variance-optimal estimate from its subtree.
        Same sensitivity, about 1.7 times less mean error at ``R = 1000``.

    Attributes
    ----------
    sensitivity_squared : float
        Largest number of nodes containing one round, counted over nodes
        that complete within ``R``: ``floor(log2 R) + 1`` (eq. 6 states
        ``log2 R + 1``, which is not attained when ``R`` is not a power of 2).
    frobenius_B_squared : float
        ``sum_{t <= R} popcount(t)`` for the plain tree (319 at ``R = 100``,
        4938 at ``R = 1000``); ``sum_t sum_{l in bits(t)} 2^l / (2^{l+1}-1)``
        for Honaker.

    Notes
    -----
    Streaming state: a :class:`TreeAggregator` fed with zeros, i.e.
    ``O(log R)`` arrays of ``shape``; ``z`` are the node noises, drawn when
    the node completes.

    References
    ----------
    Zhang, Zhu, Fay, Johansson, "Locally differentially private online
    federated learning with correlated noise", eqs. (5)-(6).
    Honaker (2015), "Efficient use of differentially private binary trees".
    Kairouz, McMahan, Song, Thakkar, Thakurta, Xu (2021), "Practical and
    private (deep) learning without sampling or shuffling", ICML (tree
    aggregation with Honaker's estimator, streaming form).

    Examples
    --------
    >>> from skfedpriv.privacy import BinaryTreeFactorization
    >>> tree = BinaryTreeFactorization(1000)
    >>> tree.sensitivity_squared, tree.frobenius_B_squared
    (10.0, 4938.0)
    """

    def __init__(self, n_rounds, estimator="plain"):
        super().__init__(n_rounds)
        if estimator not in ("plain", "honaker"):
            raise ValueError(
                f"estimator must be 'plain' or 'honaker', got {estimator!r}."
            )
        self.estimator = estimator
        self.name = "tree" if estimator == "plain" else "honaker"
        self._levels, self._ends = _tree_nodes(self.n_rounds, estimator)
        counts = _tree_column_counts(self.n_rounds, estimator)
        self.sensitivity_squared = float(counts.max())
        t = np.arange(1, self.n_rounds + 1)
        var, _, _ = _honaker_weights(_n_levels(self.n_rounds))
        if estimator == "plain":
            var = np.ones_like(var)
        row = np.zeros(self.n_rounds)
        for level in range(_n_levels(self.n_rounds)):
            row += ((t >> level) & 1) * var[level]
        self._row_norms_squared = row
        self.frobenius_B_squared = float(row.sum())

    @property
    def n_noise(self):
        return int(self._ends.size)

    @property
    def C(self):
        """Dense ``C``, shape ``(n_noise, n_rounds)``: node-round incidence."""
        s = np.arange(1, self.n_rounds + 1)
        start = self._ends - 2**self._levels
        return ((s[None, :] > start[:, None]) & (s[None, :] <= self._ends[:, None])).astype(
            float
        )

    @property
    def B(self):
        """Dense ``B``, shape ``(n_rounds, n_noise)``."""
        r = np.arange(1, self.n_rounds + 1)[:, None]
        levels, ends = self._levels[None, :], self._ends[None, :]
        if self.estimator == "plain":
            # node (end - 2^l, end] is in the decomposition of r iff r and end
            # agree on all bits >= l (end has bit l set, lower bits clear)
            return ((r >> levels) == (ends >> levels)).astype(float)
        _, own, child = _honaker_weights(_n_levels(self.n_rounds))
        B = np.zeros((self.n_rounds, self.n_noise))
        block = (ends >> levels) - 1  # k of (k 2^l, (k+1) 2^l]
        for top in range(_n_levels(self.n_rounds)):
            below = levels <= top
            depth = np.where(below, top - levels, 0)
            ancestor = block >> depth  # index of the level-`top` ancestor
            # weight of a node at level m inside a top block at level `top`:
            # own[m] * prod_{j=m+1}^{top} child[j]
            cum = np.concatenate([[1.0], np.cumprod(child[1 : top + 1][::-1])])[::-1]
            weight = np.where(below, own[levels] * cum[np.minimum(levels, top)], 0.0)
            in_decomposition = ((r >> top) & 1 == 1) & ((r >> top) == ancestor + 1)
            B += np.where(in_decomposition & below, weight, 0.0)
        return B

    def _make_stream(self, draw, shape):
        return _TreeStream(self.n_rounds, shape, draw, self.estimator)

    def __repr__(self):
        return f"BinaryTreeFactorization(n_rounds={self.n_rounds}, estimator={self.estimator!r})"


def _toeplitz_sqrt_coefficients(n_rounds):
    """h(0) = 1, h(r) = (1 - 1/(2r)) h(r-1): coefficients of (1 - x)^(-1/2)."""
    r = np.arange(1, n_rounds)
    return np.concatenate([[1.0], np.cumprod(1.0 - 0.5 / r)])


class ToeplitzFactorization(PrefixSumFactorization):
    """Toeplitz square root of the prefix-sum matrix (paper eq. 8).

    ``B = C`` is lower-triangular Toeplitz with ``h(0) = 1`` and
    ``h(r) = (1 - 1/(2r)) h(r-1)`` (the coefficients of ``(1-x)^{-1/2}``), so
    ``C^2 = A``.

    Parameters
    ----------
    n_rounds : int
        Number of rounds ``R``.

    Attributes
    ----------
    sensitivity_squared : float
        ``sum_{k<R} h(k)^2`` (2.531352 at ``R = 100``, 3.265003 at
        ``R = 1000``). Eq. (8)'s bound ``1 + ln(4R/5)/pi`` (3.128 at
        ``R = 1000``) is *below* this exact value, so it is not used.
    frobenius_B_squared : float
        ``sum_k (R - k) h(k)^2`` (222.0165 at ``R = 100``, 2947.5890 at
        ``R = 1000``).

    Notes
    -----
    Streaming state: all past draws ``z_1..z_r`` (``r`` arrays of ``shape``)
    and the ``R`` coefficients of ``C^{-1}`` (those of ``(1-x)^{1/2}``,
    ``h(k) - h(k-1)``); the increment of round ``r`` is
    ``sum_{s<=r} (h(r-s) - h(r-1-s)) z_s``, ``O(r prod(shape))`` work. Use
    :class:`BLTFactorization` for ``O(1)`` state per coordinate.

    References
    ----------
    Zhang, Zhu, Fay, Johansson, "Locally differentially private online
    federated learning with correlated noise", Example (iii), eq. (8).
    Henzinger, Upadhyay, Upadhyay (2023), "Almost tight error bounds on
    differentially private continual counting", SODA, Section 5.1.
    """

    name = "toeplitz"

    def __init__(self, n_rounds):
        super().__init__(n_rounds)
        h = _toeplitz_sqrt_coefficients(self.n_rounds)
        self.coefficients = h
        k = np.arange(self.n_rounds)
        self.sensitivity_squared = float(np.sum(h**2))
        self.frobenius_B_squared = float(np.sum((self.n_rounds - k) * h**2))
        self._inverse_coefficients = np.diff(h, prepend=0.0)

    @property
    def C(self):
        """Dense ``C`` (lower-triangular Toeplitz), shape ``(R, R)``."""
        return _lower_toeplitz(self.coefficients)

    @property
    def B(self):
        """Dense ``B = C``, shape ``(R, R)``."""
        return self.C

    @staticmethod
    def eq8_bound(n_rounds):
        """Eq. (8)'s stated bound ``1 + ln(4R/5)/pi`` on the squared column norm.

        Returned for comparison only: it is smaller than the exact value
        (e.g. 3.128 < 3.265 at ``R = 1000``), so the class never uses it.

        Parameters
        ----------
        n_rounds : int
            Number of rounds ``R``; the bound grows like ``ln R / pi``.

        Returns
        -------
        bound : float
        """
        return 1.0 + np.log(4.0 * n_rounds / 5.0) / np.pi

    def _make_stream(self, draw, shape):
        return _HistoryStream(
            self.n_rounds, shape, draw, toeplitz=self._inverse_coefficients
        )


class IndependentFactorization(PrefixSumFactorization):
    """Independent noise: ``C = I``, ``B = A`` (paper Remark III.1).

    Each round's released gradient carries fresh noise, so the prefix sum of
    round ``r`` carries ``r`` draws: sensitivity 1, ``||B||_F^2 = R(R+1)/2``.

    Parameters
    ----------
    n_rounds : int
        Number of rounds ``R``.

    Notes
    -----
    Streaming state: none; the increment is ``z_r``.

    References
    ----------
    Zhang, Zhu, Fay, Johansson, "Locally differentially private online
    federated learning with correlated noise", Remark III.1.
    """

    name = "independent"

    def __init__(self, n_rounds):
        super().__init__(n_rounds)
        self.sensitivity_squared = 1.0
        self.frobenius_B_squared = float(self.n_rounds * (self.n_rounds + 1) / 2)

    @property
    def C(self):
        """Dense ``C = I``."""
        return np.eye(self.n_rounds)

    @property
    def B(self):
        """Dense ``B = A``."""
        return np.tri(self.n_rounds)

    def _make_stream(self, draw, shape):
        return _IndependentStream(self.n_rounds, shape, draw)


FACTORIZATIONS = {
    "tree": lambda n_rounds, **kw: BinaryTreeFactorization(n_rounds, "plain", **kw),
    "honaker": lambda n_rounds, **kw: BinaryTreeFactorization(n_rounds, "honaker", **kw),
    "toeplitz": ToeplitzFactorization,
    "optimal": OptimalFactorization,
    "blt": BLTFactorization,
    "independent": IndependentFactorization,
}
"""Names accepted by :func:`make_factorization`."""


def make_factorization(name, n_rounds, **params):
    """Build a prefix-sum factorization by name.

    Parameters
    ----------
    name : {"tree", "honaker", "toeplitz", "optimal", "blt", "independent"}
        Binary tree with the plain or the Honaker estimator (eq. 5), Toeplitz
        square root (eq. 8), optimal (eq. 7, Denisov et al.), buffered linear
        Toeplitz, or independent noise (Remark III.1).
    n_rounds : int
        Number of rounds ``R``.
    **params
        Passed to the class (e.g. ``n_buffers`` for ``"blt"``).

    Returns
    -------
    factorization : PrefixSumFactorization

    References
    ----------
    Zhang, Zhu, Fay, Johansson, "Locally differentially private online
    federated learning with correlated noise", Section III-B.

    Examples
    --------
    >>> from skfedpriv.privacy import make_factorization
    >>> f = make_factorization("toeplitz", 100)
    >>> round(f.sensitivity_squared, 6), round(f.frobenius_B_squared, 4)
    (2.531352, 222.0165)
    """
    try:
        factory = FACTORIZATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown factorization {name!r}; choose one of {sorted(FACTORIZATIONS)}."
        ) from None
    return factory(n_rounds, **params)
