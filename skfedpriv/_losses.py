"""The losses of every estimator, and the one parameter layout they share.

Every estimator and protocol takes its loss from here: genDWD (value, first
derivative, curvature bound and smoothed curvature, elementwise on margins
``u = y * (x_bar @ theta)``), the one-vs-rest logistic loss and the
multinomial (softmax) loss.

One parameter layout serves all of them: a model's parameter vector is
``theta = (b, w)``, the intercept **first**, matched by the augmented row
``x_bar = (1, x)`` of the DWD paper (:func:`add_intercept_column`); the ridge
penalty leaves the intercept out (:func:`penalty_mask`); and
:func:`split_intercept` turns the parameters back into ``coef_`` and
``intercept_``. The parameter axis is the last axis of ``theta`` (a
``(n_models, n_params)`` or ``(n_learners, n_models, n_params)`` array).

References
----------
.. [1] Guo, Xie, Lu, Jiang, Dai, Kong (2025). Online federated learning for
   classification with generalized DWD. Eqs. 4, 8 (``shared/papers/
   online-federated-dwd-classification.txt``).
.. [2] Wang, B. and Zou, H. (2018). Another look at distance-weighted
   discrimination. JRSS-B 80(1), 177-198.
"""

import numpy as np
from scipy.special import expit, log_softmax, softmax


# -- the parameter layout ------------------------------------------------------

def add_intercept_column(X, fit_intercept):
    """Rows ``x_bar = (1, x)`` (intercept first), or ``X`` unchanged."""
    if not fit_intercept:
        return X
    return np.hstack([np.ones((X.shape[0], 1), dtype=X.dtype), X])


def penalty_mask(n_params, fit_intercept):
    """1 for each penalized parameter, 0 for the intercept (the first one)."""
    mask = np.ones(n_params)
    if fit_intercept:
        mask[0] = 0.0
    return mask


def split_intercept(theta, fit_intercept):
    """``(coef, intercept)`` of parameters whose last axis is ``(b, w)``.

    Without an intercept the intercept is zeros of the leading shape.
    """
    theta = np.asarray(theta)
    if fit_intercept:
        return theta[..., 1:].copy(), theta[..., 0].copy()
    return theta.copy(), np.zeros(theta.shape[:-1])


def count_models(classes):
    """One-vs-rest models for ``classes``: one for two classes, else one per class."""
    return 1 if len(classes) == 2 else len(classes)


def one_vs_rest_targets(y, classes):
    """Targets in {-1, +1}: one column for two classes, else one per class."""
    if len(classes) == 2:
        return np.where(y == classes[1], 1.0, -1.0)[:, None]
    return np.where(y[:, None] == classes[None, :], 1.0, -1.0)



# -- genDWD ----------------------------------------------------------------------

# Half-width of the window around the kink u0 = q/(q+1) in which the paper's
# smoothed second derivative (eq. 8) ramps linearly from 0 to V''(u0 + w).
# The paper leaves the width open; it only shapes the curvature *model* used
# by the online update, never the objective that is minimized.
SMOOTHING_WIDTH = 0.05


def fast_power(x, exponent):
    """``x ** exponent`` for ``x >= 0``; integer and half-integer exponents up
    to 16 by multiplications and one square root (several times faster than
    the general power, to the last few ulps the same)."""
    twice = 2.0 * exponent
    if twice != round(twice) or not 0 <= twice <= 32:
        return x**exponent
    n, half = divmod(int(round(twice)), 2)
    out = np.sqrt(x) if half else None
    base = x
    while n:
        if n & 1:
            out = base if out is None else out * base
        n >>= 1
        if n:
            base = base * base
    return np.ones_like(x) if out is None else out


def _kink(q):
    return q / (q + 1.0)


def gendwd_loss(u, q):
    """genDWD loss V_q(u) (paper eq. 4).

    ``V_q(u) = 1 - u`` for ``u <= q/(q+1)``, else
    ``q^q / ((q+1)^(q+1) u^q)``, written as ``(u0/u)^q / (q+1)`` with
    ``u0 = q/(q+1)`` so that large ``q`` does not overflow.
    """
    u = np.asarray(u, dtype=float)
    u0 = _kink(q)
    right = u > u0
    safe_u = np.where(right, u, u0)
    return np.where(right, fast_power(u0 / safe_u, q) / (q + 1.0), 1.0 - u)


def gendwd_derivative(u, q):
    """First derivative V_q'(u): -1 left of the kink, -(u0/u)^(q+1) right of it."""
    u = np.asarray(u, dtype=float)
    u0 = _kink(q)
    right = u > u0
    safe_u = np.where(right, u, u0)
    return np.where(right, -fast_power(u0 / safe_u, q + 1.0), -1.0)


def gendwd_loss_and_derivative(u, q):
    """``(V_q(u), V_q'(u))`` in one pass (one power evaluation), bitwise
    :func:`gendwd_loss` and :func:`gendwd_derivative`: left of the kink the
    ratio ``u0 / max(u, u0)`` is exactly 1, so ``-(u0/u)^(q+1)`` is -1
    there without a second selection (``fmax``: NaN margins as before)."""
    u = np.asarray(u, dtype=float)
    u0 = _kink(q)
    right = u > u0
    ratio = np.fmax(u, u0)
    np.divide(u0, ratio, out=ratio)
    ratio_q = fast_power(ratio, q)  # ratio itself at q = 1
    derivative = np.multiply(ratio_q, ratio, out=None if ratio_q is ratio else ratio)
    np.negative(derivative, out=derivative)
    loss = np.where(right, np.divide(ratio_q, q + 1.0, out=ratio_q), 1.0 - u)
    return loss, derivative


