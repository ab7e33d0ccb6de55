"""Coefficient inference of the multinomial (softmax) Newton fit.

The solver's parameter is the flattened ``(p1, K)`` matrix ``θ`` (index
``j K + k``, see :mod:`._multinomial_sites`). The softmax does not change
when a vector ``c`` is added to every class's parameters, so only
``(K - 1) p1`` directions are identified by the loss. The fit picks one
point of each such orbit:

* the coefficients: the ridge ``(α W / 2) ‖β‖²`` is smallest, and the loss
  flat, along a common shift of one feature's coefficients, so the
  penalized minimizer has ``Σ_k β_jk = 0`` for every feature;
* the intercepts (unpenalized): the gauge term ``½ W (vᵀθ)²``, ``v`` the
  intercepts' common shift, fixes ``Σ_k b_k = 0`` (scikit-learn's
  symmetric parametrization, which the fit releases).

The reported parameters are these centred, sum-to-zero ones, and the
target of every interval is their population counterpart: the minimizer of
the expected penalized loss at the same ``α`` whose intercepts sum to zero
(unique: the ridge makes the coefficients unique, the gauge the
intercepts). Each row's score ``x̄_i ⊗ (p_i - e_{y_i}) + α P θ`` sums to
zero over the classes of every feature (``1ᵀ(p_i - e_{y_i}) = 0``, and
``Σ_k β_jk = 0`` at the estimate), so the score covariance ``B`` vanishes
along every shift direction, and the curvature ``H`` (loss, ridge, gauge)
maps the shift directions and their complement each to itself. The
sandwich is therefore ``H⁺ B H⁺`` with the pseudo-inverse taken on the
complement of the shift directions, whatever ``H`` is along them: the
covariance step adds ``W`` times the projector on the shift directions
(:func:`shift_projector`, data-independent) to the batch's curvature so
that every system is invertible even at ``alpha = 0`` (where the ridge no
longer fixes the coefficients' shifts). A covariance of rank
``(K - 1) p1`` (``(K - 1) p`` without an intercept). Each class's
coefficient then has a standard error; sums over the classes have none
(they are fixed at zero).

References
----------
.. [1] Huber, P. J. (1967); White, H. (1982): the sandwich (see
   :mod:`._inference`).
"""

import numpy as np

from ._dwd_solver import _augmented_sum, augmented_gram, augmented_scores
from ._inference import inference_attributes
from ._inference_sites import InferenceSummary

__all__ = ["class_pair_gram", "inference_release", "multinomial_coef_cov",
           "shift_projector", "site_multinomial_inference", "softmax", "softmax_hessian"]


def shift_projector(n_params, n_classes):
    """The orthogonal projector on the shift directions (one per feature,
    intercept included: the same value added to every class), in the
    solver's flattened order (index ``j K + k``)."""
    return np.kron(np.eye(n_params), np.full((n_classes, n_classes), 1.0 / n_classes))


def softmax(scores):
    """Row-wise class probabilities of ``(n, K)`` scores."""
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def softmax_hessian(p):
    """``diag p_i - p_i p_iᵀ`` of every row, shape ``(n, K, K)``: the
    multinomial loss's curvature in the scores."""
    return np.einsum("ik,km->ikm", p, np.eye(p.shape[1])) - p[:, :, None] * p[:, None, :]


def class_pair_gram(X, pair_weights, fit_intercept):
    """``Σ_i (x̄_i x̄_iᵀ) ⊗ D_i`` in the solver's flattened order (index
    ``j K + k``), for symmetric ``(K, K)`` row matrices ``D_i``.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n, p)
    pair_weights : ndarray of shape (n, K, K)
        ``D_i`` of every row.
    fit_intercept : bool

    Returns
    -------
    matrix : ndarray of shape (p1 K, p1 K)
    """
    n_classes = pair_weights.shape[1]
    n_params = X.shape[1] + int(fit_intercept)
    blocks = np.empty((n_classes, n_classes, n_params, n_params))
    for k in range(n_classes):
        for m in range(k, n_classes):
            blocks[k, m] = blocks[m, k] = augmented_gram(X, pair_weights[:, k, m], fit_intercept)
    size = n_params * n_classes
    return blocks.transpose(2, 0, 3, 1).reshape(size, size)


def site_multinomial_inference(X, Y, weights, Theta, fit_intercept):
    """One site's :class:`~._inference_sites.InferenceSummary` of the
    multinomial loss at the ``(p1, K)`` parameters ``Theta`` (one "model":
    the flattened parameter vector).

    Returns
    -------
    summary : InferenceSummary
        ``curvature``: ``Σ_i w_i (x̄_i x̄_iᵀ) ⊗ (diag p_i - p_i p_iᵀ)``;
        ``score_outer``: ``Σ_i w_i² (x̄_i x̄_iᵀ) ⊗ (r_i r_iᵀ)`` with the
        residual ``r_i = p_i - e_{y_i}``; ``score_sum``: ``Σ_i w_i² x̄_i r_iᵀ``
        flattened; ``weight_sq_sum``: ``Σ_i w_i²``.
    """
    p = softmax(augmented_scores(X, Theta, fit_intercept))
    residual = p - Y
    w2 = weights * weights
    hessian = softmax_hessian(p)
    outer = residual[:, :, None] * residual[:, None, :]
    return InferenceSummary(
        class_pair_gram(X, weights[:, None, None] * hessian, fit_intercept)[None],
        class_pair_gram(X, w2[:, None, None] * outer, fit_intercept)[None],
        _augmented_sum(X, w2[:, None] * residual, fit_intercept).reshape(-1, 1),
        w2.sum(),
    )


def multinomial_coef_cov(flat_cov, n_classes, fit_intercept):
    """The public inference attributes from the solver-order covariance.

    Parameters
    ----------
    flat_cov : ndarray of shape (1, p1 K, p1 K)
        Covariance of the flattened ``θ`` (index ``j K + k``).
    n_classes : int
    fit_intercept : bool

    Returns
    -------
    attributes : dict
        ``coef_cov_`` of shape ``(1, K p1, K p1)``, the covariance of
        ``np.column_stack([intercept_, coef_]).ravel()`` (class-major: class
        ``k``'s intercept, then its coefficients), projected on the
        sum-to-zero subspace; ``intercept_se_`` of shape ``(K,)`` and
        ``coef_se_`` of shape ``(K, p)``.
    """
    size = flat_cov.shape[-1]
    n_params = size // n_classes
    # the centring of the released parameters (every feature, intercept
    # included, sums to zero over the classes): removes any rounding left
    # along the shift directions
    centre = np.eye(size) - shift_projector(n_params, n_classes)
    cov = centre @ flat_cov[0] @ centre
    order = np.arange(size).reshape(n_params, n_classes).T.ravel()
    cov = cov[np.ix_(order, order)]
    std = np.sqrt(np.clip(np.diagonal(cov), 0.0, None)).reshape(n_classes, n_params)
    out = dict(coef_cov_=cov[None])
    if fit_intercept:
        out.update(intercept_se_=std[:, 0].copy(), coef_se_=std[:, 1:].copy())
    else:
        out.update(intercept_se_=np.zeros(n_classes), coef_se_=std)
    return out


def inference_release(coef_cov, n_classes, fit_intercept):
    """The public inference attributes of either Newton loss: the binary
    model's (:func:`~._inference.inference_attributes`) or the
    multinomial one's (:func:`multinomial_coef_cov`)."""
    if n_classes == 2:
        return inference_attributes(coef_cov, fit_intercept)
    return multinomial_coef_cov(coef_cov, n_classes, fit_intercept)
