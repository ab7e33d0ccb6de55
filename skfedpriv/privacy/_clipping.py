"""Norm clipping: the only way sensitivity bounds come into being.

A private estimator never reads a norm bound from the data. It takes a
hyperparameter ``max_norm`` (``clip_norm``), clips every row or per-example
gradient to that norm with these functions, and only then uses ``max_norm``
in a sensitivity bound. Clipping scales a vector ``v`` to
``v · min(1, C/‖v‖)``: vectors already inside the ball are returned
unchanged, the direction of the others is kept.
"""

import math

import numpy as np
import scipy.sparse as sp

from ._calibration import _check_positive_finite

__all__ = ["clip_rows", "clip_vectors", "sparse_row_norms"]


def _norms(V, ord):
    """Norm of each leading-axis slice of ``V`` over all trailing axes."""
    flat = V.reshape(V.shape[0], int(np.prod(V.shape[1:])))  # no rows: shape (0, d)
    if ord == 1:
        norms = np.abs(flat).sum(axis=1)
    else:
        norms = np.sqrt(np.einsum("ij,ij->i", flat, flat))
    big = ~np.isfinite(norms)
    if big.any():  # squares overflowed: rescale those slices by their max
        sub = flat[big]
        peak = np.abs(sub).max(axis=1, keepdims=True)
        norms[big] = peak[:, 0] * _norms(sub / peak, ord)
    return norms


def sparse_row_norms(X, norm):
    """The ``norm`` (``'l2'``, ``'l1'`` or ``'max'``) of each row of a CSR
    matrix in canonical form (no column stored twice: ``sum_duplicates``),
    from its stored values only (the L2 norm rescaled by the row's largest
    value, so squares of huge entries cannot overflow)."""
    n_rows = X.shape[0]
    rows = np.repeat(np.arange(n_rows), np.diff(X.indptr))
    values = np.abs(X.data)
    if norm == "l1":
        return np.bincount(rows, values, minlength=n_rows)
    peak = np.zeros(n_rows)
    np.maximum.at(peak, rows, values)
    if norm == "max":
        return peak
    safe = np.where(peak > 0, peak, 1.0)
    return peak * np.sqrt(np.bincount(rows, (values / safe[rows]) ** 2, minlength=n_rows))


def _clip_factors(norms, max_norm, size, eps):
    """``min(1, target / ‖v‖)`` per slice, ``target`` a few ulps inside the
    ball, so that a scaled slice's norm stays ``<= max_norm`` whichever
    (pairwise or naive) summation order a caller uses to recompute it; the
    relative margin is ~(log2(size) + 2) ulps."""
    over = norms > max_norm
    target = max_norm * (1.0 - 2.0 * eps * (math.log2(max(1, size)) + 2.0))
    factor = np.ones_like(norms)
    factor[over] = target / norms[over]
    return factor


def _shrink_until_inside(norms_of, shrink, max_norm, eps):
    """Guard: should rounding still leave a scaled slice above the bound,
    shrink it by a few ulps (``shrink(mask, factor)``; a fixed number of
    vectorized passes)."""
    factor = 1.0 - 4.0 * eps
    for _ in range(8):
        still = norms_of() > max_norm
        if not still.any():
            break
        shrink(still, factor)


def clip_vectors(G, max_norm, ord=2):
    """Clip each leading-axis slice of an array to norm at most ``max_norm``.

    Slice ``G[i]`` (of any trailing shape: a vector for ``(n, d)``, a matrix
    for ``(n, d, k)``, ...) is treated as one vector of all its entries and
    replaced by ``G[i] · min(1, max_norm / ‖G[i]‖)``, where ``‖·‖`` is the
    Frobenius (``ord=2``) or entrywise L1 (``ord=1``) norm over all trailing
    axes. Vectorized over ``i``.

    Parameters
    ----------
    G : array-like of shape (n, ...)
        Per-example vectors, e.g. gradients. Must be finite (NaN or inf would
        defeat the bound and raise). A 1-D array is ``n`` scalars.
    max_norm : float
        Clipping bound ``C``, finite and > 0.
    ord : {2, 1}, default=2
        Norm to clip in.

    Returns
    -------
    G_clipped : ndarray of shape (n, ...)
        A new floating-point array (the input is not modified). Slices with
        norm ``<= max_norm`` (including zero slices) are bit-for-bit
        unchanged; the others point in the same direction and have norm
        ``max_norm`` up to a relative margin of a few ulps taken inwards, so
        that their norm recomputed in floating point is ``<= max_norm``.

    Raises
    ------
    ValueError
        If ``max_norm`` is not finite and > 0, ``ord`` is not 1 or 2, ``G``
        is 0-dimensional or has non-finite entries.

    References
    ----------
    .. [1] M. Abadi, A. Chu, I. Goodfellow, H. B. McMahan, I. Mironov,
       K. Talwar and L. Zhang, "Deep Learning with Differential Privacy",
       CCS 2016, Algorithm 1 (per-example gradient clipping
       ``g / max(1, ‖g‖₂ / C)``).

    Examples
    --------
    >>> import numpy as np
    >>> from skfedpriv.privacy import clip_vectors
    >>> G = np.array([[[3.0, 0.0], [0.0, 4.0]], [[0.1, 0.0], [0.0, 0.0]]])
    >>> clip_vectors(G, 1.0).round(2).tolist()
    [[[0.6, 0.0], [0.0, 0.8]], [[0.1, 0.0], [0.0, 0.0]]]
    """
    max_norm = _check_positive_finite(max_norm, "max_norm")
    if isinstance(ord, (bool, np.bool_)) or ord not in (1, 2):
        raise ValueError(f"ord must be 1 or 2, got {ord!r}.")
    G = np.asarray(G)
    if G.dtype.kind not in "iuf":
        raise TypeError(f"G must be a real numeric array, got dtype {G.dtype}.")
    if not np.issubdtype(G.dtype, np.floating):
        G = G.astype(np.float64)
    if G.ndim == 0:
        raise ValueError("G must have at least one dimension (n, ...).")
    if not np.all(np.isfinite(G)):
        raise ValueError("G contains NaN or infinite values; cannot clip.")
    expand = (slice(None),) + (np.newaxis,) * (G.ndim - 1)

    eps = np.finfo(G.dtype).eps
    size = int(np.prod(G.shape[1:]))
    out = G * _clip_factors(_norms(G, ord), max_norm, size, eps)[expand]

    def shrink(mask, factor):
        out[mask] *= factor

    _shrink_until_inside(lambda: _norms(out, ord), shrink, max_norm, eps)
    return out


