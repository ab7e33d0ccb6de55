"""Continual release of the logistic loss's quadratic models (``solver='quadratic'``).

The privacy math of :class:`~skfedpriv.linear_model.LogisticRegression`'s
second-order private stream, the logistic twin of DWD's 'local-tree' /
'local-blt' (:mod:`._continual_summaries`, whose noise streams and weights
it shares). At batch ``b`` each learner forms, at the public parameters
``θ_{b-1}``, the linear and quadratic coefficients of the second-order model
of its rows' logistic loss, for every one-vs-rest model ``k``:

``a_k = Σ_i x̄_i c_ik``, ``c_ik = ℓ'(s_ik) - h_ik s_ik``,
``J_k = Σ_i h_ik x̄_i x̄_iᵀ``, ``h_ik = σ(s_ik) σ(-s_ik)``

(``s_ik = x̄_iᵀθ_k``, ``ℓ'(s) = -y σ(-y s)`` the derivative of
``log(1 + exp(-y s))``), so that the model's gradient at ``θ`` is
``a_k + J_k θ`` (the renewable estimator of Luo & Song 2020 written as
sums). The server needs the prefix sums ``Σ_{j<=b} (a_j, J_j)``: each learner
releases them continually through a prefix-sum factorization ``A = B C``,
one noise stream per learner.

**Enforced bounds.** Rows are clipped to ``‖x‖ <= C_x`` (so
``‖x̄‖ <= C2 = sqrt(C_x² + fit_intercept)``); per row the vector
``(h_ik)_k`` is clipped to L2 norm 1/4 (one model's bound: joint over the
``K`` models) and ``(c_ik)_k`` to L2 norm ``B_c`` (``clip_norm``). A single
model's ``|c|`` is at most 1 (``(1 + u)/(1 + e^u) <= 1`` and
``σ(-u)(1 + u σ(u)) < 1`` for ``u < 0``, ``u = y s``), so with one model and
``B_c >= 1`` the summary is exact. Replacing one row moves the stacked
``a`` by at most ``2 C2 B_c`` (L2) and the stacked ``J`` by at most
``sqrt(2) C2² / 4`` (Frobenius: each term is PSD, so
``‖P - Q‖² <= ‖P‖² + ‖Q‖²``). A learner's input of one step is
``(w_a a / Δ_a, w_J vech(J) / Δ_J)``, ``w_a² + w_J² = 1``: unit L2
sensitivity per step.

**Claim.** A row is in one batch of one learner, so it enters one step of
one learner's stream: the learner's messages are the Gaussian mechanism on
``C X`` with L2 sensitivity the largest column norm of ``C``, every step's
input chosen adaptively from earlier releases (adaptive continual release,
Denisov et al. 2022, Thm. 2.1), calibrated to (ε, δ) by
:func:`~._continual_summaries.continual_sigma`.
"""

import math

import numpy as np

from ._clipping import clip_vectors
from ._continual_summaries import COEFFICIENT_CLIP, noise_to_signal

__all__ = [
    "LOGISTIC_CURVATURE_BOUND",
    "logistic_quadratic_summary",
    "quadratic_noise_to_signal",
    "quadratic_sensitivities",
]

#: Bound of the logistic loss's second derivative ``σ(s) σ(-s)``.
LOGISTIC_CURVATURE_BOUND = 0.25


def _sigmoid(s):
    return 0.5 * (1.0 + np.tanh(0.5 * s))


def logistic_quadratic_summary(Xb, Y, theta, coefficient_clip):
    """One learner's ``(a, J)`` at ``theta``, with the per-row joint clipping.

    Parameters
    ----------
    Xb : ndarray of shape (n, p1)
        The learner's rows, clipped, with the intercept column when fitted.
    Y : ndarray of shape (n, K)
        One-vs-rest targets in {-1, +1}.
    theta : ndarray of shape (p1, K)
    coefficient_clip : float
        ``B_c``: L2 bound on each row's ``(c_ik)_k``.

    Returns
    -------
    a : ndarray of shape (p1, K)
    J : ndarray of shape (K, p1, p1)
    """
    scores = Xb @ theta
    h = clip_vectors(_sigmoid(scores) * _sigmoid(-scores), LOGISTIC_CURVATURE_BOUND)
    c = clip_vectors(-Y * _sigmoid(-Y * scores) - h * scores, coefficient_clip)
    return Xb.T @ c, np.einsum("ik,ij,il->kjl", h, Xb, Xb)


def quadratic_sensitivities(row_norm, coefficient_clip):
    """``(Δ_a, Δ_J)`` when one row is replaced: L2 change of the stacked ``a``
    and Frobenius change of the stacked ``J``, rows of norm ``<= row_norm``
    (``C2``, the intercept's 1 included)."""
    return (2.0 * row_norm * coefficient_clip,
            math.sqrt(2.0) * LOGISTIC_CURVATURE_BOUND * row_norm**2)


def quadratic_noise_to_signal(factorization, sigma, n_learners, p1, n_models, row_norm,
                              coefficient_clip, n_rows):
    """Expected norm of the noise of the last prefix sum of ``a`` over the
    largest norm that sum can have at ``θ_0 = 0``.

    Public quantities only: the factorization, σ, the learners, the layout,
    the clips and the stream's row count (``n_rows``, from public batch
    sizes). At ``θ = 0`` every row's coefficient vector is ``(∓1/2)_k``,
    clipped to ``B_c``: no row adds more than ``C2 min(B_c, sqrt(K)/2)``.
    A ratio above one: the noise alone outweighs anything the rows could add.

    Returns
    -------
    ratio : float
    """
    # DWD's ratio (its linear part does not depend on q: coefficients clipped
    # to COEFFICIENT_CLIP, each at most 1 at 0), rescaled to the clip B_c and
    # the logistic coefficient vector's norm at 0
    ratio = noise_to_signal(factorization, sigma, n_learners, p1, n_models, 1.0, row_norm,
                            n_rows)
    largest = min(coefficient_clip, 0.5 * math.sqrt(n_models))
    return ratio * (coefficient_clip / COEFFICIENT_CLIP) / largest
