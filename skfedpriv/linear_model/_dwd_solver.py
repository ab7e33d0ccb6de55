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

* :func:`solve_batch` minimizes, for every class model k,

  ``F_k(θ) = Σ_i w_i V_q(y_ik x̄_iᵀθ) + (α W / 2) ‖β‖² + ½ (θ - c_k)ᵀ P_k (θ - c_k)``

  with ``W`` the batch weight sum, ``P_k`` the curvature accumulated over
  earlier batches and ``c_k`` the previous estimate: the renewable
  estimating equation (30), and, with ``P = 0``, the offline objective (5)
  times ``W``. Every step is accepted by an Armijo backtracking test, so
  ``F_k`` never increases (the paper's update (16) with ``H̄`` is not a
  majorizer and need not descend). Offline (``refresh_curvature=True``) the
  step is an inexact Newton step: conjugate gradients on the smoothed
  curvature (eq. 8), through curvature-vector products the sites compute,
  unpreconditioned at first. Once a model's last Newton step was taken in
  full (the local phase) its CG runs on the loss's own second derivative
  ``V_q''`` instead (0 left of the kink; at the kink its right limit, an
  element of the generalized Hessian): a semismooth Newton step, which
  converges superlinearly where the smoothed model, wrong for the rows
  within its window around the kink, converges only linearly (on nearly
  separable data such as scikit-learn's breast cancer rows, q = 1: 19
  Newton steps instead of 55). The smoothed curvature stays the one of
  the damped phase (where it is the more cautious model) and of every
  matrix: the renewable state, the stopping test and the preconditioner.
  The ``O(n p²)`` curvature matrix of a model is formed (and then
  preconditions its CG) only when its CG runs out or its steps converge
  slowly, and once at the returned point (the renewable state): on
  well-conditioned rows, only there; a request for matrices names the
  one-vs-rest models that need one and do not have it at their current
  parameters. Online
  (``refresh_curvature=False``, eq. 35) the curvature stays at the starting
  point and each step is one triangular solve.

  Requests per step: online, and offline once a model's last Newton step
  was taken in full (the local phase), the full step is asked as one
  summary request (its loss and gradient, which the next step needs) and
  Armijo-tested by the server, so a step taken in full costs one round;
  only a refused one backtracks (all halvings in one more round). In the
  damped phase the full step and longer ones are searched in one round,
  then the gradient is asked where the search went.

  Stopping rule: a model stops at ``θ`` once half its Newton decrement
  ``½ gᵀH⁻¹g`` (the objective gap of the quadratic model) is at most
  ``tol |F(θ)|``. Offline the test is exact only with the matrix formed at
  ``θ``: a step predicted (from the rate of the last two full steps) to
  land within ``tol / _SAFETY`` forms the matrix where it
  lands, and a CG whose own (lower-bound) decrement falls within ``tol``
  has the matrix formed where it is, before the model stops. So the
  matrix that stops a model is the returned curvature.
* :func:`published_step` is the single update (37) of Algorithm 1, as
  published, with ``H̄`` of eq. 38 (ridge ``n_b λ I`` on every coordinate).
"""

import warnings

import numpy as np
from scipy.linalg import LinAlgError
from scipy.linalg.lapack import dpotrf, dpotrs
from sklearn.exceptions import ConvergenceWarning

from .._losses import (
    _power,
    gendwd_curvature,
    gendwd_curvature_bound,
    gendwd_loss,
    gendwd_loss_and_derivative,
    gendwd_smoothed_curvature,
    penalty_mask,
)
from .._sites import dask_client, map_sites, runs_in_process, scatter_sites, site_row_indices
from ..privacy._objective_perturbation import site_noise
from ._dwd_sites import DWDSites, prepare_rows, side_flags

_ARMIJO_SLOPE = 1e-4
_MAX_HALVINGS = 50
_HALVINGS = 0.5 ** np.arange(1, _MAX_HALVINGS + 1)
_NEWTON_HALVINGS = 6
# longer steps a Newton step after a damped one (or the grid) also tries, in
# the same round as the full step: from the small-margin side of the optimum
# (curvature up to (q+1)²/q next to the kink, decaying like u^-(q+2)) Newton
# steps fall short, most for large q (q = 4 at n = 2e4, p = 500: 8 Newton
# steps instead of 12)
_EXPANSIONS = (2.0, 4.0, 8.0)
# conjugate-gradient iterations per Newton step; a preconditioned step that
# needs more than _STALE of them marks the preconditioner stale (reformed
# next step), as does, without one, a CG that runs out or a step that cuts
# the gradient's max-norm by less than _SLOW
_MAX_CG = 12
_STALE = 5
_LOOSE = 0.5
# a CG direction whose curvature per squared length falls below this times
# the first direction's ends that model's CG (a numerically singular system)
_SINGULAR = 1e-12
_SLOW = 0.5
# a Newton step whose landing point is predicted within tol / _SAFETY gets the
# exact check there (forming the O(n p²) matrix)
_SAFETY = 10.0
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
_BUCKETED_STEPS = 8
_GRAM_ROWS = 4096
_GRAM_DENSE = 0.8


def _gram(X, row_weights):
    """``(Xᵀ diag(d) X, Xᵀ d)`` for ``d >= 0``, on blocks of ``_GRAM_ROWS``
    rows scaled by ``sqrt(d)`` (no copy of all rows), so that numpy forms
    ``ZᵀZ`` with symmetric rank-k updates (BLAS syrk, half the flops of a
    general product) and ``Xᵀ d = Zᵀ sqrt(d)`` from the block in cache.
    When more than ``_GRAM_DENSE`` of the rows have ``d > 0`` the blocks are
    slices of ``X`` (zero rows included: cheaper than gathering the rest),
    else the rows with ``d = 0`` are skipped."""
    keep = np.flatnonzero(row_weights > 0)
    if len(keep) > _GRAM_DENSE * len(X):
        keep = None
        root = np.sqrt(row_weights)
    else:
        root = np.sqrt(row_weights[keep])
    gram = np.zeros((X.shape[1], X.shape[1]))
    weighted_sum = np.zeros(X.shape[1])
    for start in range(0, len(root), _GRAM_ROWS):
        block = slice(start, start + _GRAM_ROWS)
        Z = X[block] if keep is None else X[keep[block]]
        Z = Z * root[block, None]
        gram += Z.T @ Z
        weighted_sum += Z.T @ root[block]
    return gram, weighted_sum


def augmented_gram(X, row_weights, fit_intercept):
    """``Σ_i d_i x̄_i x̄_iᵀ`` with ``x̄_i = (1, x_i)`` (or ``x_i``), without
    materializing the column of ones."""
    row_weights = np.asarray(row_weights, dtype=float)
    if np.all(row_weights >= 0):
        gram_x, weighted_sum = _gram(X, row_weights)
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


def _scores(X, Theta, fit_intercept):
    """``x̄_iᵀ θ_k`` for every row and class model."""
    if not fit_intercept:
        return X @ Theta
    scores = X @ Theta[1:]
    scores += Theta[0]
    return scores


def _augmented_sum(X, R, fit_intercept):
    """``Σ_i x̄_i r_ik``, shape (p1, K)."""
    if not fit_intercept:
        return X.T @ R
    out = np.empty((X.shape[1] + 1, R.shape[1]))
    out[0] = R.sum(axis=0)
    np.matmul(X.T, R, out=out[1:])
    return out


def site_summary(X, Y, weights, Theta, q, fit_intercept, with_curvature, scores=None):
    """Summaries of one site's rows at ``Theta`` (what leaves the site).

    Parameters
    ----------
    X : ndarray of shape (n_site, p)
    Y : ndarray of shape (n_site, K)
        Targets in {-1, +1} of each class model.
    weights : ndarray of shape (n_site,)
    Theta : ndarray of shape (p1, K)
        Row 0 is the intercept when ``fit_intercept``.
    q : float
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
    if scores is None:
        scores = _scores(X, Theta, fit_intercept)
    loss = np.zeros(Y.shape[1])
    residual = np.empty_like(scores)
    for rows in _element_blocks(*Y.shape):
        block_loss, residual[rows] = _loss_and_residual(Y[rows], weights[rows], scores[rows], q)
        loss += block_loss
    grad = _augmented_sum(X, residual, fit_intercept)
    curvature = (_site_curvature(X, Y, weights, scores, q, fit_intercept, with_curvature)
                 if np.any(with_curvature) else None)
    return loss, grad, curvature


