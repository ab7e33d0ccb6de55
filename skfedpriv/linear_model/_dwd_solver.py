"""Federated genDWD solvers: site summaries and the server-side updates.

Sites send only sums over their rows at parameters the server sends them
(paper eqs. 7-12): the loss sum, the gradient sum, the smoothed curvature
sum ``Σ_i w_i Ṽ_q''(u_i) x̄_i x̄_iᵀ`` or its product with a few vectors, and
losses along a search direction. The server adds the ridge term and, online,
the accumulated curvature of earlier batches (eqs. 30-37), and updates.

Parameters of all one-vs-rest models are held together as ``Theta`` of shape
``(p1, K)`` with row 0 the intercept when there is one (``p1 = p + 1``);
curvatures as ``(K, p1, p1)``.

Two server updates:

* :func:`~skfedpriv.linear_model._newton.solve_batch` (in
  :mod:`~skfedpriv.linear_model._newton`) minimizes the renewable objective
  of a batch by Newton steps on these summaries;
* :func:`published_step` is the single update (37) of Algorithm 1, as
  published, with ``H̄`` of eq. 38 (ridge ``n_b λ I`` on every coordinate).

A site's rows ``X`` are a dense array or a CSR matrix: every pass over them
is a product with ``X`` or ``Xᵀ`` (sparse products on CSR), and only the
fixed-size results are dense: scores ``(n, K)``, sums ``(p1, K)``, Gram
matrices ``(p1, p1)``.
"""

import numpy as np
import scipy.sparse as sp

from .._loss import GenDWDLoss, as_loss
from .._losses import fast_power, penalty_mask
from .._sites import (
    dask_client,
    group_site_rows,
    grouped_row_indices,
    map_sites,
    scatter_sites,
    site_row_indices,
    splits_sites,
)
from ..privacy._objective_perturbation import site_noise
from ._dwd_sites import DWDSites, loss_message, prepare_rows, side_flags
from ._factored_curvature import CurvatureStack, RowBlock, RowCurvature
from ._newton import (  # noqa: F401 - solve_batch and the solves, where callers look
    _EXPANSIONS,
    _conjugate_gradient,
    _factor_psd,
    _solve_psd,
    solve_batch,
)

_BLOCK_BYTES = 1 << 21
_BLOCK_ELEMENTS = 1 << 14
# line searches over at most this many steps (the full step and the longer
# ones, not the halvings, which are seldom taken) form the gradient at each
# (in process, rows of at least _FUSED_SIZE numbers: below, a pass over them
# costs less than the bookkeeping); from θ = 0 over more than _BUCKETED_STEPS,
# rows are counted by the step where they pass the kink
_FUSED_STEPS = 1 + len(_EXPANSIONS)
_FUSED_SIZE = 1 << 16
_FUSED_TAKEN = frozenset((0.0, 1.0) + _EXPANSIONS)
# ... but the gradient only at the full and the doubled step (the longer
# ones' losses only: a step past this one is followed by a pass for its
# gradient; at n = 1e5, p = 50 the damped steps taken are 1 and 2)
_FUSED_GRADIENT_STEP = 2.0
_BUCKETED_STEPS = 8
# rows a block of that count (its temporaries of 64 kB stay in cache)
_ZERO_GRID_ROWS = 8192
# the L-BFGS phase's early passes run on a float32 copy of pooled rows of
# at least this many numbers (32 MB as float64: beyond the caches)
_REDUCED_SIZE = 1 << 22
_GRAM_ROWS = 4096
_GRAM_CHUNK_BYTES = 1 << 18


