"""Federated genDWD solvers: site summaries and the server-side updates.

Sites send only summaries of their rows at the current parameters ``Theta``
(the loss sum, the gradient sum and, when asked, the smoothed curvature
sum; paper eqs. 7-12). The server adds the ridge term and, online, the
accumulated curvature of earlier batches (eqs. 30-37), and updates.

Parameters of all one-vs-rest models are held together as ``Theta`` of shape
``(p1, K)`` with row 0 the intercept when there is one (``p1 = p + 1``);
curvatures as ``(K, p1, p1)``.

Two server updates:

* :func:`solve_batch` minimizes, for every class model k,

  ``F_k(θ) = Σ_i w_i V_q(y_ik x̄_iᵀθ) + (α W / 2) ‖β‖² + ½ (θ - c_k)ᵀ P_k (θ - c_k)``

  with ``W`` the batch weight sum, ``P_k`` the curvature accumulated over
  earlier batches and ``c_k`` the previous estimate: the renewable
  estimating equation (30), and, with ``P = 0``, the offline objective (5)
  times ``W``. Each step solves a Newton system with the smoothed curvature
  (eq. 8) and is accepted by an Armijo backtracking test, so ``F_k`` never
  increases (the paper's update (16) with ``H̄`` is not a majorizer and
  need not descend).
* :func:`published_step` is the single update (37) of Algorithm 1, as
  published, with ``H̄`` of eq. 38 (ridge ``n_b λ I`` on every coordinate).
"""

import warnings

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from sklearn.exceptions import ConvergenceWarning

from .._losses import (
    gendwd_curvature_bound,
    gendwd_loss_and_derivative,
    gendwd_smoothed_curvature,
)
from .._sites import dask_client, map_sites, runs_in_process, scatter_sites

_ARMIJO_SLOPE = 1e-4
_MAX_HALVINGS = 50
_NEWTON_HALVINGS = 6


def augmented_gram(X, row_weights, fit_intercept):
    """``Σ_i d_i x̄_i x̄_iᵀ`` with ``x̄_i = (1, x_i)`` (or ``x_i``), without
    materializing the column of ones."""
    gram_x = X.T @ (row_weights[:, None] * X)
    if not fit_intercept:
        return gram_x
    p1 = X.shape[1] + 1
    gram = np.empty((p1, p1))
    gram[0, 0] = row_weights.sum()
    gram[0, 1:] = gram[1:, 0] = row_weights @ X
    gram[1:, 1:] = gram_x
    return gram


def site_summary(X, Y, weights, Theta, q, fit_intercept, with_curvature):
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
    fit_intercept, with_curvature : bool

    Returns
    -------
    loss : ndarray of shape (K,)
        ``Σ_i w_i V_q(u_ik)``.
    grad : ndarray of shape (p1, K)
        ``Σ_i w_i y_ik V_q'(u_ik) x̄_i`` (eq. 7, without the ridge term).
    curvature : ndarray of shape (K, p1, p1) or None
        ``Σ_i w_i Ṽ_q''(u_ik) x̄_i x̄_iᵀ`` (eq. 12, without the ridge term).
    """
    coef = Theta[1:] if fit_intercept else Theta
    scores = X @ coef
    if fit_intercept:
        scores += Theta[0]
    margins = Y * scores
    row_loss, row_derivative = gendwd_loss_and_derivative(margins, q)
    loss = weights @ row_loss
    residual = weights[:, None] * Y * row_derivative
    grad_x = X.T @ residual
    grad = np.vstack([residual.sum(axis=0), grad_x]) if fit_intercept else grad_x
    curvature = None
    if with_curvature:
        row_curvature = weights[:, None] * gendwd_smoothed_curvature(margins, q)
        curvature = np.stack([
            augmented_gram(X, row_curvature[:, k], fit_intercept)
            for k in range(Theta.shape[1])
        ])
    return loss, grad, curvature


def _site_gram(part, fit_intercept):
    """:func:`augmented_gram` of one site's ``(X, Y, weights)``."""
    X, _, weights = part
    return augmented_gram(X, weights, fit_intercept)