def _loss_and_residual(Y, weights, scores, q):
    """``Σ_i w_i V_q(y_ik s_ik)`` and the residuals ``w_i y_ik V_q'(y_ik s_ik)``
    whose sum against ``x̄_i`` is the gradient; ``scores`` may carry a
    leading axis of steps (then the sums have it too)."""
    row_loss, row_derivative = gendwd_loss_and_derivative(Y * scores, q)
    return weights @ row_loss, (weights[:, None] * Y) * row_derivative


def _site_curvature(X, Y, weights, scores, q, fit_intercept, models=True, exact=False):
    """The curvature part of :func:`site_summary`, from the rows' scores, of
    every model (``models=True``) or of those flagged (on ``V_q''`` with
    ``exact``)."""
    models = np.flatnonzero(np.broadcast_to(np.asarray(models, dtype=bool), scores.shape[1:]))
    row_curvature = _row_curvature(Y[:, models], weights, scores[:, models], q,
                                   np.full(len(models), bool(exact)))
    return np.stack([augmented_gram(X, row_curvature[:, j], fit_intercept)
                     for j in range(len(models))])


def _element_blocks(n_rows, width):
    """Slices of ``n_rows`` rows of ``width`` numbers each, about
    ``_BLOCK_ELEMENTS`` numbers a block: elementwise work on a block stays
    in cache (several times faster than on whole columns)."""
    size = max(1, _BLOCK_ELEMENTS // max(width, 1))
    return [slice(start, start + size) for start in range(0, n_rows, size)]


def _row_curvature(Y, weights, scores, q, exact=None):
    """``w_i Ṽ_q''(u_ik)`` per row and model; ``V_q''`` itself for the models
    where ``exact`` (bool of shape (K,)) is True."""
    exact = None if exact is None or not np.any(exact) else np.asarray(exact, dtype=bool)
    out = np.empty_like(scores)
    for rows in _element_blocks(*Y.shape):
        margins = Y[rows] * scores[rows]
        curvature = gendwd_smoothed_curvature(margins, q)
        if exact is not None:
            curvature = np.where(exact, gendwd_curvature(margins, q), curvature)
        out[rows] = weights[rows, None] * curvature
    return out


def _row_blocks(X):
    """Row slices of about ``_BLOCK_BYTES`` of ``X`` (a block stays in cache
    between the two products that read it)."""
    size = max(64, _BLOCK_BYTES // (8 * max(X.shape[1], 1)))
    return [slice(start, start + size) for start in range(0, len(X), size)]


def site_curvature_product(X, Y, weights, Theta, V, q, fit_intercept, exact=None,
                           row_curvature=None):
    """``Σ_i w_i Ṽ_q''(u_ik) x̄_i x̄_iᵀ v_k`` for every class model (what leaves
    the site: one vector of length p1 per model), the curvature at ``Theta``;
    for the models where ``exact`` (bool of shape (K,)) is True, with the
    loss's own second derivative ``V_q''`` (:func:`gendwd_curvature`) in
    place of the smoothed one.

    Computed block of rows by block of rows, so that ``X`` is read from
    memory once (not once for ``X v`` and once for ``Xᵀ(d X v)``)."""
    out = np.zeros(V.shape)
    for rows in _row_blocks(X):
        Xb = X[rows]
        if row_curvature is None:
            curvature = _row_curvature(Y[rows], weights[rows],
                                       _scores(Xb, Theta, fit_intercept), q, exact)
        else:
            curvature = row_curvature[rows]
        out += _augmented_sum(Xb, curvature * _scores(Xb, V, fit_intercept), fit_intercept)
    return out


def site_line_losses(X, Y, weights, Theta, S, steps, q, fit_intercept, scores=None,
                     direction_scores=None):
    """``Σ_i w_i V_q(y_ik x̄_iᵀ(θ_k + t s_k))`` for each step ``t`` in ``steps``
    (what leaves the site: one number per step and model)."""
    if scores is None:
        scores = _scores(X, Theta, fit_intercept)
    if direction_scores is None:
        direction_scores = _scores(X, S, fit_intercept)
    base, slope = Y * scores, Y * direction_scores
    steps = np.asarray(steps, dtype=float)
    if len(steps) > _BUCKETED_STEPS and q <= 16 and not base.any() and np.all(steps > 0):
        return _line_losses_from_zero(slope, weights, steps, q)
    steps = steps[:, None, None]
    out = np.zeros((len(steps), Y.shape[1]))
    # all steps of a block of rows at once (see _element_blocks)
    for rows in _element_blocks(len(Y), out.size):
        out += weights[rows] @ gendwd_loss(base[None, rows] + steps * slope[None, rows], q)
    return out


def _step_summaries(X, Y, weights, scores, S, steps, q, fit_intercept):
    """Loss and gradient sums at ``θ + t S`` for each ``t`` in ``steps`` (see
    :func:`site_summary`), from the scores at ``θ`` (None: ``θ = 0``), and
    the direction's scores ``x̄_iᵀ s_k``: one read of ``X`` (each block of
    rows serves ``X S`` and every ``Xᵀ r`` while in cache). Shapes (T, K),
    (T, p1, K), (n, K)."""
    n_steps, n_models = len(steps), Y.shape[1]
    direction_scores = np.empty((len(X), n_models))
    loss = np.zeros((n_steps, n_models))
    grad = np.zeros((S.shape[0], n_steps * n_models))
    steps = np.asarray(steps, dtype=float)[:, None, None]
    for rows in _row_blocks(X):
        Xb = X[rows]
        direction_scores[rows] = _scores(Xb, S, fit_intercept)
        along = steps * direction_scores[rows]
        block_loss, residual = _loss_and_residual(  # residual: (T, rows, K)
            Y[rows], weights[rows], along if scores is None else scores[rows] + along, q)
        loss += block_loss
        grad += _augmented_sum(Xb, residual.transpose(1, 0, 2).reshape(len(Xb), -1),
                               fit_intercept)
    return loss, grad.reshape(S.shape[0], n_steps, n_models).transpose(1, 0, 2), direction_scores


def _line_losses_from_zero(slope, weights, steps, q):
    """:func:`site_line_losses` from margins all 0 (``θ = 0``), for many
    steps ``t > 0``: the margins are ``t s_i``, so a row is left of the kink
    ``u0`` (``V_q = 1 - u``) up to the step ``u0 / s_i`` and right of it
    (``(u0/u)^q / (q+1)``) beyond. Rows are counted into buckets by the
    first step past their kink (a search among the few steps), and every
    step's loss is a prefix sum over the buckets: one power per row instead
    of one per row and step, and no sort of the rows (for ``q <= 16``, where
    no power overflows)."""
    u0 = q / (q + 1.0)
    order = np.argsort(steps)
    t = steps[order]
    out = np.empty((len(steps), slope.shape[1]))
    for k in range(slope.shape[1]):
        s = slope[:, k]
        # only rows with t s_i > u0 for some step ever reach the tail
        # (and, q <= 16, (u0 / s_i)^q <= (max t)^q stays finite)
        reach = s > u0 / t[-1]
        crossing = np.full(len(s), len(t))
        crossing[reach] = np.searchsorted(t, u0 / s[reach], side="right")
        tail = np.zeros(len(s))
        tail[reach] = weights[reach] * _power(u0 / s[reach], q)
        # step j: rows crossing after it are left of the kink, the rest right
        left_weight = np.cumsum(np.bincount(crossing, weights, len(t) + 1)[::-1])[::-1][1:]
        left_slope = np.cumsum(np.bincount(crossing, weights * s, len(t) + 1)[::-1])[::-1][1:]
        right = np.cumsum(np.bincount(crossing, tail, len(t) + 1))[:-1]
        out[order, k] = left_weight - t * left_slope + _power(1.0 / t, q) * right / (q + 1.0)
    return out


def _site_gram(part, fit_intercept):
    """:func:`augmented_gram` of one site's ``(X, Y, weights)``."""
    X, _, weights = part
    return augmented_gram(X, weights, fit_intercept)


def _site_summary(part, Theta, q, fit_intercept, with_curvature):
    """:func:`site_summary` of one site's ``(X, Y, weights)``."""
    X, Y, weights = part
    return site_summary(X, Y, weights, Theta, q, fit_intercept, with_curvature)


def _site_curvature_product(part, Theta, V, q, fit_intercept, exact=None):
    X, Y, weights = part
    return site_curvature_product(X, Y, weights, Theta, V, q, fit_intercept, exact=exact)


def _site_line_losses(part, Theta, S, steps, q, fit_intercept):
    X, Y, weights = part
    return site_line_losses(X, Y, weights, Theta, S, steps, q, fit_intercept)


class SiteData(DWDSites):
    """The rows of each site of one batch, in this process (a :class:`DWDSites`).

    ``SiteData(X, Y, weights, site_rows, n_jobs, fit_intercept)`` holds rows
    already prepared (targets ``Y``, weights, clipping done; ``prepare``
    only checks ``fit_intercept``); :meth:`from_rows` holds raw rows and
    labels, which ``prepare`` turns into summaries' rows
    (:func:`~skfedpriv.linear_model._dwd_sites.prepare_rows`).

    When joblib would run the sites one after another in this process
    (``n_jobs=None``, no ``parallel_config``), the sum of the sites'
    summaries is computed in one vectorized pass over all rows: the same
    numbers up to floating-point summation order, without a Python call
    per site. In that case the scores ``x̄_iᵀθ`` of the last few parameter
    values asked about are kept (a site would keep its own), so a round at
    parameters already seen, or on the line between two, costs no pass over
    the rows; a line search over the full step (and longer ones) also forms
    the loss and gradient there in its pass, which answer the next summary
    request at the step taken (the request still counts as a round).
    Otherwise each site's summary is a separate joblib task.

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

    def __init__(self, X, Y, weights, site_rows, n_jobs, fit_intercept):
        self._raw = None
        self._setup(X, Y, weights, len(site_rows), lambda: site_rows, n_jobs, fit_intercept)

    @classmethod
    def from_rows(cls, X, y, sample_weight, site_rows, n_jobs=None):
        """Sites holding raw rows: features, labels and row weights, with
        ``site_rows[s]`` the row indices of site ``s``."""
        return cls._from_raw(X, y, sample_weight, len(site_rows), lambda: site_rows, n_jobs)

    @classmethod
    def from_site_codes(cls, X, y, sample_weight, site_codes, n_sites, n_jobs=None):
        """:meth:`from_rows` with the site of each row as a code in
        ``range(n_sites)``; the rows are split by site only if the sites'
        work runs apart (not for the pooled pass in process)."""
        return cls._from_raw(X, y, sample_weight, n_sites,
                             lambda: site_row_indices(site_codes, n_sites), n_jobs)

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

    def _setup(self, X, Y, weights, n_sites, split, n_jobs, fit_intercept):
        """``split()`` returns the row indices of each of the ``n_sites``
        sites (called only when the sites' work runs apart)."""
        if n_sites == 1 or runs_in_process(n_jobs):
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
        self._line = None  # the last line search's steps, losses and gradients
        self._fuse = True  # whether line searches form the gradient at their steps
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
            value = _scores(self.parts[0][0], Theta, self.fit_intercept)
            self._remember(Theta, value)
        return value

    def _cached_scores(self, Theta):
        key = (Theta.shape, Theta.tobytes())
        for cached, value in self._cache:
            if cached == key:
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

    def majorizer(self, q):
        """``(q+1)²/q Σ_i w_i x̄_i x̄_iᵀ``: a global bound of the loss curvature."""
        if self.scattered:
            tasks = [(part, self.fit_intercept) for part in self._handles]
            results = map_sites(_site_gram, tasks, n_jobs=self.n_jobs)
        else:
            tasks = [(X, w, self.fit_intercept) for X, _, w in self.parts]
            results = map_sites(augmented_gram, tasks, n_jobs=self.n_jobs)
        gram = sum(results)
        self._count(gram)
        return gendwd_curvature_bound(q) * gram

    def summaries(self, Theta, q, with_curvature):
        """Sum of the sites' summaries (the server's aggregation); the
        curvature of every model, or of the models flagged in
        ``with_curvature`` (see :func:`site_summary`)."""
        if self._pooled:
            X, Y, w = self.parts[0]
            key = (q, Theta.shape, Theta.tobytes())
            if self._last_summary[0] == key:
                # the loss and gradient here are known (sent just before, or
                # formed with the line search that reached this point)
                loss, grad = self._last_summary[1]
            elif X.size >= _FUSED_SIZE and self._cached_scores(Theta) is None:
                # scores not known here (e.g. the full step of a Newton step):
                # X Theta and the gradient sum in one read of the rows
                losses, grads, scores = _step_summaries(X, Y, w, None, Theta, [1.0], q,
                                                        self.fit_intercept)
                self._remember(Theta, scores)
                loss, grad = losses[0], grads[0]
            else:
                loss, grad, _ = site_summary(X, Y, w, Theta, q, self.fit_intercept, False,
                                             scores=self._scores(Theta))
            curvature = (_site_curvature(X, Y, w, self._scores(Theta), q, self.fit_intercept,
                                         with_curvature)
                         if np.any(with_curvature) else None)
            self._last_summary = (key, (loss, grad))
        else:
            rest = (Theta, q, self.fit_intercept, with_curvature)
            results = self._map(site_summary, _site_summary, rest, rest)
            loss = sum(r[0] for r in results)
            grad = sum(r[1] for r in results)
            curvature = sum(r[2] for r in results) if np.any(with_curvature) else None
        self._count(loss, grad, curvature)
        return loss, grad, curvature

    def curvature_product(self, Theta, V, q, exact=None):
        """``Σ_sites Σ_i w_i Ṽ_q''(u_ik) x̄_i x̄_iᵀ v_k`` at ``Theta``, shape
        (p1, K) (``V_q''`` for the models in ``exact``)."""
        if self._pooled:
            X, Y, w = self.parts[0]
            key = (q, Theta.tobytes(),
                   None if exact is None else np.asarray(exact, dtype=bool).tobytes())
            if self._curvature_key != key:
                self._row_curvature = _row_curvature(Y, w, self._scores(Theta), q, exact)
                self._curvature_key = key
            out = site_curvature_product(X, Y, w, Theta, V, q, self.fit_intercept,
                                         row_curvature=self._row_curvature)
        else:
            rest = (Theta, V, q, self.fit_intercept, exact)
            out = sum(self._map(site_curvature_product, _site_curvature_product, rest, rest))
        self._count(out)
        return out

    def line_losses(self, Theta, S, steps, q):
        """Summed losses at ``Theta + t S`` for each ``t`` in ``steps``, shape
        (len(steps), K)."""
        steps = [float(t) for t in steps]
        if (self._pooled and self._fuse and len(steps) <= _FUSED_STEPS
                and self.parts[0][0].size >= _FUSED_SIZE):
            # a few steps (Newton's full step, or it and longer ones): the
            # gradient at each is formed in the same pass over the rows, and
            # the one at the step taken answers the next request (advance)
            X, Y, w = self.parts[0]
            out, grads, direction_scores = _step_summaries(
                X, Y, w, self._scores(Theta), S, steps, q, self.fit_intercept)
            self._remember(S, direction_scores)
            self._line = (q, S, np.array(steps), out, grads)
        elif self._pooled:
            X, Y, w = self.parts[0]
            out = site_line_losses(X, Y, w, Theta, S, steps, q, self.fit_intercept,
                                   scores=self._scores(Theta),
                                   direction_scores=self._scores(S))
        else:
            rest = (Theta, S, steps, q, self.fit_intercept)
            out = sum(self._map(site_line_losses, _site_line_losses, rest, rest))
        self._count(out)
        return out

    def noised_summary(self, kind, Theta, q, std, random_state):
        """Sum over sites of each site's summary ``kind`` plus its own noise.

        ``kind``: 'gradient' (at ``Theta``), 'curvature' (at ``Theta``) or
        'gram' (the augmented Gram matrix). Each of the ``n_sites`` sites adds
        independent noise of std ``std``
        (:func:`~skfedpriv.privacy._objective_perturbation.site_noise`),
        drawn here from ``random_state``.
        """
        if kind == "gram":
            value = sum(augmented_gram(X, w, self.fit_intercept) for X, _, w in self.parts)
            self._count(value)
        else:
            _, grad, curvature = self.summaries(Theta, q, kind == "curvature")
            value = grad if kind == "gradient" else curvature
        p1, n_models = Theta.shape
        return value + sum(site_noise(kind, std, p1, n_models, random_state)
                           for _ in range(self.n_sites))

    offers_inference = True

    def inference_summary(self, Theta, derivative, curvature):
        """Summed inference summaries of the sites at ``Theta`` (see
        :class:`DWDSites`)."""
        from ._inference_sites import sum_site_inference
        parts = self._handles if self.scattered else self.parts
        out = sum_site_inference(parts, Theta, self.fit_intercept, derivative, curvature,
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
        if line is None or line[1] is not S:
            return
        q, _, trial, losses, grads = line
        steps = np.broadcast_to(steps, (S.shape[1],))
        match = trial[:, None] == steps[None, :]
        pick = np.argmax(match, axis=0)  # 0 for a model not moved along a zero direction
        if not np.all(match.any(axis=0) | ((steps == 0) & ~S.any(axis=0))):
            return
        models = np.arange(S.shape[1])
        self._last_summary = ((q, new.shape, new.tobytes()),
                              (losses[pick, models], grads[pick, :, models].T))


class _SummaryOnlySites:
    """The requests :func:`solve_batch` makes, for a sites object that only
    answers ``summaries`` (e.g. a transport speaking an older protocol):
    line losses one summary round per step, curvature products from the
    full curvature matrix (the same numbers, more rounds or bytes)."""

    batched_line_search = False
    # its products come from the smoothed matrix: the local phase's CG runs
    # on the smoothed curvature (the same optimum, another path)
    exact_products = False
    per_model_curvature = False  # an older transport: its curvature is every model's

    def __init__(self, sites):
        self._sites = sites
        self.weight_sum = sites.weight_sum

    def __getattr__(self, name):
        return getattr(self._sites, name)

    @property
    def rounds(self):
        return getattr(self._sites, "n_requests", 0)

    floats_sent = 0

    def line_losses(self, Theta, S, steps, q):
        return np.array([self._sites.summaries(Theta + t * S, q, False)[0] for t in steps])

    def curvature_product(self, Theta, V, q, exact=None):
        if exact is not None and np.any(exact):
            raise ValueError("these sites answer only summaries: no exact products.")
        curvature = self._sites.summaries(Theta, q, True)[2]
        return np.einsum("kij,jk->ik", curvature, V)

    def advance(self, Theta, S, steps):
        return Theta + steps * S


def _factor_psd(matrix):
    """Cholesky factor of a symmetric PSD matrix, with a little jitter if
    needed: ``(c, lower)`` as ``scipy.linalg.cho_factor`` returns it (LAPACK
    potrf directly, without its input checks)."""
    scale = max(np.trace(matrix) / matrix.shape[0], 1e-12)
    for jitter in (0.0, 1e-12, 1e-9, 1e-6, 1e-3):
        shifted = matrix + jitter * scale * np.eye(matrix.shape[0]) if jitter else matrix
        factor, info = dpotrf(shifted, lower=0, clean=0)
        if info == 0:
            return factor, False
        if info < 0:  # pragma: no cover - a bad argument, not bad data
            raise LinAlgError(f"potrf failed with info={info}")
    raise LinAlgError("curvature matrix is not positive definite")  # pragma: no cover


def _cho_solve(factor, rhs):
    """``scipy.linalg.cho_solve`` for one vector, without its input checks
    (LAPACK potrs on the factor of :func:`_factor_psd`)."""
    solution, info = dpotrs(factor[0], rhs, lower=factor[1])
    if info != 0:  # pragma: no cover - a bad argument, not bad data
        raise LinAlgError(f"potrs failed with info={info}")
    return solution


def _solve_factored(factors, rhs):
    out = np.empty_like(rhs)
    for k, factor in enumerate(factors):
        out[:, k] = _cho_solve(factor, rhs[:, k])
    return out


def _solve_psd(matrices, rhs):
    """Solve ``matrices[k] x_k = rhs[:, k]`` for SPD matrices, with jitter."""
    return _solve_factored([_factor_psd(matrices[k]) for k in range(rhs.shape[1])], rhs)


def _precondition(factors, r):
    """``M_k^{-1} r_k`` for every model, ``M_k`` given by its Cholesky factor
    (the identity where the factor is None)."""
    out = r.copy()
    for k, factor in enumerate(factors):
        if factor is not None:
            out[:, k] = _cho_solve(factor, r[:, k])
    return out


def _decrement(grad, newton):
    """Half the Newton decrement, ``½ gᵀH⁻¹g`` per model, from the Newton
    direction ``-H⁻¹g``: the gap ``F(θ) - min F`` of the quadratic model,
    the estimate the stopping rule compares with ``tol |F(θ)|``."""
    return -0.5 * (grad * newton).sum(axis=0)


def _conjugate_gradient(product, rhs, factors, rtol, max_iter):
    """Preconditioned CG for ``H_k x_k = rhs_k``, all models at once.

    ``product(V)`` returns ``H_k v_k`` column by column; ``factors[k]`` is the
    Cholesky factor of model k's preconditioner (None: none). Stops a model
    once its residual is ``<= rtol_k ‖rhs_k‖``, or, keeping its last iterate,
    on a search direction of non-positive curvature or of curvature (per
    squared length) below ``_SINGULAR`` times that of its first direction
    (a numerically singular system: e.g. no row with curvature along the
    intercept, whose step would be astronomically long); each model's
    iterates are those of its own CG. Returns the solution and the
    iterations each model used.
    """
    x = np.zeros_like(rhs)
    r = rhs.copy()
    z = _precondition(factors, r)
    direction = z.copy()
    rz = (r * z).sum(axis=0)
    target = rtol * np.linalg.norm(rhs, axis=0)
    done = np.linalg.norm(r, axis=0) <= target
    used = np.zeros(rhs.shape[1], dtype=int)
    first_rayleigh = None
    while not done.all() and used.max() < max_iter:
        used += ~done
        Hd = product(direction)
        curvature = (direction * Hd).sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            rayleigh = curvature / (direction * direction).sum(axis=0)
        if first_rayleigh is None:
            first_rayleigh = rayleigh
        done |= (curvature <= 0) | (rayleigh <= _SINGULAR * first_rayleigh)
        with np.errstate(over="ignore", invalid="ignore"):
            step = np.where(done, 0.0, rz / np.where(done, 1.0, curvature))
            x_next, r_next = x + step * direction, r - step * Hd
        # a curvature that underflows towards 0 (an ill-conditioned, unpreconditioned
        # system) gives a step that overflows: that model stops at its last iterate
        blown = ~(np.isfinite(x_next).all(axis=0) & np.isfinite(r_next).all(axis=0))
        done |= blown
        x = np.where(blown, x, x_next)
        r = np.where(blown, r, r_next)
        done |= np.linalg.norm(r, axis=0) <= target
        z = _precondition(factors, r)
        rz_new = (r * z).sum(axis=0)
        beta = np.where(done, 0.0, rz_new / np.where(rz == 0, 1.0, rz))
        direction = z + beta * direction
        rz = rz_new
    return x, used


def solve_batch(
    sites,
    Theta,
    *,
    q,
    alpha,
    fit_intercept,
    prior=None,
    center=None,
    max_iter=100,
    tol=1e-6,
    scale=None,
    refresh_curvature=True,
    warn=True,
    frozen=None,
):
    """Minimize the renewable genDWD objective of one batch (see module doc).

    Parameters
    ----------
    sites : SiteData
    Theta : ndarray of shape (p1, K)
        Starting point (the previous estimate online).
    q, alpha : float
    fit_intercept : bool
    prior : ndarray of shape (K, p1, p1) or None
        Accumulated curvature ``Σ_{j<b} J_j`` of earlier batches.
    center : ndarray of shape (p1, K) or None
        The previous estimate the prior is centred on.
    max_iter : int
    tol : float
        Stop a class model at ``θ`` once ``½ gᵀH⁻¹g <= tol |F(θ)| scale / W``:
        half the Newton decrement (the gap ``F(θ) - min F`` of the quadratic
        model), relative to the objective scaled from the batch's weight
        ``W`` to ``scale`` (online: the stream's, whose objective the
        renewable one stands for). ``H`` is the system the step solves;
        offline the test is made only with the curvature matrix formed at
        ``θ`` (the one returned), never with a CG estimate.
    scale : float or None
        Total weight the objective stands for (default: this batch's); scales
        the stopping test, the gradient for the first step and the CG
        tolerances.
    refresh_curvature : bool
        Newton-type steps on the curvature at the current iterate (offline);
        otherwise keep the curvature at the starting point, as eq. 35 does.
    warn : bool
        Emit a ConvergenceWarning when ``max_iter`` is reached.
    frozen : ndarray of bool of shape (K,) or None
        Class models to leave where they are (their curvature is still
        returned).

    Returns
    -------
    Theta : ndarray of shape (p1, K)
    curvature : ndarray of shape (K, p1, p1)
        Data curvature plus ridge at the *starting* point when
        ``refresh_curvature`` is False, at the returned point otherwise.
    info : dict
        ``n_iter``, ``objective`` (the history of ``F_k``, one row per
        accepted iterate), ``rounds`` (requests to the sites) and
        ``floats_sent`` (numbers one site sent back).
    """
    p1, n_models = Theta.shape
    if not hasattr(sites, "line_losses"):
        sites = _SummaryOnlySites(sites)
    exact_products = getattr(sites, "exact_products", True)
    ridge = alpha * sites.weight_sum * penalty_mask(p1, fit_intercept)
    ridge_matrix = np.diag(ridge)[None]
    if scale is None:
        scale = sites.weight_sum
    scale = max(scale, np.finfo(float).tiny)
    rounds_before, floats_before = sites.rounds, sites.floats_sent

    def penalty(T, values, pulled=None):
        """Objective from the loss sums; ``pulled`` is ``P_k (θ_k - c_k)`` if known."""
        value = values + 0.5 * (ridge @ (T * T))
        if prior is not None:
            diff = T - center
            if pulled is None:
                pulled = np.einsum("kij,jk->ik", prior, diff)
            value = value + 0.5 * (diff * pulled).sum(axis=0)
        return value

    def objective_and_gradient(T, with_curvature):
        loss, grad, curvature = sites.summaries(T, q, with_curvature)
        grad = grad + ridge[:, None] * T
        pulled = None
        if prior is not None:
            pulled = np.einsum("kij,jk->ik", prior, T - center)
            grad = grad + pulled
        if curvature is not None:
            curvature = curvature + ridge_matrix
        return penalty(T, loss, pulled), grad, curvature

    # the objective the gap is relative to: the batch's, scaled up to the
    # weight ``scale`` it stands for (online: the stream's so far)
    stream_weight = scale / max(sites.weight_sum, np.finfo(float).tiny)

    def system(curvature):
        return curvature if prior is None else curvature + prior

    def line_search(direction, searching, value, grad, max_halvings, expand=None,
                    full_step_known_bad=False):
        """Armijo backtracking for the classes in ``searching``: the full step
        first, then all halvings in one round. Models in ``expand`` also try
        the longer steps ``_EXPANSIONS`` in the first round and take the best
        value among the steps there that pass the test. With
        ``full_step_known_bad`` the full step is skipped (it failed already)."""
        slope = (grad * direction).sum(axis=0)
        searching_at_start = searching.copy()
        searching = searching & (slope < 0)
        steps = np.zeros(n_models)
        if not searching.any():
            full_step[searching_at_start] = False
            return Theta, value.copy(), np.zeros(n_models, dtype=bool)
        accepted = np.zeros(n_models, dtype=bool)
        new_value = value.copy()
        halvings = _HALVINGS[:max_halvings]
        expand = np.zeros(n_models, dtype=bool) if expand is None else expand & searching
        first = [1.0] + (list(_EXPANSIONS) if expand.any() else [])
        trials = (first, halvings) if getattr(sites, "batched_line_search", True) else (
            [first] + [[t] for t in halvings])
        if full_step_known_bad:
            trials = trials[1:]
        searched = []  # the direction each round asked the sites about
        for trial in trials:
            if not searching.any():
                break
            masked = np.where(searching, 1.0, 0.0) * direction
            searched.append(masked)
            losses = sites.line_losses(Theta, masked, trial, q)
            passed = np.zeros(n_models, dtype=bool)
            for t, loss in zip(trial, losses):
                trial_value = penalty(Theta + t * masked, loss)
                ok = searching & (trial_value <= value + _ARMIJO_SLOPE * t * slope)
                if t > 1.0:
                    ok &= expand & (trial_value < new_value)
                else:
                    ok &= ~passed
                steps[ok], new_value[ok] = t, trial_value[ok]
                passed |= ok
            accepted |= passed
            searching &= ~passed
        # after one round, along the direction as searched (the same point:
        # unsearched models take no step), so sites can reuse what it formed
        new = sites.advance(Theta, searched[0] if len(searched) == 1 else direction, steps)
        full_step[searching_at_start] = steps[searching_at_start] == 1.0
        return new, new_value, accepted

    def full_step_first(direction, searching, value, grad):
        """Newton's full step asked as one summary request (the loss *and*
        gradient there, which the next step needs), Armijo-tested by the
        server; models whose full step fails backtrack (:func:`line_search`).
        Returns ``line_search``'s triple and the gradient at the new point
        (None when some model backtracked)."""
        slope = (grad * direction).sum(axis=0)
        trying = searching & (slope < 0)
        if not trying.any():  # no descent direction: no request
            return line_search(direction, searching, value, grad, _NEWTON_HALVINGS) + (None,)
        trial = Theta + np.where(trying, 1.0, 0.0) * direction
        trial_value, trial_grad, _ = objective_and_gradient(trial, False)
        passed = trying & (trial_value <= value + _ARMIJO_SLOPE * slope)
        if np.array_equal(passed, searching):
            return trial, np.where(passed, trial_value, value), passed, trial_grad
        new, new_value, moved = line_search(direction, searching & ~passed, value, grad,
                                            _NEWTON_HALVINGS, full_step_known_bad=True)
        return (np.where(passed, trial, new), np.where(passed, trial_value, new_value),
                passed | moved, None)

    def first_step_grid(direction, searching, value):
        """From parameters where the curvature vanishes (all margins 0 at
        ``Theta = 0``): the best of a geometric grid of steps along
        ``direction``, in one round."""
        steps_grid = 2.0 ** np.arange(-24, 25, 2)
        losses = sites.line_losses(Theta, np.where(searching, 1.0, 0.0) * direction,
                                   steps_grid, q)
        values = np.array([penalty(Theta + t * direction, loss)
                           for t, loss in zip(steps_grid, losses)])
        best = np.argmin(values, axis=0)
        steps = np.where(searching & (values[best, np.arange(n_models)] < value),
                         steps_grid[best], 0.0)
        return sites.advance(Theta, direction, steps), np.where(
            steps > 0, values[best, np.arange(n_models)], value), steps > 0

    majorizer = None

    def majorizer_factors():
        if majorizer is not None:
            return majorizer
        return [_factor_psd(m) for m in np.broadcast_to(
            sites.majorizer(q)[None] + ridge_matrix, (n_models, p1, p1))
            + (0.0 if prior is None else prior)]

    value, grad, curvature = objective_and_gradient(Theta, not refresh_curvature)
    history = [value.copy()]
    active = np.ones(n_models, dtype=bool) if frozen is None else ~np.asarray(frozen)
    factors = None  # Cholesky factors of the Newton system (online)
    if not refresh_curvature:
        start_curvature = curvature
    # Offline, per model: the last curvature matrix formed (plus ridge) and
    # the parameters it was formed at; a request asks only for the models
    # whose matrix is needed and not known at their current parameters
    matrices = [None] * n_models
    matrices_at = [None] * n_models
    per_model = getattr(sites, "per_model_curvature", True)

    def curvature_matrices(models):
        models = models & ~np.array([at is not None and np.array_equal(at, Theta[:, k])
                                     for k, at in enumerate(matrices_at)])
        if models.any():
            formed = objective_and_gradient(Theta, models if per_model else True)[2]
            for j, k in enumerate(np.flatnonzero(models)):
                matrices[k] = formed[j if per_model else k]
                matrices_at[k] = Theta[:, k].copy()
        return matrices
    # Offline, per model: the Cholesky factor of the CG preconditioner, the
    # curvature matrix of an earlier iterate (None: CG unpreconditioned).
    # The O(n p²) matrix is formed only for a model marked stale, which then
    # takes one direct Newton step: its CG went stale, or its last full
    # Newton step predicted a gap close to tol (the matrix is then likely the
    # one at the returned point, which the renewable state needs anyway).
    preconditioner = [None] * n_models
    stale = np.zeros(n_models, dtype=bool)
    # whether each model's last Newton step was taken in full (the local
    # phase, where solving the Newton system accurately pays); damped steps
    # get loose CG
    full_step = np.zeros(n_models, dtype=bool)
    expected = np.full(n_models, np.inf)  # the predicted gap / |F| here (inf: none)
    last_relative = np.zeros(n_models)  # the last full step's decrement / |F| (0: none)
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        if not active.any():
            n_iter -= 1
            break
        # offline the first step is a grid search along the gradient (at
        # Theta = 0 every margin is 0, where the curvature vanishes)
        grid = refresh_curvature and n_iter == 1
        # models that take no step this round: their estimated gap is checked
        # against the matrix at this very point next round
        recheck = np.zeros(n_models, dtype=bool)
        grad_new = None  # the gradient at the new point, when a step formed it
        if grid:
            Theta_new, value_new, moved = first_step_grid(-grad / scale, active, value)
        else:
            if refresh_curvature:
                newton = np.zeros_like(grad)
                direct = stale & active
                if direct.any():
                    curvature_matrices(direct)
                    for k in np.flatnonzero(direct):
                        preconditioner[k] = _factor_psd(
                            matrices[k] if prior is None else matrices[k] + prior[k])
                        newton[:, k] = -_cho_solve(preconditioner[k], grad[:, k])
                iterative = active & ~direct
                stale[:] = False
                if iterative.any():
                    # inexact Newton: CG on the curvature at Theta through the
                    # sites' curvature-vector products
                    # in the local phase, on V_q'' itself (see module doc)
                    exact = (full_step & iterative) if exact_products else None

                    def product(V, _T=Theta, _exact=exact):
                        out = sites.curvature_product(_T, V, q, _exact) + ridge[:, None] * V
                        if prior is not None:
                            out = out + np.einsum("kij,jk->ik", prior, V)
                        return out

                    # forcing terms: loose after a damped step; in the local
                    # phase tight enough for fast convergence, but no tighter
                    # than a step needs to land within tol / _SAFETY (an
                    # inexact step leaves about rtol² of the gap)
                    gnorm = np.max(np.abs(grad), axis=0) / scale
                    with np.errstate(divide="ignore"):
                        enough = np.sqrt(tol / (_SAFETY * expected))
                    rtol = np.where(full_step, np.minimum(0.1, np.maximum(np.sqrt(gnorm), enough)),
                                    _LOOSE)
                    solution, used = _conjugate_gradient(
                        product, -np.where(iterative, 1.0, 0.0) * grad, preconditioner,
                        rtol, _MAX_CG)
                    newton[:, iterative] = solution[:, iterative]
                    # without a preconditioner only a CG that ran out is stale
                    limit = np.array([_MAX_CG - 1 if f is None else _STALE
                                      for f in preconditioner])
                    stale = iterative & (used > limit)
            else:
                if factors is None:
                    factors = [_factor_psd(m) for m in system(curvature)]
                newton = -_solve_factored(factors, grad)
            predicted = _decrement(grad, newton)
            within = predicted <= tol * stream_weight * np.abs(value)
            if refresh_curvature:
                # only the matrix formed here stops a model; CG's decrement is a
                # lower bound of the exact one: a model it puts within tol is
                # checked exactly (the matrix formed here) before it stops
                converged = direct & within
                recheck = iterative & within
                stale |= recheck
            else:
                converged = active & within
            active &= ~converged
            if not active.any():
                n_iter -= 1
                break
            searching = active & ~recheck
            if refresh_curvature and not np.all(full_step[searching]):
                # the damped phase: the full step and longer ones in one round
                Theta_new, value_new, moved = line_search(
                    newton, searching, value, grad, _NEWTON_HALVINGS, expand=~full_step)
            else:
                # online, and offline once the last steps were full (Newton's
                # local phase): the full step's loss and gradient in one round
                Theta_new, value_new, moved, grad_new = full_step_first(
                    newton, searching, value, grad)
            fallback = searching & ~moved
            if fallback.any():
                grad_new = None
                # the Newton model was poor (e.g. no row near the kink): take the
                # majorization step, V'' <= (q+1)^2/q makes it a guaranteed descent
                majorizer = majorizer_factors()
                Theta = Theta_new
                mm = -_solve_factored(majorizer, grad)
                Theta_new, value_mm, moved_mm = line_search(
                    mm, fallback, value, grad, _MAX_HALVINGS
                )
                value_new[fallback] = value_mm[fallback]
                moved |= moved_mm
                stale |= fallback
            if refresh_curvature:
                # the gap where this step lands, extrapolating the last two full
                # steps' rate (rel_{k+1} ≈ rel_k² / rel_{k-1}; the smoothed
                # curvature makes the last steps converge linearly, so this is
                # more cautious than Newton's quadratic rate): a step predicted
                # to land well within tol is checked there exactly, with the
                # matrix the renewable state needs at the returned point anyway
                relative = predicted / np.abs(value)
                with np.errstate(divide="ignore", invalid="ignore"):
                    landing = np.where(last_relative > 0, relative**2 / last_relative, np.inf)
                stale |= moved & full_step & (_SAFETY * landing <= tol)
                expected = np.where(moved & full_step, landing, np.inf)
                last_relative = np.where(moved & full_step, relative, 0.0)
        # a class that cannot descend any more is at machine precision: freeze it
        # (a grid start that found nothing better leaves the class to Newton)
        decrease = value - value_new
        if not grid:
            active &= recheck | (moved & (decrease > 4 * np.finfo(float).eps * np.abs(value)))
        if not moved.any():  # only exact checks pending: nothing changed
            continue
        Theta = Theta_new
        previous = grad
        grad = objective_and_gradient(Theta, False)[1] if grad_new is None else grad_new
        if refresh_curvature and not grid:
            # unpreconditioned CG whose Newton steps converge slowly (an
            # ill-conditioned curvature): form the matrix for that model
            slow = np.max(np.abs(grad), axis=0) > _SLOW * np.max(np.abs(previous), axis=0)
            stale |= moved & slow & np.array([f is None for f in preconditioner])
        value = value_new
        history.append(value.copy())
    else:
        if warn and active.any():
            warnings.warn(
                f"DWD solver did not converge in max_iter={max_iter} "
                "iterations; increase max_iter or tol.",
                ConvergenceWarning,
            )
    if refresh_curvature:
        final_curvature = np.stack(curvature_matrices(np.ones(n_models, dtype=bool)))
    else:
        final_curvature = start_curvature
    info = {"n_iter": n_iter, "objective": np.array(history),
            "rounds": sites.rounds - rounds_before,
            "floats_sent": sites.floats_sent - floats_before}
    return Theta, final_curvature, info


def published_step(sites, Theta, *, q, alpha, fit_intercept, prior):
    """One update of Algorithm 1 (eq. 37) from the previous estimate ``Theta``.

    ``θ_b = θ_{b-1} - [Σ_{j<=b} H̄_j]^{-1} ∇L_b(θ_{b-1})`` with ``H̄_b`` of
    eq. 38 at ``θ_{b-1}``: smoothed curvature plus ``n_b λ I`` (a ridge on
    the intercept too, as published).

    Returns the new ``Theta`` and ``H̄_b`` (to be added to the prior).
    """
    p1 = Theta.shape[0]
    _, grad, curvature = sites.summaries(Theta, q, True)
    ridge = alpha * sites.weight_sum
    grad = grad + ridge * penalty_mask(p1, fit_intercept)[:, None] * Theta
    h_bar = curvature + ridge * np.eye(p1)[None]
    system = h_bar if prior is None else h_bar + prior
    return Theta - _solve_psd(system, grad), h_bar