def _gram(X, row_weights, dtype=np.float64):
    """``(Xᵀ diag(d) X, Xᵀ d)`` for ``d >= 0``: the rows with ``d > 0``
    scaled by ``sqrt(d)`` into a buffer of ``_GRAM_ROWS`` rows (no copy of
    all rows), so that numpy forms ``ZᵀZ`` with symmetric rank-k updates
    (BLAS syrk, half the flops of a general product) and ``Xᵀ d = Zᵀ sqrt(d)``
    from the block in cache. The buffer is filled ``_GRAM_CHUNK_BYTES`` at a
    time, each chunk gathered and scaled while in cache: rows with ``d = 0``
    (genDWD's left of the kink, 4-14 % of wide non-separable rows at the
    optimum) cost neither flops nor an extra pass. The block's ``sqrt(d)``
    shares the buffer's one allocation: no array of all rows is allocated
    (their fresh pages: at n = 1e5, p = 50 in a fit ~430 page faults a
    matrix instead of ~630, 12.3-12.6 ms instead of 13.0; benchmarks/README.md).
    ``dtype=np.float32`` scales into a float32 buffer (syrk in float32, the
    sums accumulated in float64 block by block): relative error ~1e-7, for
    a matrix that only shapes a damped step (see :meth:`SiteData.single_matrices`)."""
    every = len(X) == 0 or row_weights.min() > 0
    keep = None if every else np.flatnonzero(row_weights > 0)
    n, p = len(X) if every else len(keep), X.shape[1]
    rows = min(_GRAM_ROWS, n)
    single = np.dtype(dtype) == np.float32
    chunk = max(1, _GRAM_CHUNK_BYTES // (8 * max(p, 1)))
    # float32: each chunk scaled in float64 in cache, then rounded into the block
    space = np.empty(rows * (p + 1) + (min(chunk, rows) * p if single else 0))
    root_buffer = space[rows * p:rows * (p + 1)]
    buffer = (np.empty((rows, p), dtype=np.float32) if single
              else space[:rows * p].reshape(rows, p))
    scaled = space[rows * (p + 1):].reshape(-1, p) if single else None
    gram, weighted_sum = np.zeros((p, p)), np.zeros(p)
    for start in range(0, n, _GRAM_ROWS):
        Z = buffer[:min(_GRAM_ROWS, n - start)]
        block = slice(start, start + len(Z)) if every else keep[start:start + len(Z)]
        root = np.sqrt(row_weights[block], out=root_buffer[:len(Z)])
        for first in range(0, len(Z), chunk):
            last = min(first + chunk, len(Z))
            rows_here = (slice(start + first, start + last) if every
                         else keep[start + first:start + last])
            into = scaled[:last - first] if single else Z[first:last]
            if every or X.dtype != into.dtype:
                np.multiply(X[rows_here], root[first:last, None], out=into)
            else:  # gathered into the block (no temporary chunk), scaled in place
                np.take(X, rows_here, axis=0, out=into)
                into *= root[first:last, None]
            if single:
                Z[first:last] = into
        gram += Z.T @ Z
        weighted_sum += Z.T @ root.astype(Z.dtype, copy=False)
    return gram, weighted_sum


def _sparse_gram(X, row_weights):
    """``(Xᵀ diag(d) X, Xᵀ d)`` of CSR rows, any sign of ``d``: one sparse
    product, densified (its ``(p, p)`` result takes at most 1.5 times the
    dense matrix's memory, whatever the row count; the rows themselves are
    never densified)."""
    return (X.T @ (sp.diags(row_weights) @ X)).toarray(), X.T @ row_weights


def augmented_gram(X, row_weights, fit_intercept, single=False):
    """``Σ_i d_i x̄_i x̄_iᵀ`` with ``x̄_i = (1, x_i)`` (or ``x_i``), without
    materializing the column of ones; ``single``: dense rows with ``d >= 0``
    summed from float32 products (:func:`_gram`; float64 otherwise)."""
    row_weights = np.asarray(row_weights, dtype=float)
    if sp.issparse(X):
        gram_x, weighted_sum = _sparse_gram(X, row_weights)
    elif np.all(row_weights >= 0):
        gram_x, weighted_sum = _gram(X, row_weights, np.float32 if single else np.float64)
    else:
        gram_x = X.T @ (row_weights[:, None] * X)
        weighted_sum = row_weights @ X
    if not fit_intercept:
        return gram_x
    p1 = X.shape[1] + 1
    gram = np.empty((p1, p1))
    gram[0, 0] = row_weights.sum()
    gram[0, 1:] = gram[1:, 0] = weighted_sum
    gram[1:, 1:] = gram_x
    return gram


def _some_columns(M):
    """The columns of ``M`` not all zero, when some are (else None): a
    product reads only those (a CG direction or line-search direction of
    the models still moving; one column of 1797 x 64 rows costs ~1/7 of
    ten)."""
    nonzero = M.any(axis=0)
    return None if nonzero.all() else np.flatnonzero(nonzero)


def augmented_scores(X, Theta, fit_intercept):
    """``x̄_iᵀ θ_k`` for every row and class model (float64; on float32 rows
    the product runs in float32, see :meth:`SiteData.reduced_precision`);
    zero columns of the coefficients give zero scores without a product."""
    coefficients = Theta[1:] if fit_intercept else Theta
    if X.dtype == np.float32:
        coefficients = coefficients.astype(np.float32)
    columns = _some_columns(coefficients)
    if columns is None:
        scores = (X @ coefficients).astype(float, copy=False)
    else:
        scores = np.zeros((X.shape[0], Theta.shape[1]))
        scores[:, columns] = X @ coefficients[:, columns]
    if fit_intercept:
        scores += Theta[0]
    return scores


def _column_sums(R):
    """``Σ_i r_ik`` as one matrix-vector product (several times faster than
    numpy's reduction along the rows of a C-ordered ``R`` of a few columns)."""
    return np.ones(R.shape[0]) @ R


def _augmented_sum(X, R, fit_intercept):
    """``Σ_i x̄_i r_ik``, shape (p1, K) (float64; on float32 rows the product
    runs in float32)."""
    if X.dtype == np.float32:
        out = np.empty((X.shape[1] + int(fit_intercept), R.shape[1]))
        out[int(fit_intercept):] = X.T @ R.astype(np.float32)
        if fit_intercept:
            out[0] = R.sum(axis=0)
        return out
    if not fit_intercept:
        return X.T @ R
    out = np.empty((X.shape[1] + 1, R.shape[1]))
    out[0] = _column_sums(R)
    if sp.issparse(X):
        out[1:] = X.T @ R
    else:
        np.matmul(X.T, R, out=out[1:])
    return out


def site_summary(X, Y, weights, Theta, loss, fit_intercept, with_curvature, scores=None):
    """Summaries of one site's rows at ``Theta`` (what leaves the site).

    Parameters
    ----------
    X : ndarray of shape (n_site, p)
    Y : ndarray of shape (n_site, K)
        Targets in {-1, +1} of each class model.
    weights : ndarray of shape (n_site,)
    Theta : ndarray of shape (p1, K)
        Row 0 is the intercept when ``fit_intercept``.
    loss : MarginLoss or float
        The loss (a float is genDWD's ``q``).
    fit_intercept : bool
    with_curvature : bool or ndarray of bool of shape (K,)
        The curvature sums of every model, or of the models flagged.
    scores : ndarray of shape (n_site, K) or None
        ``x̄_iᵀ θ_k`` when the site already has them (computed if None).

    Returns
    -------
    loss : ndarray of shape (K,)
        ``Σ_i w_i V_q(u_ik)``.
    grad : ndarray of shape (p1, K)
        ``Σ_i w_i y_ik V_q'(u_ik) x̄_i`` (eq. 7, without the ridge term).
    curvature : ndarray of shape (K, p1, p1) or (n_flagged, p1, p1) or None
        ``Σ_i w_i Ṽ_q''(u_ik) x̄_i x̄_iᵀ`` (eq. 12, without the ridge term), of
        the models asked for, in their order.
    """
    loss = as_loss(loss)
    if scores is None:
        scores = augmented_scores(X, Theta, fit_intercept)
    total = np.zeros(Y.shape[1])
    residual = np.empty_like(scores)
    for rows in _element_blocks(*Y.shape):
        block_loss, residual[rows] = _loss_and_residual(Y[rows], weights[rows], scores[rows],
                                                        loss)
        total += block_loss
    grad = _augmented_sum(X, residual, fit_intercept)
    curvature = (site_curvature_matrices(X, Y, weights, scores, loss, fit_intercept, with_curvature)
                 if np.any(with_curvature) else None)
    return total, grad, curvature


def _loss_and_residual(Y, weights, scores, loss):
    """``Σ_i w_i V_q(y_ik s_ik)`` and the residuals ``w_i y_ik V_q'(y_ik s_ik)``
    whose sum against ``x̄_i`` is the gradient; ``scores`` may carry a
    leading axis of steps (then the sums have it too)."""
    row_loss, row_derivative = loss.value_and_derivative(Y * scores)
    return weights @ row_loss, (weights[:, None] * Y) * row_derivative


def site_curvature_matrices(X, Y, weights, scores, loss, fit_intercept, models=True, exact=False,
                            single=False):
    """The curvature part of :func:`site_summary`, from the rows' scores, of
    every model (``models=True``) or of those flagged (on ``V_q''`` with
    ``exact``; from float32 products with ``single``, see :func:`_gram`)."""
    return _curvature_matrices(X, Y, weights, scores, loss, fit_intercept, models, exact,
                               single)[0]


def _flagged(models, n_models):
    """The indices of the models flagged by ``models`` (True: all, or a
    bool per model)."""
    return np.flatnonzero(np.broadcast_to(np.asarray(models, dtype=bool), (n_models,)))


def _curvature_matrices(X, Y, weights, scores, loss, fit_intercept, models=True, exact=False,
                        single=False):
    """:func:`site_curvature_matrices` and the row curvature they sum (one
    column per model flagged)."""
    models = _flagged(models, scores.shape[1])
    if len(models) < scores.shape[1]:  # else no copy of the columns
        Y, scores = Y[:, models], scores[:, models]
    row_curvature = _row_curvature(Y, weights, scores, as_loss(loss),
                                   np.full(len(models), bool(exact)))
    return np.stack([augmented_gram(X, row_curvature[:, j], fit_intercept, single)
                     for j in range(len(models))]), row_curvature


def _element_blocks(n_rows, width):
    """Slices of ``n_rows`` rows of ``width`` numbers each, about
    ``_BLOCK_ELEMENTS`` numbers a block: elementwise work on a block stays
    in cache (several times faster than on whole columns)."""
    size = max(1, _BLOCK_ELEMENTS // max(width, 1))
    return [slice(start, start + size) for start in range(0, n_rows, size)]


def _row_curvature(Y, weights, scores, loss, exact=None):
    """``w_i Ṽ_q''(u_ik)`` per row and model; ``V_q''`` itself for the models
    where ``exact`` (bool of shape (K,)) is True."""
    exact = None if exact is None or not np.any(exact) else np.asarray(exact, dtype=bool)
    every = exact is not None and bool(np.all(exact))  # then no smoothed curvature
    out = np.empty_like(scores)
    for rows in _element_blocks(*Y.shape):
        margins = Y[rows] * scores[rows]
        if every:
            curvature = loss.curvature(margins)
        else:
            curvature = loss.smoothed_curvature(margins)
            if exact is not None:
                curvature = np.where(exact, loss.curvature(margins), curvature)
        out[rows] = weights[rows, None] * curvature
    return out


def _row_blocks(X):
    """Row slices of about ``_BLOCK_BYTES`` of ``X`` (a block stays in cache
    between the two products that read it); one slice of all rows of a
    sparse ``X`` (a sparse product reads only the stored values)."""
    if sp.issparse(X):
        return [slice(None)]
    size = max(64, _BLOCK_BYTES // (X.dtype.itemsize * max(X.shape[1], 1)))
    return [slice(start, start + size) for start in range(0, len(X), size)]


def _rows(X, rows):
    """``X[rows]`` for a slice of :func:`_row_blocks` (no copy of all of a
    sparse ``X``)."""
    return X if rows == slice(None) else X[rows]


def _n_numbers(X):
    """``n p``, the numbers of ``X`` as a dense array: what the in-process
    choices of a pass go by, so that sparse rows take dense rows' path."""
    return X.shape[0] * X.shape[1]


def site_curvature_product(X, Y, weights, Theta, V, loss, fit_intercept, exact=None,
                           row_curvature=None):
    """``Σ_i w_i Ṽ_q''(u_ik) x̄_i x̄_iᵀ v_k`` for every class model (what leaves
    the site: one vector of length p1 per model), the curvature at ``Theta``;
    for the models where ``exact`` (bool of shape (K,)) is True, with the
    loss's own second derivative ``V_q''`` (:func:`gendwd_curvature`) in
    place of the smoothed one.

    Computed block of rows by block of rows, so that ``X`` is read from
    memory once (not once for ``X v`` and once for ``Xᵀ(d X v)``); a zero
    ``v_k`` (a model whose CG is done) gives zero without a product."""
    loss = as_loss(loss)
    columns = _some_columns(V)
    if columns is None:
        return _curvature_product(X, Y, weights, Theta, V, loss, fit_intercept, exact,
                                  row_curvature)
    out = np.zeros(V.shape)
    out[:, columns] = _curvature_product(
        X, Y[:, columns], weights, Theta[:, columns], V[:, columns], loss, fit_intercept,
        None if exact is None else np.broadcast_to(exact, V.shape[1:])[columns],
        None if row_curvature is None else row_curvature[:, columns])
    return out


def _curvature_product(X, Y, weights, Theta, V, loss, fit_intercept, exact, row_curvature):
    """:func:`site_curvature_product` of the models given (one read of ``X``)."""
    out = np.zeros(V.shape)
    for rows in _row_blocks(X):
        Xb = _rows(X, rows)
        if row_curvature is None:
            curvature = _row_curvature(Y[rows], weights[rows],
                                       augmented_scores(Xb, Theta, fit_intercept), loss, exact)
        else:
            curvature = row_curvature[rows]
        out += _augmented_sum(Xb, curvature * augmented_scores(Xb, V, fit_intercept), fit_intercept)
    return out


def site_line_losses(X, Y, weights, Theta, S, steps, loss, fit_intercept, scores=None,
                     direction_scores=None):
    """``Σ_i w_i V_q(y_ik x̄_iᵀ(θ_k + t s_k))`` for each step ``t`` in ``steps``
    (what leaves the site: one number per step and model)."""
    loss = as_loss(loss)
    if scores is None:
        scores = augmented_scores(X, Theta, fit_intercept)
    if direction_scores is None:
        direction_scores = augmented_scores(X, S, fit_intercept)
    steps = np.asarray(steps, dtype=float)
    if (isinstance(loss, GenDWDLoss) and len(steps) > _BUCKETED_STEPS and loss.q <= 16
            and np.all(steps > 0) and not scores.any()):
        return _line_losses_from_zero(Y, direction_scores, weights, steps, loss.q)
    base, slope = Y * scores, Y * direction_scores
    # a model not searched (a zero column of S) is at θ at every step: its
    # loss formed once (a Newton step's halvings are asked for the few
    # models whose longer steps failed)
    still = ~S.any(axis=0)
    if len(steps) == 1 or not still.any():
        return _summed_losses(base, slope, weights, steps, loss)
    out = np.empty((len(steps), Y.shape[1]))
    out[:, still] = _summed_losses(base[:, still], slope[:, still], weights, steps[:1], loss)
    if not still.all():
        out[:, ~still] = _summed_losses(base[:, ~still], slope[:, ~still], weights, steps, loss)
    return out


def _summed_losses(base, slope, weights, steps, loss):
    """``Σ_i w_i V(b_ik + t s_ik)`` for each step ``t``, shape (T, K)."""
    steps = steps[:, None, None]
    out = np.zeros((len(steps), base.shape[1]))
    # all steps of a block of rows at once (see _element_blocks)
    for rows in _element_blocks(len(base), out.size):
        out += weights[rows] @ loss.value(base[None, rows] + steps * slope[None, rows])
    return out


def _step_summaries(X, Y, weights, scores, S, steps, loss, fit_intercept, longest=np.inf):
    """Loss and gradient sums at ``θ + t S`` for each ``t`` in ``steps`` (see
    :func:`site_summary`), from the scores at ``θ`` (None: ``θ = 0``), and
    the direction's scores ``x̄_iᵀ s_k``: one read of ``X`` (each block of
    rows serves ``X S`` and every ``Xᵀ r`` while in cache). The gradient
    only at the steps up to ``longest`` (the losses at all). Shapes (T, K),
    (T', p1, K) for the T' steps ``<= longest`` in their order, (n, K)."""
    steps = np.asarray(steps, dtype=float)
    n_models, graded = Y.shape[1], steps <= longest
    direction_scores = np.empty((X.shape[0], n_models))
    total = np.zeros((len(steps), n_models))
    grad = np.zeros((S.shape[0], int(graded.sum()) * n_models))
    with_grad, loss_only = steps[graded, None, None], steps[~graded, None, None]
    for rows in _row_blocks(X):
        Xb = _rows(X, rows)
        direction_scores[rows] = augmented_scores(Xb, S, fit_intercept)
        base = 0.0 if scores is None else scores[rows]
        block_loss, residual = _loss_and_residual(  # residual: (T', rows, K)
            Y[rows], weights[rows], base + with_grad * direction_scores[rows], loss)
        total[graded] += block_loss
        if len(loss_only):
            total[~graded] += weights[rows] @ loss.value(
                Y[rows] * (base + loss_only * direction_scores[rows]))
        if n_models == 1:
            # one product per step (BLAS gemv; gemm with 2-4 columns costs
            # about as much as four of them, benchmarks/README.md)
            for j in range(len(residual)):
                grad[:, j:j + 1] += _augmented_sum(Xb, residual[j], fit_intercept)
        else:
            grad += _augmented_sum(Xb, residual.transpose(1, 0, 2).reshape(Xb.shape[0], -1),
                                   fit_intercept)
    return (total, grad.reshape(S.shape[0], -1, n_models).transpose(1, 0, 2),
            direction_scores)


def _line_losses_from_zero(Y, direction_scores, weights, steps, q):
    """:func:`site_line_losses` from margins all 0 (``θ = 0``), for many
    steps ``t > 0``: the margins are ``t s_i`` (``s_i = y_i x̄_iᵀ d``), so a
    row is left of the kink ``u0`` (``V_q = 1 - u``) up to the step
    ``u0 / s_i`` and right of it (``(u0/u)^q / (q+1)``) beyond. Rows are
    counted into buckets by the first step past their kink (a search among
    the few steps), and every step's loss is a prefix sum over the buckets:
    one power per row instead of one per row and step, and no sort of the
    rows (for ``q <= 16``, where no power overflows). The rows are taken
    ``_ZERO_GRID_ROWS`` at a time (every temporary in cache, no fresh pages
    of all rows), their bucket sums added up."""
    u0 = q / (q + 1.0)
    order = np.argsort(steps)
    t = steps[order]
    out = np.empty((len(steps), Y.shape[1]))
    n_buckets = len(t) + 1
    for k in range(Y.shape[1]):
        # per bucket: weights, weighted slopes and weighted (u0/s_i)^q
        sums = np.zeros((3, n_buckets))
        total_weight = total_slope = 0.0
        for start in range(0, len(Y), _ZERO_GRID_ROWS):
            rows = slice(start, start + _ZERO_GRID_ROWS)
            s, weights_here = Y[rows, k] * direction_scores[rows, k], weights[rows]
            total_weight += weights_here.sum()
            total_slope += weights_here @ s
            # only rows with t s_i > u0 for some step ever reach the tail (and,
            # q <= 16, (u0 / s_i)^q <= (max t)^q stays finite); the others are
            # left of the kink at every step (the last bucket)
            reach = np.flatnonzero(s > u0 / t[-1])
            s, w = s[reach], weights_here[reach]
            ratio = u0 / s
            crossing = np.searchsorted(t, ratio, side="right")
            sums[0] += np.bincount(crossing, w, n_buckets)
            sums[1] += np.bincount(crossing, w * s, n_buckets)
            sums[2] += np.bincount(crossing, w * fast_power(ratio, q), n_buckets)
        weight_by, slope_by, power_by = sums
        weight_by[-1] += total_weight - weight_by.sum()
        slope_by[-1] += total_slope - slope_by.sum()
        # step j: rows crossing after it are left of the kink, the rest right
        left_weight = np.cumsum(weight_by[::-1])[::-1][1:]
        left_slope = np.cumsum(slope_by[::-1])[::-1][1:]
        right = np.cumsum(power_by)[:-1]
        out[order, k] = left_weight - t * left_slope + fast_power(1.0 / t, q) * right / (q + 1.0)
    return out


def _site_gram(part, fit_intercept):
    """:func:`augmented_gram` of one site's ``(X, Y, weights)``."""
    X, _, weights = part
    return augmented_gram(X, weights, fit_intercept)


def _site_summary(part, Theta, loss, fit_intercept, with_curvature):
    """:func:`site_summary` of one site's ``(X, Y, weights)``."""
    X, Y, weights = part
    return site_summary(X, Y, weights, Theta, loss, fit_intercept, with_curvature)


def _site_curvature_product(part, Theta, V, loss, fit_intercept, exact=None):
    X, Y, weights = part
    return site_curvature_product(X, Y, weights, Theta, V, loss, fit_intercept, exact=exact)


def _site_line_losses(part, Theta, S, steps, loss, fit_intercept):
    X, Y, weights = part
    return site_line_losses(X, Y, weights, Theta, S, steps, loss, fit_intercept)


class SiteData(DWDSites):
    """The rows of each site of one batch, in this process (a :class:`DWDSites`).

    ``SiteData(X, Y, weights, site_rows, n_jobs, fit_intercept)`` holds rows
    already prepared (targets ``Y``, weights, clipping done; ``prepare``
    only checks ``fit_intercept``); :meth:`from_rows` holds raw rows and
    labels, which ``prepare`` turns into summaries' rows
    (:func:`~skfedpriv.linear_model._dwd_sites.prepare_rows`).

    When joblib would run the sites one after another in this process
    (``n_jobs=None``, no ``parallel_config``), or the batch is too small to
    pay for threads (:func:`~skfedpriv._sites.splits_sites`), the sum of the
    sites' summaries is computed in one vectorized pass over all rows: the same
    numbers up to floating-point summation order, without a Python call
    per site. In that case the scores ``x̄_iᵀθ`` of the last few parameter
    values asked about are kept (a site would keep its own), so a round at
    parameters already seen, or on the line between two, costs no pass over
    the rows; a line search over the full step (and longer ones) also forms
    the loss and gradient there in its pass, which answer the next summary
    request at the step taken (the request still counts as a round).
    Otherwise the sites' summaries are joblib tasks, one per group of sites
    (:func:`~skfedpriv._sites.group_site_rows`: about two per worker), so a
    round costs the same with 10 or 10 000 sites.

    Under joblib's Dask backend (and outside a Dask task) each site's rows
    are scattered to the cluster once, when the batch's ``SiteData`` is
    built; every round's per-site task then refers to the site's future and
    carries only the parameters. The data is released from the cluster when
    this object is garbage collected. ``parts`` keeps the client's copy of
    the rows (the site-local noise path computes the first batch's Gram
    matrix from it, in this process).

    ``rounds`` counts the server's requests (each is one message to every
    site and one reply) and ``floats_sent`` the numbers one site sent back
    over all of them.
    """

    _CACHE_SIZE = 4
    speaks_loss_objects = True

    def __init__(self, X, Y, weights, site_rows, n_jobs, fit_intercept):
        self._raw = None
        self._setup(X, Y, weights, len(site_rows), lambda: group_site_rows(site_rows, n_jobs),
                    n_jobs, fit_intercept)

    @classmethod
    def from_rows(cls, X, y, sample_weight, site_rows, n_jobs=None):
        """Sites holding raw rows: features, labels and row weights, with
        ``site_rows[s]`` the row indices of site ``s``."""
        sites = cls._from_raw(X, y, sample_weight, len(site_rows),
                              lambda: group_site_rows(site_rows, n_jobs), n_jobs)
        sites._per_site = lambda: list(site_rows)
        return sites

    @classmethod
    def from_site_codes(cls, X, y, sample_weight, site_codes, n_sites, n_jobs=None):
        """:meth:`from_rows` with the site of each row as a code in
        ``range(n_sites)``; the rows are split by site only if the sites'
        work runs apart (not for the pooled pass in process)."""
        sites = cls._from_raw(X, y, sample_weight, n_sites,
                              lambda: grouped_row_indices(site_codes, n_sites, n_jobs), n_jobs)
        sites._per_site = lambda: site_row_indices(site_codes, n_sites)
        return sites

    @classmethod
    def _from_raw(cls, X, y, sample_weight, n_sites, split, n_jobs):
        sites = cls.__new__(cls)
        sites._raw = (X, y, sample_weight, n_sites, split, n_jobs)
        sites.n_features, sites.n_sites = X.shape[1], n_sites
        return sites

    def labels(self):
        """The rows' labels (None for rows built already prepared)."""
        return None if self._raw is None else self._raw[1]

    def prepare(self, classes, *, fit_intercept, class_weight=None, clip_norm=None):
        """Targets, weights and clipping of the raw rows (see :class:`DWDSites`)."""
        if self._raw is None:
            if bool(fit_intercept) != self.fit_intercept:
                raise ValueError("these sites were prepared with another fit_intercept.")
            if clip_norm is not None:
                # the sensitivity bounds need rows this object clipped itself,
                # each weighing one; rows prepared elsewhere carry no such bound
                raise ValueError(
                    "these sites hold rows prepared outside a privacy mechanism; a "
                    "private fit needs raw rows it clips itself (SiteData.from_rows)."
                )
            return
        X, y, sample_weight, n_sites, split, n_jobs = self._raw
        X, Y, weights = prepare_rows(X, y, sample_weight, classes, fit_intercept=fit_intercept,
                                     class_weight=class_weight, clip_norm=clip_norm)
        self._setup(X, Y, weights, n_sites, split, n_jobs, bool(fit_intercept))
        self._prepared = (X, Y)

    def site_parts(self):
        """The prepared rows of each site, ``[(X_s, Y_s)]`` in site order, for
        a mechanism in which each site transforms its own sum (rounds it);
        only for sites built from raw rows (:meth:`from_rows`,
        :meth:`from_site_codes`) and prepared."""
        X, Y = self._prepared
        return [(X[rows], Y[rows]) for rows in self._per_site()]

    def _setup(self, X, Y, weights, n_sites, split, n_jobs, fit_intercept):
        """``split()`` returns the row indices of each group of sites
        (:func:`~skfedpriv._sites.site_groups`; called only when the sites'
        work runs apart)."""
        if not splits_sites(n_sites, X.shape[0], n_jobs):
            self.parts = [(X, Y, weights)]
        else:
            self.parts = [(X[rows], Y[rows], weights[rows]) for rows in split()]
        self.weight_sum = float(weights.sum())
        self.n_sites = n_sites
        self.n_features = X.shape[1]
        has_positive, has_negative = side_flags(Y, weights)
        self.two_sided = has_positive & has_negative
        self.n_jobs = n_jobs
        self.fit_intercept = fit_intercept
        self.rounds = 0
        self.floats_sent = 0
        self._cache = []
        self._curvature_key = self._row_curvature = None
        self._last_summary = (None, None)  # (q, Theta) and the loss and gradient sent there
        # pooled: the last summary's loss, parameters, sums and scores (models
        # that did not move since are answered from it)
        self._summary_models = None
        self._line = None  # the last line search's steps, losses and gradients
        self._fuse = True  # whether line searches form the gradient at their steps
        # on float32 rows (reduced_precision): the rows as given, and the
        # scores and parameters of the last summary (None otherwise)
        self._full_rows = self._anchor = None
        self._single_matrices = False  # see single_matrices
        # pooled dense rows: the last float64 matrices formed and where (see
        # _windowed_product)
        self._matrices = None
        # under Dask's backend: futures of the rows, sent to the cluster
        # once here and referred to by every round's tasks
        self._handles = None
        client = dask_client() if len(self.parts) > 1 else None
        if client is not None:
            self._handles = scatter_sites(client, self.parts)

    @property
    def scattered(self):
        """True when the sites' rows were sent to a Dask cluster."""
        return self._handles is not None

    @property
    def task_parts(self):
        """Each site's rows for a per-site task: ``(X, Y, w)``, or its
        futures on a cluster (sent once, see :attr:`scattered`)."""
        return self._handles if self.scattered else self.parts

    def reduced_precision(self, on):
        """Answer the next requests from a float32 copy of the rows (``on``)
        or from the rows themselves again; True if the answers changed.

        Only pooled dense float64 rows of at least ``_REDUCED_SIZE``
        numbers in this process take the copy (the passes over them are
        bound by memory traffic: half the bytes a pass); the copy, half the
        rows' memory, is made here and dropped when switched off. Scores and
        sums are then products in float32 (relative error ~1e-7, returned
        as float64), a new point's scores those of the last point asked
        plus the move's (their rounding relative to the move: nearby points
        compare their losses to the move's precision); every cached score
        and sum is dropped at each switch, so no float32 number answers a
        later request. Outside the L-BFGS phase's early iterations the rows
        are read as given (see :mod:`~skfedpriv.linear_model._quasi_newton`)."""
        X, Y, w = self.parts[0]
        if on:
            if (not self._pooled or sp.issparse(X) or X.dtype != np.float64
                    or _n_numbers(X) < _REDUCED_SIZE):
                return False
            self._full_rows = X
            self.parts = [(X.astype(np.float32), Y, w)]
        elif self._full_rows is not None:
            self.parts, self._full_rows = [(self._full_rows, Y, w)], None
        else:
            return False
        self._cache, self._last_summary, self._line = [], (None, None), None
        self._summary_models = None
        self._curvature_key = self._row_curvature = self._anchor = None
        return True

    def single_matrices(self, on):
        """Form the next curvature matrices from float32 products (``on``,
        :func:`_gram`: 7.4 ms instead of 10.1 at n = 1e5, p = 50) or in
        float64 again; True if followed. Only the pooled pass in this process
        over dense rows of at least ``_REDUCED_SIZE`` numbers follows it
        (per-site tasks, remote sites and smaller rows, where the matrix is
        cheap, answer in float64: their fits as before, bitwise). The
        solver asks it only for a damped step's matrix, which never stops a
        model nor becomes the returned curvature (see
        :meth:`~._newton.NewtonSolver.curvature_matrices`)."""
        X = self.parts[0][0]
        self._single_matrices = (bool(on) and self._pooled and not sp.issparse(X)
                                 and _n_numbers(X) >= _REDUCED_SIZE)
        return self._single_matrices or not on

    def _count(self, *results):
        self.rounds += 1
        self.floats_sent += sum(int(np.size(r)) for r in results if r is not None)

    @property
    def _pooled(self):
        return len(self.parts) == 1 and not self.scattered

    def _scores(self, Theta):
        """Scores of the pooled rows at ``Theta`` (cached)."""
        value = self._cached_scores(Theta)
        if value is None:
            value = augmented_scores(self.parts[0][0], Theta, self.fit_intercept)
            self._remember(Theta, value)
        return value

    def _cached_scores(self, Theta):
        key = (Theta.shape, Theta.tobytes())
        for cached, value in self._cache:
            if cached == key:
                return value
        if not Theta.any():
            # θ = 0 (a fit's start): every score is 0, no pass over the rows
            value = np.zeros((self.parts[0][0].shape[0], Theta.shape[1]))
            self._remember(Theta, value)
            return value
        return None

    def _remember(self, Theta, scores):
        key = (Theta.shape, Theta.tobytes())
        self._cache = [(key, scores)] + self._cache[: self._CACHE_SIZE - 1]

    def _map(self, pooled_func, site_func, site_args, rest):
        if self.scattered:
            tasks = [(part,) + rest for part in self._handles]
            return map_sites(site_func, tasks, n_jobs=self.n_jobs)
        return map_sites(pooled_func, [part + site_args for part in self.parts],
                         n_jobs=self.n_jobs)

    def gram(self):
        """``Σ_i w_i x̄_i x̄_iᵀ`` summed over the sites (not counted as a
        round: the callers count what they release)."""
        if self.scattered:
            tasks = [(part, self.fit_intercept) for part in self._handles]
            results = map_sites(_site_gram, tasks, n_jobs=self.n_jobs)
        else:
            tasks = [(X, w, self.fit_intercept) for X, _, w in self.parts]
            results = map_sites(augmented_gram, tasks, n_jobs=self.n_jobs)
        return sum(results)

    def majorizer(self, loss):
        """``c Σ_i w_i x̄_i x̄_iᵀ`` with ``c`` the loss's curvature bound
        (``(q+1)²/q`` for genDWD): a global bound of the loss curvature."""
        gram = self.gram()
        self._count(gram)
        return as_loss(loss).curvature_bound * gram

    @property
    def offers_curvature_rows(self):
        """True in process (rows not scattered to a cluster): the sites can
        answer :meth:`curvature_rows`."""
        return not self.scattered

    @property
    def n_rows(self):
        """The number of rows over all sites."""
        return sum(part[0].shape[0] for part in self.parts)

    def row_blocks(self):
        """The sites' rows as :class:`~._factored_curvature.RowBlock` objects
        (their Gram matrices kept): a copy of rows the caller may hold, the
        parts themselves when split here (``X[rows]``, this object's own)."""
        if getattr(self, "_row_blocks_", None) is None:
            own = len(self.parts) > 1
            self._row_blocks_ = [RowBlock(X, self.fit_intercept, copy=not own)
                                 for X, _, _ in self.parts]
        return self._row_blocks_

    def on_rows(self, block):
        """These sites' labels and weights (the parts pooled in order) on the
        rows of ``block``: the coordinates of the rows in their span
        (:mod:`._row_span`), Gram matrices known. In process only, as
        :meth:`curvature_rows`; counts numbers per site as these sites do."""
        Y = np.concatenate([Y for _, Y, _ in self.parts])
        weights = np.concatenate([w for _, _, w in self.parts])
        out = SiteData(block.X, Y, weights, [np.arange(len(Y))], None, self.fit_intercept)
        out.n_sites = self.n_sites
        out._row_blocks_ = [block]
        return out

    def curvature_rows(self, Theta, loss, models=True):
        """The curvature summary as rows: ``sqrt(w_i Ṽ_q''(u_ik)) x̄_i`` of
        every row, for every model or those flagged, as a
        :class:`~._factored_curvature.CurvatureStack` (no ridge). The same
        request as the curvature of :meth:`summaries` (no extra round), but
        each row's weighted features leave the site: in process only (the
        remote protocol sends only the ``p1 x p1`` sum). ``floats_sent``
        counts the average site's rows."""
        loss = as_loss(loss)
        flagged = _flagged(models, Theta.shape[1])
        scales = []
        for X, Y, w in self.parts:
            scores = (self._scores(Theta) if self._pooled
                      else augmented_scores(X, Theta, self.fit_intercept))
            row = _row_curvature(Y[:, flagged], w, scores[:, flagged], loss)
            scales.append(np.sqrt(np.maximum(row, 0.0)))
        blocks, p1 = self.row_blocks(), Theta.shape[0]
        stack = CurvatureStack([
            RowCurvature(blocks, [s[:, j] for s in scales], np.zeros(p1), self.fit_intercept)
            for j in range(len(flagged))])
        self.floats_sent += len(flagged) * self._rows_per_site() * p1
        return stack

    def smoothing_inert(self, Theta, loss):
        """Per model, whether at ``Theta`` every row's smoothed curvature is
        the loss's own (no margin within the smoothing window): the smoothed
        and the semismooth curvature are then one matrix. In process only,
        as :meth:`curvature_rows` (the margins stay here; one bit per model
        is the answer)."""
        loss = as_loss(loss)
        exact = np.ones(Theta.shape[1], dtype=bool)
        same = exact.copy()
        for X, Y, w in self.parts:
            scores = (self._scores(Theta) if self._pooled
                      else augmented_scores(X, Theta, self.fit_intercept))
            same &= np.all(_row_curvature(Y, w, scores, loss)
                           == _row_curvature(Y, w, scores, loss, exact), axis=0)
        return same

    def _rows_per_site(self):
        """The rows of the average site (rounded up): what ``floats_sent``
        counts for a summary of one number per row and parameter."""
        return -(-self.n_rows // max(self.n_sites, 1))

    def majorizer_rows(self, loss):
        """:meth:`majorizer` as rows ``sqrt(c w_i) x̄_i`` (one model; see
        :meth:`curvature_rows`)."""
        bound = as_loss(loss).curvature_bound
        blocks = self.row_blocks()
        scales = [np.sqrt(bound * np.maximum(w, 0.0)) for _, _, w in self.parts]
        self._count(None)
        self.floats_sent += self._rows_per_site() * (self.n_features + int(self.fit_intercept))
        return CurvatureStack([RowCurvature(blocks, scales, np.zeros(blocks[0].X.shape[1]
                                                                      + self.fit_intercept),
                                            self.fit_intercept)])

    def summaries(self, Theta, loss, with_curvature):
        """Sum of the sites' summaries (the server's aggregation); the
        curvature of every model, or of the models flagged in
        ``with_curvature`` (see :func:`site_summary`)."""
        loss = as_loss(loss)
        if self._pooled:
            X, Y, w = self.parts[0]
            key = (loss, Theta.shape, Theta.tobytes())
            if self._last_summary[0] == key:
                # the loss and gradient here are known (sent just before, or
                # formed with the line search that reached this point)
                total, grad = self._last_summary[1]
            elif (unmoved := self._unmoved_models(Theta, loss)) is not None:
                total, grad = self._moved_summary(Theta, loss, unmoved)
            elif _n_numbers(X) >= _FUSED_SIZE and self._cached_scores(Theta) is None:
                # scores not known here (e.g. the full step of a Newton step):
                # X Theta and the gradient sum in one read of the rows; on
                # float32 rows the scores of the last point asked plus those
                # of the move from it (rounding relative to the move, so
                # nearby points compare their objectives to its precision)
                base, at = self._anchor if self._anchor is not None else (None, None)
                move = Theta if base is None else Theta - at
                losses, grads, scores = _step_summaries(X, Y, w, base, move, [1.0], loss,
                                                        self.fit_intercept)
                self._remember(Theta, scores if base is None else base + scores)
                total, grad = losses[0], grads[0]
            else:
                total, grad, _ = site_summary(X, Y, w, Theta, loss, self.fit_intercept, False,
                                             scores=self._scores(Theta))
            curvature = row_curvature = None
            if np.any(with_curvature):
                curvature, row_curvature = _curvature_matrices(
                    X, Y, w, self._scores(Theta), loss, self.fit_intercept, with_curvature,
                    single=self._single_matrices)
            self._keep_matrices(Theta, loss, with_curvature, curvature, row_curvature)
            self._last_summary = (key, (total, grad))
            self._summary_models = (loss, Theta.copy(), total, grad, self._scores(Theta))
            if self._full_rows is not None:
                self._anchor = (self._scores(Theta), Theta.copy())
        else:
            rest = (Theta, loss, self.fit_intercept, with_curvature)
            results = self._map(site_summary, _site_summary, rest, rest)
            total = sum(r[0] for r in results)
            grad = sum(r[1] for r in results)
            curvature = sum(r[2] for r in results) if np.any(with_curvature) else None
        self._count(total, grad, curvature)
        return total, grad, curvature

    def _unmoved_models(self, Theta, loss):
        """The models whose parameters are those of the last summary (pooled
        float64 rows), when some but not all are (else None)."""
        last = self._summary_models
        if (last is None or self._full_rows is not None or last[0] != loss
                or last[1].shape != Theta.shape):
            return None
        unmoved = (Theta == last[1]).all(axis=0)
        return unmoved if unmoved.any() and not unmoved.all() else None

    def _moved_summary(self, Theta, loss, unmoved):
        """The loss and gradient at ``Theta`` where only the models not in
        ``unmoved`` moved since the last summary: those of the others are
        the last summary's, the moved models' scores and sums are formed
        from their columns alone (one-vs-rest models that stopped, or that
        wait for the slowest: a pass over fewer columns)."""
        X, Y, w = self.parts[0]
        _, _, total, grad, scores = self._summary_models
        moved = np.flatnonzero(~unmoved)
        cached = self._cached_scores(Theta)
        if cached is None:
            cached = scores.copy()
            cached[:, moved] = augmented_scores(X, Theta[:, moved], self.fit_intercept)
            self._remember(Theta, cached)
        moved_total, moved_grad, _ = site_summary(X, Y[:, moved], w, Theta[:, moved], loss,
                                                  self.fit_intercept, False,
                                                  scores=cached[:, moved])
        total, grad = total.copy(), grad.copy()
        total[moved], grad[:, moved] = moved_total, moved_grad
        return total, grad

    def _keep_matrices(self, Theta, loss, models, curvature, row_curvature):
        """Keep the float64 matrices just formed at ``Theta`` and the row
        curvature they sum (pooled dense rows, matrices of fewer numbers
        than the rows) for :meth:`_windowed_product`; forget any earlier
        ones."""
        X = self.parts[0][0]
        keep = (curvature is not None and not self._single_matrices
                and self._full_rows is None and not sp.issparse(X)
                and curvature.size <= _n_numbers(X))
        self._matrices = None if not keep else (
            loss, Theta.tobytes(),
            _flagged(models, Theta.shape[1]),
            curvature, row_curvature)

    def _windowed_product(self, Theta, V, loss, row_curvature):
        """The curvature product at ``Theta`` from the float64 matrices kept
        there (:meth:`_keep_matrices`, the smoothed curvature ``Ṽ_q''``):
        ``M_k v_k`` plus, for models on ``V_q''`` (``row_curvature``), the
        rows where it differs from ``Ṽ_q''``, those within the smoothing
        window of the kink (eq. 8; none or a few at a returned point), so
        no pass over all rows (the stopping rule's check of a model on the
        matrix formed there). None when no matrix is kept for the models
        of ``V`` at ``Theta``."""
        kept = self._matrices
        if kept is None or kept[0] != loss or kept[1] != Theta.tobytes():
            return None
        columns = np.flatnonzero(V.any(axis=0))
        position = np.searchsorted(kept[2], columns)
        if len(columns) == 0 or not np.array_equal(kept[2][np.minimum(
                position, len(kept[2]) - 1)], columns):
            return None
        X = self.parts[0][0]
        out = np.zeros(V.shape)
        for j, k in zip(position, columns):
            out[:, k] = kept[3][j] @ V[:, k]
        difference = row_curvature[:, columns] - kept[4][:, position]
        rows = np.flatnonzero(difference.any(axis=1))
        if len(rows):
            Xr = X[rows]
            out[:, columns] += _augmented_sum(
                Xr, difference[rows] * augmented_scores(Xr, V[:, columns], self.fit_intercept),
                self.fit_intercept)
        return out

    def curvature_product(self, Theta, V, loss, exact=None):
        """``Σ_sites Σ_i w_i Ṽ_q''(u_ik) x̄_i x̄_iᵀ v_k`` at ``Theta``, shape
        (p1, K) (``V_q''`` for the models in ``exact``)."""
        loss = as_loss(loss)
        if self._pooled:
            X, Y, w = self.parts[0]
            key = (loss, Theta.tobytes(),
                   None if exact is None else np.asarray(exact, dtype=bool).tobytes())
            if self._curvature_key != key:
                self._row_curvature = _row_curvature(Y, w, self._scores(Theta), loss, exact)
                self._curvature_key = key
            out = self._windowed_product(Theta, V, loss, self._row_curvature)
            if out is None:
                out = site_curvature_product(X, Y, w, Theta, V, loss, self.fit_intercept,
                                             row_curvature=self._row_curvature)
        else:
            rest = (Theta, V, loss, self.fit_intercept, exact)
            out = sum(self._map(site_curvature_product, _site_curvature_product, rest, rest))
        self._count(out)
        return out

    def line_losses(self, Theta, S, steps, loss):
        """Summed losses at ``Theta + t S`` for each ``t`` in ``steps``, shape
        (len(steps), K)."""
        loss = as_loss(loss)
        steps = [float(t) for t in steps]
        if (self._pooled and self._fuse and len(steps) <= _FUSED_STEPS
                and _n_numbers(self.parts[0][0]) >= _FUSED_SIZE):
            # a few steps (Newton's full step, or it and longer ones): the
            # gradient at each up to _FUSED_GRADIENT_STEP is formed in the
            # same pass over the rows, and the one at the step taken answers
            # the next request (advance)
            X, Y, w = self.parts[0]
            out, grads, direction_scores = _step_summaries(
                X, Y, w, self._scores(Theta), S, steps, loss, self.fit_intercept,
                longest=_FUSED_GRADIENT_STEP)
            self._remember(S, direction_scores)
            graded = np.array(steps) <= _FUSED_GRADIENT_STEP
            self._line = (loss, S, np.array(steps)[graded], out[graded], grads)
        elif self._pooled:
            X, Y, w = self.parts[0]
            out = site_line_losses(X, Y, w, Theta, S, steps, loss, self.fit_intercept,
                                   scores=self._scores(Theta),
                                   direction_scores=self._scores(S))
        else:
            rest = (Theta, S, steps, loss, self.fit_intercept)
            out = sum(self._map(site_line_losses, _site_line_losses, rest, rest))
        self._count(out)
        return out

    def noised_summary(self, kind, Theta, loss, std, random_state):
        """Sum over sites of each site's summary ``kind`` plus its own noise.

        ``kind``: 'gradient' (at ``Theta``), 'curvature' (at ``Theta``) or
        'gram' (the augmented Gram matrix). Each of the ``n_sites`` sites adds
        independent noise of std ``std``
        (:func:`~skfedpriv.privacy._objective_perturbation.site_noise`),
        drawn here from ``random_state``.
        """
        loss = as_loss(loss)
        if kind == "gram":
            value = sum(augmented_gram(X, w, self.fit_intercept) for X, _, w in self.parts)
            self._count(value)
        else:
            _, grad, curvature = self.summaries(Theta, loss, kind == "curvature")
            value = grad if kind == "gradient" else curvature
        p1, n_models = Theta.shape
        return value + sum(site_noise(kind, std, p1, n_models, random_state)
                           for _ in range(self.n_sites))

    offers_inference = True

    def inference_summary(self, Theta, derivative, curvature):
        """Summed inference summaries of the sites at ``Theta`` (see
        :class:`DWDSites`)."""
        from ._inference_sites import sum_site_inference
        out = sum_site_inference(self.task_parts, Theta, self.fit_intercept, derivative, curvature,
                                 self.n_jobs)
        self.rounds += 1
        self.floats_sent += out.n_floats
        return out

    def advance(self, Theta, S, steps):
        """``Theta + steps * S`` (one step per model); sites that kept the
        scores at ``Theta`` and along ``S`` get the new scores for free."""
        new = Theta + steps * S
        if self._pooled:
            self._remember(new, self._scores(Theta) + steps * self._scores(S))
            self._take_line_summary(new, S, steps)
            # fuse the next search's gradients only if this one's step was one
            # a fused search forms (else their pass is wasted: damped steps)
            self._fuse = all(t in _FUSED_TAKEN for t in np.ravel(steps).tolist())
        return new

    def _take_line_summary(self, new, S, steps):
        """Keep the loss and gradient at ``new`` if the last line search (along
        this very ``S``) formed them: each model at one of its steps, or not
        moved along a zero direction."""
        line, self._line = self._line, None
        if line is None or line[1] is not S or not len(line[2]):
            return
        loss, _, trial, losses, grads = line
        steps = np.broadcast_to(steps, (S.shape[1],))
        match = trial[:, None] == steps[None, :]
        pick = np.argmax(match, axis=0)  # 0 for a model not moved along a zero direction
        if not np.all(match.any(axis=0) | ((steps == 0) & ~S.any(axis=0))):
            return
        models = np.arange(S.shape[1])
        self._last_summary = ((loss, new.shape, new.tobytes()),
                              (losses[pick, models], grads[pick, :, models].T))


def published_step(sites, Theta, *, loss, alpha, fit_intercept, prior):
    """One update of Algorithm 1 (eq. 37) from the previous estimate ``Theta``.

    ``θ_b = θ_{b-1} - [Σ_{j<=b} H̄_j]^{-1} ∇L_b(θ_{b-1})`` with ``H̄_b`` of
    eq. 38 at ``θ_{b-1}``: smoothed curvature plus ``n_b λ I`` (a ridge on
    the intercept too, as published).

    Returns the new ``Theta`` and ``H̄_b`` (to be added to the prior).
    """
    p1 = Theta.shape[0]
    _, grad, curvature = sites.summaries(Theta, loss_message(sites, loss), True)
    ridge = alpha * sites.weight_sum
    grad = grad + ridge * penalty_mask(p1, fit_intercept)[:, None] * Theta
    h_bar = curvature + ridge * np.eye(p1)[None]
    system = h_bar if prior is None else h_bar + prior
    return Theta - _solve_psd(system, grad), h_bar
