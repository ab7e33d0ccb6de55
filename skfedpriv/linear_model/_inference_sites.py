"""What a site sends for coefficient inference (one extra summary per batch).

The sandwich variance of an M-estimator needs, besides the curvature, the
covariance of the per-row score contributions. A site sends both as sums
over its rows at the parameters of the batch's estimate; nothing grows with
its row count. The functions are loss-agnostic: they take the loss's first
and second derivatives on margins ``u = y x̄ᵀθ`` as functions.
"""

import numpy as np

from .._sites import map_sites
from ._dwd_solver import _augmented_sum, augmented_scores, augmented_gram

__all__ = ["InferenceSummary", "site_inference_summary", "sum_site_inference"]


class InferenceSummary:
    """Summed inference summaries of a batch's sites at ``Theta``.

    Attributes
    ----------
    curvature : ndarray of shape (K, p1, p1)
        ``Σ_i w_i ℓ''(u_ik) x̄_i x̄_iᵀ``: the loss's own second derivative (for
        genDWD ``V_q''``: 0 left of the kink, its right limit from it on).
    score_outer : ndarray of shape (K, p1, p1)
        ``Σ_i w_i² ℓ'(u_ik)² x̄_i x̄_iᵀ``: outer products of the rows' loss scores.
    score_sum : ndarray of shape (p1, K)
        ``Σ_i w_i² y_ik ℓ'(u_ik) x̄_i``: the cross term with the ridge score.
    weight_sq_sum : float
        ``Σ_i w_i²``.
    """

    def __init__(self, curvature, score_outer, score_sum, weight_sq_sum):
        self.curvature = curvature
        self.score_outer = score_outer
        self.score_sum = score_sum
        self.weight_sq_sum = float(weight_sq_sum)

    def __add__(self, other):
        return InferenceSummary(self.curvature + other.curvature,
                                self.score_outer + other.score_outer,
                                self.score_sum + other.score_sum,
                                self.weight_sq_sum + other.weight_sq_sum)

    @property
    def n_floats(self):
        """Numbers one site sends: two symmetric matrices (upper triangles)
        per model, the score sum and the weight sum."""
        n_models, p1, _ = self.curvature.shape
        return n_models * (p1 * (p1 + 1) + p1) + 1


def site_inference_summary(X, Y, weights, Theta, fit_intercept, derivative, curvature):
    """One site's :class:`InferenceSummary` at ``Theta``.

    Parameters
    ----------
    X, Y, weights, Theta, fit_intercept
        A site's prepared rows, one-vs-rest targets, row weights and the
        parameters, as for :func:`~skfedpriv.linear_model._dwd_solver.site_summary`.
    derivative, curvature : callable
        ``ℓ'(u)`` and ``ℓ''(u)`` of the loss, elementwise on margins.

    Returns
    -------
    summary : InferenceSummary
    """
    margins = Y * augmented_scores(X, Theta, fit_intercept)
    first = derivative(margins)
    second = curvature(margins)
    w2 = weights * weights
    n_models = Y.shape[1]
    return InferenceSummary(
        np.stack([augmented_gram(X, weights * second[:, k], fit_intercept)
                  for k in range(n_models)]),
        np.stack([augmented_gram(X, w2 * first[:, k] ** 2, fit_intercept)
                  for k in range(n_models)]),
        _augmented_sum(X, w2[:, None] * Y * first, fit_intercept),
        w2.sum(),
    )


def _site_task(part, Theta, fit_intercept, derivative, curvature):
    X, Y, weights = part
    return site_inference_summary(X, Y, weights, Theta, fit_intercept, derivative, curvature)


def sum_site_inference(parts, Theta, fit_intercept, derivative, curvature, n_jobs=None):
    """The server's sum of :func:`site_inference_summary` over ``parts``
    (each a site's ``(X, Y, weights)`` or a Dask future of it)."""
    tasks = [(part, Theta, fit_intercept, derivative, curvature) for part in parts]
    results = map_sites(_site_task, tasks, n_jobs=n_jobs)
    total = results[0]
    for result in results[1:]:
        total = total + result
    return total
