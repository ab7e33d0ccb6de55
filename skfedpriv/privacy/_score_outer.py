"""Sensitivities of the inference summary a site releases under
``DWDClassifier(mechanism='local-gaussian', inference=True)``.

A site sends, per one-vs-rest model, two symmetric ``p1 × p1`` sums over
its rows (:class:`~skfedpriv.linear_model._inference_sites.InferenceSummary`):
the exact curvature ``Σ_i ℓ''(u_i) x̄_i x̄_iᵀ`` and the score outer
products ``Σ_i ℓ'(u_i)² x̄_i x̄_iᵀ``. Rows weigh one and are clipped to
``‖x̄_i‖₂ <= C2``; the loss bounds ``0 <= ℓ'' <= c`` and ``|ℓ'| <= D``.
Each row's term is then PSD with Frobenius norm at most ``c C2²``
(curvature) or ``D² C2²`` (score outer product), and for PSD ``A, B``
``‖A - B‖_F² <= ‖A‖_F² + ‖B‖_F²``: replacing one row moves the sum by at
most ``sqrt(2)`` times that bound. The upper triangle (what
:func:`~skfedpriv.privacy.symmetric_gaussian_noise` perturbs) moves by no
more.
"""

import math

from .._loss import as_loss
from ._objective_perturbation import _derivative_bound, curvature_sensitivity

__all__ = ["exact_curvature_sensitivity", "score_outer_sensitivity"]


def exact_curvature_sensitivity(loss, clip_norm):
    """Frobenius change of ``Σ ℓ''(u_i) x̄_i x̄_iᵀ`` (the loss's own second
    derivative, genDWD's ``V_q''``) when one row is replaced:
    ``sqrt(2) c C2²``, the same bound as the smoothed curvature, since
    ``V_q'' <= (q+1)²/q`` too."""
    return curvature_sensitivity(loss, clip_norm)


def score_outer_sensitivity(loss, clip_norm):
    """Frobenius change of ``Σ ℓ'(u_i)² x̄_i x̄_iᵀ`` when one row is replaced:
    ``sqrt(2) D² C2²`` (``D = 1`` for genDWD)."""
    return math.sqrt(2.0) * _derivative_bound(as_loss(loss)) ** 2 * clip_norm**2