def _site_summary(part, Theta, q, fit_intercept, with_curvature):
    """:func:`site_summary` of one site's ``(X, Y, weights)``."""
    X, Y, weights = part
    return site_summary(X, Y, weights, Theta, q, fit_intercept, with_curvature)


class SiteData:
    """The rows of each site of one batch, as the per-site work needs them.

    When joblib would run the sites one after another in this process
    (``n_jobs=None``, no ``parallel_config``), the sum of the sites'
    summaries is computed in one vectorized pass over all rows: the same
    numbers up to floating-point summation order, without a Python call
    per site. Otherwise each site's summary is a separate joblib task.

    Under joblib's Dask backend (and outside a Dask task) each site's rows
    are scattered to the cluster once, when the batch's ``SiteData`` is
    built; every round's per-site task then refers to the site's future and
    carries only the parameters. The data is released from the cluster when
    this object is garbage collected. ``parts`` keeps the client's copy of
    the rows (the site-local noise path computes the first batch's Gram
    matrix from it, in this process).
    """

    def __init__(self, X, Y, weights, site_rows, n_jobs, fit_intercept):
        if len(site_rows) == 1 or runs_in_process(n_jobs):
            self.parts = [(X, Y, weights)]
        else:
            self.parts = [(X[rows], Y[rows], weights[rows]) for rows in site_rows]
        self.weight_sum = float(weights.sum())
        self.n_jobs = n_jobs
        self.fit_intercept = fit_intercept
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

    def majorizer(self, q):
        """``(q+1)²/q Σ_i w_i x̄_i x̄_iᵀ``: a global bound of the loss curvature."""
        if self.scattered:
            tasks = [(part, self.fit_intercept) for part in self._handles]
            results = map_sites(_site_gram, tasks, n_jobs=self.n_jobs)
        else:
            tasks = [(X, w, self.fit_intercept) for X, _, w in self.parts]
            results = map_sites(augmented_gram, tasks, n_jobs=self.n_jobs)
        return gendwd_curvature_bound(q) * sum(results)

    def summaries(self, Theta, q, with_curvature):
        """Sum of the sites' summaries (the server's aggregation)."""
        rest = (Theta, q, self.fit_intercept, with_curvature)
        if self.scattered:
            tasks = [(part,) + rest for part in self._handles]
            results = map_sites(_site_summary, tasks, n_jobs=self.n_jobs)
        else:
            tasks = [part + rest for part in self.parts]
            results = map_sites(site_summary, tasks, n_jobs=self.n_jobs)
        loss = sum(r[0] for r in results)
        grad = sum(r[1] for r in results)
        curvature = sum(r[2] for r in results) if with_curvature else None
        return loss, grad, curvature


def _ridge_mask(p1, fit_intercept):
    mask = np.ones(p1)
    if fit_intercept:
        mask[0] = 0.0
    return mask