def clip_rows(X, max_norm, ord=2):
    """Clip each row of a 2-D array to norm at most ``max_norm``.

    Row ``x_i`` becomes ``x_i · min(1, max_norm / ‖x_i‖)``. This is what
    turns a hyperparameter into a sensitivity bound: after clipping, replacing
    one row changes a sum of rows by at most ``2 · max_norm`` in the chosen
    norm, and any per-row statistic computed from the clipped rows obeys the
    bounds stated in terms of ``max_norm``.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n_samples, n_features)
        Rows to clip; finite. A sparse matrix is clipped as CSR, from its
        stored values (the same factors and inward margin as a dense row;
        its zeros stay zero).
    max_norm : float
        Bound ``C``, finite and > 0.
    ord : {2, 1}, default=2
        Norm of each row: Euclidean (2) or L1 (1).

    Returns
    -------
    X_clipped : {ndarray, CSR matrix} of shape (n_samples, n_features)
        A new floating-point array (CSR if ``X`` is sparse). Rows already
        inside the ball (and zero rows) are unchanged; the other rows keep
        their direction and have norm ``<= max_norm``.

    References
    ----------
    .. [1] K. Chaudhuri, C. Monteleoni and A. D. Sarwate, "Differentially
       Private Empirical Risk Minimization", JMLR 12, 2011, Sec. 3
       (the assumption ``‖x_i‖ <= 1``, enforced here by clipping).
    .. [2] M. Abadi et al., "Deep Learning with Differential Privacy",
       CCS 2016, Algorithm 1.

    Examples
    --------
    >>> from skfedpriv.privacy import clip_rows
    >>> clip_rows([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]], 1.0).round(12).tolist()
    [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]]
    >>> clip_rows([[3.0, -1.0]], 2.0, ord=1).round(12).tolist()
    [[1.5, -0.5]]
    """
    if sp.issparse(X):
        return _clip_sparse_rows(X, max_norm, ord)
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(
            f"X must be 2-D (n_samples, n_features), got shape {X.shape}; "
            "use clip_vectors for other shapes."
        )
    return clip_vectors(X, max_norm, ord=ord)


def _clip_sparse_rows(X, max_norm, ord):
    """:func:`clip_rows` of a sparse matrix: a CSR copy whose stored values
    are scaled by :func:`clip_vectors`' factors and guard."""
    max_norm = _check_positive_finite(max_norm, "max_norm")
    if isinstance(ord, (bool, np.bool_)) or ord not in (1, 2):
        raise ValueError(f"ord must be 1 or 2, got {ord!r}.")
    out = sp.csr_matrix(X, dtype=np.float64, copy=True)
    # canonical form: a row's norm from its stored values is its norm only
    # when no column is stored twice (else (a + b)² > a² + b² escapes the bound)
    out.sum_duplicates()
    if not np.all(np.isfinite(out.data)):
        raise ValueError("X contains NaN or infinite values; cannot clip.")
    norm = "l2" if ord == 2 else "l1"
    eps = np.finfo(np.float64).eps
    counts = np.diff(out.indptr)
    out.data *= np.repeat(_clip_factors(sparse_row_norms(out, norm), max_norm, out.shape[1],
                                        eps), counts)

    def shrink(mask, factor):
        out.data[np.repeat(mask, counts)] *= factor

    _shrink_until_inside(lambda: sparse_row_norms(out, norm), shrink, max_norm, eps)
    return out
