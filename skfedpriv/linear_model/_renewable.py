"""The renewable (online) Newton update of one batch, for any smooth loss.

Guo et al. (2025) fit genDWD online by the renewable estimating equation
(eqs. 26, 30, 35: OnWP); Luo and Song (2020) do the same for generalized
linear models (the logistic twin). Both keep, besides the estimate
``θ_{b-1}``, the curvature ``P = Σ_{j<b} J_j`` of the earlier batches and
minimize, for the batch ``b``,

``F(θ) = Σ_{i in b} w_i ℓ(θ; x_i, y_i) + (α W_b / 2) ‖β‖²
+ ½ (θ - θ_{b-1})ᵀ P (θ - θ_{b-1})``

(the renewable objective; with ``P = 0``, the offline objective of the
batch). :func:`renewable_step` runs it on the federated Newton solver
(:func:`~skfedpriv.linear_model._newton.solve_batch`), sites sending only
sums.
"""

from dataclasses import dataclass

import numpy as np

from ._factored_curvature import curvature_form, select_models, zero_curvature
from ._newton import solve_batch


@dataclass(frozen=True)
class RenewableState:
    """The state a renewable stream carries from batch to batch (secret:
    ``curvature`` is a raw statistic of the rows).

    Attributes
    ----------
    theta : ndarray of shape (n_params, n_models)
        The current estimate.
    curvature : ndarray of shape (n_models, n_params, n_params), CurvatureStack or None
        ``Σ_j J_j`` of the batches so far (None before the first); a
        :class:`~._factored_curvature.CurvatureStack` while that is the
        smaller form, on a ``factored`` stream.
    started : ndarray of bool of shape (n_models,)
        Models whose first estimate has been fitted.
    seen : float
        The total row weight of the batches so far.
    """

    theta: np.ndarray
    curvature: object
    started: np.ndarray
    seen: float

    @classmethod
    def empty(cls, n_params, n_models):
        """A stream before its first batch."""
        return cls(np.zeros((n_params, n_models)), None, np.zeros(n_models, dtype=bool), 0.0)


def renewable_step(sites, theta, prior, started, seen, *, loss, alpha, fit_intercept,
                   max_iter, tol, online_steps, penalty=None, first_step=None,
                   matrices=False, newton_online=False, factored=False):
    """Non-private update of one batch: eq. 26 for a model's first batch,
    then the renewable equation (30) with the curvature at ``θ_{b-1}`` (eq. 35).

    Parameters
    ----------
    sites : DWDSites
        The batch's sites (prepared).
    theta : ndarray of shape (n_params, n_models)
    prior : ndarray of shape (n_models, n_params, n_params), CurvatureStack or None
    started : ndarray of bool of shape (n_models,)
    seen : float
        Row weight of the earlier batches.
    loss : loss object
    alpha : float
    fit_intercept : bool
    max_iter : int
        Newton steps of a model's first batch (offline).
    tol : float
    online_steps : int
        Newton steps of a later batch.
    penalty : ndarray of shape (n_params,) or None
        1 for each penalized parameter (default: all but the intercept).
    first_step : callable or None
        ``first_step(sites, theta, prior=..., **common)`` replacing the
        online Newton steps (DWD's Algorithm 1 as published, eq. 37);
        returns ``(theta, curvature)``.
    matrices : bool
        Newton systems on curvature matrices formed at every iterate (see
        :func:`~skfedpriv.linear_model._newton.solve_batch`).
    newton_online : bool
        Later batches by Newton steps on the renewable objective, the
        batch's curvature formed at each iterate, ``J_b`` at the batch's
        estimate (Luo and Song 2020: ``J̃_b = J̃_{b-1} + J_b(θ̃_b)``); False:
        the curvature at ``θ_{b-1}`` throughout (the DWD paper's eq. 35).
    factored : bool
        While the rows seen (the prior's and this batch's) and their Gram
        matrix take fewer numbers than the ``n_params²`` matrix, keep the curvature as rows ``D^½ X̄`` and solve through
        ``m x m`` systems (:mod:`._factored_curvature`; in-process sites,
        Newton steps only, not ``first_step``); the returned curvature is
        then a :class:`~._factored_curvature.CurvatureStack`. The same
        estimates as the dense form up to rounding and the solver's ``tol``.

    Returns
    -------
    theta, curvature, n_iter, started
        The new estimate, this batch's curvature ``J_b`` (plus ridge) per
        model, the Newton steps taken and the models started.
    """
    common = dict(loss=loss, alpha=alpha, fit_intercept=fit_intercept)
    if penalty is not None:
        common["penalty"] = penalty
    prior, rows = curvature_form(sites, prior, theta.shape[0],
                                 wanted=factored and first_step is None, alpha=alpha,
                                 penalty=penalty)
    # A model whose rows so far all sit on one side has no minimizer (the
    # intercept would run off): it starts once a batch shows both sides.
    starting = ~started & sites.two_sided
    curvature = zero_curvature(theta.shape[1], theta.shape[0], rows, fit_intercept)
    n_iter = 0
    if starting.any() or not started.any():
        # eq. 26: a model's first estimate solves its batch's equation
        new, curv, info = solve_batch(
            sites, theta, prior=prior, center=theta, max_iter=max_iter,
            tol=tol, frozen=~starting, matrices=matrices, rows=rows, **common,
        )
        theta = np.where(starting, new, theta)
        curvature = select_models(~started, curv, curvature)
        n_iter = info["n_iter"]
    if started.any():
        if first_step is not None:
            new, curv = first_step(sites, theta, prior=prior, **common)
            n_iter = max(n_iter, 1)
        else:  # renewable estimating equation (30), curvature at θ_{b-1} (eq. 35)
            new, curv, info = solve_batch(
                sites, theta, prior=prior, center=theta, max_iter=online_steps, tol=tol,
                scale=seen + sites.weight_sum, refresh_curvature=newton_online,
                matrices=matrices and newton_online, warn=False, frozen=~started, rows=rows,
                **common,
            )
            n_iter = max(n_iter, info["n_iter"])
        theta = np.where(started, new, theta)
        curvature = select_models(started, curv, curvature)
    return theta, curvature, n_iter, started | starting