def _solve_psd(matrices, rhs):
    """Solve ``matrices[k] x_k = rhs[:, k]`` for SPD matrices, with jitter."""
    out = np.empty_like(rhs)
    for k in range(rhs.shape[1]):
        matrix = matrices[k]
        scale = max(np.trace(matrix) / matrix.shape[0], 1e-12)
        for jitter in (1e-12, 1e-9, 1e-6, 1e-3):
            try:
                factor = cho_factor(matrix + jitter * scale * np.eye(matrix.shape[0]))
                break
            except LinAlgError:
                continue
        else:  # pragma: no cover - a PSD matrix plus 1e-3 scale is PD
            raise LinAlgError("curvature matrix is not positive definite")
        out[:, k] = cho_solve(factor, rhs[:, k])
    return out


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
        Stop when every class's gradient, divided by ``scale``, has
        max-norm ``<= tol``.
    scale : float or None
        Total weight the objective sums over (default: this batch's).
    refresh_curvature : bool
        Recompute the curvature every iteration (offline); otherwise keep
        the curvature at the starting point, as eq. 35 does.
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
        ``n_iter`` and ``objective`` (the history of ``F_k``, one row per
        accepted iterate).
    """
    p1, n_models = Theta.shape
    ridge = alpha * sites.weight_sum * _ridge_mask(p1, fit_intercept)
    if scale is None:
        scale = sites.weight_sum
    scale = max(scale, np.finfo(float).tiny)

    def objective_and_gradient(T, with_curvature):
        loss, grad, curvature = sites.summaries(T, q, with_curvature)
        value = loss + 0.5 * np.sum(ridge[:, None] * T * T, axis=0)
        grad = grad + ridge[:, None] * T
        if prior is not None:
            diff = T - center
            prior_diff = np.einsum("kij,jk->ik", prior, diff)
            value = value + 0.5 * np.sum(diff * prior_diff, axis=0)
            grad = grad + prior_diff
        if curvature is not None:
            curvature = curvature + np.diag(ridge)[None]
        return value, grad, curvature

    majorizer = None

    def line_search(direction, searching, value, grad, max_halvings):
        """Armijo backtracking for the classes in ``searching``."""
        slope = np.sum(grad * direction, axis=0)
        searching = searching & (slope < 0)
        step = np.ones(n_models)
        accepted_any = np.zeros(n_models, dtype=bool)
        new_value, new_grad, candidate = value.copy(), grad.copy(), Theta.copy()
        for _ in range(max_halvings):
            if not searching.any():
                break
            candidate[:, searching] = (
                Theta[:, searching] + step[searching] * direction[:, searching]
            )
            trial_value, trial_grad, _ = objective_and_gradient(candidate, False)
            accepted = searching & (trial_value <= value + _ARMIJO_SLOPE * step * slope)
            new_value[accepted] = trial_value[accepted]
            new_grad[:, accepted] = trial_grad[:, accepted]
            accepted_any |= accepted
            searching &= ~accepted
            step[searching] *= 0.5
        candidate[:, ~accepted_any] = Theta[:, ~accepted_any]
        return candidate, new_value, new_grad, accepted_any

    value, grad, curvature = objective_and_gradient(Theta, True)
    start_curvature = curvature
    history = [value.copy()]
    active = np.ones(n_models, dtype=bool) if frozen is None else ~np.asarray(frozen)
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        active &= np.max(np.abs(grad), axis=0) > tol * scale
        if not active.any():
            n_iter -= 1
            break
        system = curvature if prior is None else curvature + prior
        newton = -_solve_psd(system, grad)
        Theta_new, value_new, grad_new, moved = line_search(
            newton, active, value, grad, _NEWTON_HALVINGS
        )
        fallback = active & ~moved
        if fallback.any():
            # the Newton model was poor (e.g. no row near the kink): take the
            # majorization step, V'' <= (q+1)^2/q makes it a guaranteed descent
            if majorizer is None:
                majorizer = sites.majorizer(q)[None] + np.diag(ridge)[None]
                if prior is not None:
                    majorizer = majorizer + prior
            Theta = Theta_new
            mm = -_solve_psd(np.broadcast_to(majorizer, system.shape), grad)
            Theta_new, value_mm, grad_mm, moved_mm = line_search(
                mm, fallback, value, grad, _MAX_HALVINGS
            )
            value_new[fallback], grad_new[:, fallback] = value_mm[fallback], grad_mm[:, fallback]
            moved |= moved_mm
        # a class that cannot descend any more is at machine precision: freeze it
        decrease = value - value_new
        active &= moved & (decrease > 4 * np.finfo(float).eps * np.abs(value))
        Theta, value, grad = Theta_new, value_new, grad_new
        history.append(value.copy())
        if refresh_curvature:
            _, _, curvature = objective_and_gradient(Theta, True)
    else:
        if warn and np.any(active & (np.max(np.abs(grad), axis=0) > tol * scale)):
            warnings.warn(
                f"DWD solver did not converge in max_iter={max_iter} "
                "iterations; increase max_iter or tol.",
                ConvergenceWarning,
            )
    final_curvature = curvature if refresh_curvature else start_curvature
    return Theta, final_curvature, {"n_iter": n_iter, "objective": np.array(history)}


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
    grad = grad + ridge * _ridge_mask(p1, fit_intercept)[:, None] * Theta
    h_bar = curvature + ridge * np.eye(p1)[None]
    system = h_bar if prior is None else h_bar + prior
    return Theta - _solve_psd(system, grad), h_bar