def gendwd_curvature_bound(q):
    """Global bound of V_q'': ``(q+1)^2 / q``, reached just right of the kink."""
    return (q + 1.0) ** 2 / q


def gendwd_curvature(u, q):
    """Second derivative V_q'' off the kink: 0 left of ``u0 = q/(q+1)``,
    ``(q+1)²/q (u0/u)^(q+2)`` from it on (the right limit at ``u0``, an
    element of the generalized second derivative there)."""
    u = np.asarray(u, dtype=float)
    u0 = _kink(q)
    right = u >= u0
    return np.where(right, gendwd_curvature_bound(q) * fast_power(u0 / np.where(right, u, u0), q + 2.0),
                    0.0)


def gendwd_smoothed_curvature(u, q, width=SMOOTHING_WIDTH):
    """Smoothed second derivative of V_q (paper eq. 8).

    Zero left of ``u0 - width``, the exact ``V_q''`` right of ``u0 + width``
    and a linear ramp in between that joins the two continuously.
    """
    u = np.asarray(u, dtype=float)
    u0 = _kink(q)
    bound = gendwd_curvature_bound(q)
    right_edge = u0 + width
    exact = gendwd_curvature(np.maximum(u, right_edge), q)
    top = bound * (u0 / right_edge) ** (q + 2.0)
    ramp = top * (u - (u0 - width)) / (2.0 * width)
    return np.where(u >= right_edge, exact, np.where(u > u0 - width, ramp, 0.0))


# -- logistic (one-vs-rest) ------------------------------------------------------
# LogisticRegression: one binary logistic model per class (one model for two
# classes), elementwise on margins ``u = s * (x_bar @ theta)`` with targets
# ``s`` in {-1, +1}.


def logistic_loss(u):
    """Binary logistic loss ``log(1 + exp(-u))`` of margins ``u``."""
    return np.logaddexp(0.0, -np.asarray(u, dtype=float))


def logistic_derivative(u):
    """First derivative of :func:`logistic_loss`: ``-sigmoid(-u)``, in (-1, 0)."""
    return -expit(-np.asarray(u, dtype=float))


def logistic_curvature_bound():
    """Global bound of the logistic loss's second derivative: 1/4 (at u = 0)."""
    return 0.25


def logistic_probabilities(scores):
    """Class probabilities from one-vs-rest decision scores.

    ``scores`` of shape ``(n,)`` (two classes): ``[1 - sigmoid(s),
    sigmoid(s)]``. Of shape ``(n, K)``: the sigmoids of the class models
    normalized to sum to one (as scikit-learn's one-vs-rest logistic
    regression; uniform where all of them underflow).
    """
    if scores.ndim == 1:
        positive = expit(scores)
        return np.column_stack([1.0 - positive, positive])
    prob = expit(scores)
    total = prob.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, prob / total, 1.0 / prob.shape[1])


# -- multinomial (softmax) -------------------------------------------------------
# DecentralizedLogisticRegression's loss (Wang et al. 2025, section 4.1):
# f(W; x, y) = logsumexp(W x) - (W x)_y, written on the scores s = W x_bar
# (one per class, the class axis last); the gradient in W is the outer
# product of the score gradient with x_bar.


def softmax_loss(scores, y):
    """Multinomial logistic loss ``logsumexp(s) - s_y`` of each row.

    Parameters
    ----------
    scores : ndarray of shape (..., n_classes)
    y : ndarray of int of shape (...)
        Class index of each row.

    Returns
    -------
    loss : ndarray of shape (...)
    """
    log_p = log_softmax(scores, axis=-1)
    return -np.take_along_axis(log_p, y[..., None], axis=-1)[..., 0]


def softmax_gradient(scores, y):
    """Gradient of :func:`softmax_loss` with respect to the scores,
    ``softmax(s) - e_y`` (same shape as ``scores``)."""
    residual = softmax(scores, axis=-1)
    at_label = np.take_along_axis(residual, y[..., None], axis=-1)
    np.put_along_axis(residual, y[..., None], at_label - 1.0, axis=-1)
    return residual


def softmax_curvature_bound():
    """Bound on the Hessian of :func:`softmax_loss` in the scores.

    The Hessian ``diag(p) - p pᵀ`` (``p = softmax(s)``) is at most
    ``(1/2)(I - 11ᵀ/K)`` in the semidefinite order (Böhning 1992), so its
    spectral norm is at most ``1/2``, reached at ``p = (1/2, 1/2, 0, ...)``.
    """
    return 0.5


def softmax_probabilities(scores, log=False):
    """Class probabilities ``softmax(s)`` (or their logarithms).

    One score per row (two classes, ``s = s_1 - s_0``) gives the two columns
    ``(1 - expit(s), expit(s))``.
    """
    if scores.ndim == 1:
        if log:
            scores = np.column_stack([np.zeros_like(scores), scores])
        else:
            p1 = expit(scores)
            return np.column_stack([1.0 - p1, p1])
    return log_softmax(scores, axis=-1) if log else softmax(scores, axis=-1)
