"""Reference computations for the tests, written independently of the package."""

import numpy as np


def gendwd_objective(theta, Xbar, y, weights, q, alpha):
    """genDWD objective (paper eq. 5) summed over the weighted rows, and its
    gradient: ``Σ w_i V_q(y_i x̄_iᵀθ) + (α W / 2) ‖β‖²`` with ``x̄ = (1, x)``,
    ``W = Σ w_i`` and the intercept ``θ_0`` unpenalized."""
    u = y * (Xbar @ theta)
    u0 = q / (q + 1)
    right = u > u0
    ratio = u0 / np.where(right, u, u0)
    loss = np.where(right, ratio**q / (q + 1), 1 - u)
    slope = np.where(right, -ratio ** (q + 1), -1.0)
    penalized = np.r_[0.0, theta[1:]]
    value = weights @ loss + 0.5 * alpha * weights.sum() * penalized @ penalized
    grad = Xbar.T @ (weights * y * slope) + alpha * weights.sum() * penalized
    return value, grad
