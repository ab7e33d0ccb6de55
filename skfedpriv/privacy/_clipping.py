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

from ._calibration import _check_positive_finite

__all__ = ["clip_rows", "clip_vectors"]


def _norms(V, ord):
    """Norm of each leading-axis slice of ``V`` over all trailing axes."""
    flat = V.reshape(V.shape[0], -1)
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

    norms = _norms(G, ord)
    over = norms > max_norm
    # Scaled slices aim a few ulps inside the ball, so that their norm stays
    # <= max_norm whichever (pairwise or naive) summation order a caller uses
    # to recompute it; the relative margin is ~(log2(size) + 2) ulps.
    eps = np.finfo(G.dtype).eps
    size = max(1, int(np.prod(G.shape[1:])))
    target = max_norm * (1.0 - 2.0 * eps * (math.log2(size) + 2.0))
    factor = np.ones_like(norms)
    factor[over] = target / norms[over]
    out = G * factor[expand]
    # Guard: should rounding still leave a scaled slice above the bound,
    # shrink it by a few ulps (a fixed number of vectorized passes).
    shrink = 1.0 - 4.0 * eps
    for _ in range(8):
        still = _norms(out, ord) > max_norm
        if not still.any():
            break
        out[still] *= shrink
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
    X : array-like of shape (n_samples, n_features)
        Rows to clip; finite.
    max_norm : float
        Bound ``C``, finite and > 0.
    ord : {2, 1}, default=2
        Norm of each row: Euclidean (2) or L1 (1).

    Returns
    -------
    X_clipped : ndarray of shape (n_samples, n_features)
        A new floating-point array. Rows already inside the ball (and zero
        rows) are unchanged; the other rows keep their direction and have
        norm ``<= max_norm``.

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
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(
            f"X must be 2-D (n_samples, n_features), got shape {X.shape}; "
            "use clip_vectors for other shapes."
        )
    return clip_vectors(X, max_norm, ord=ord)
