"""Reference computations for the tests, written independently of the package."""

import math

import numpy as np
from scipy.optimize import minimize
from scipy.stats import beta as beta_dist


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



def gendwd_relative_gaps(clf, X, y, q, alpha, weights=None):
    """``(F(θ) - min F) / min F`` of every one-vs-rest model of a fitted
    genDWD classifier (intercept fitted), ``min F`` by L-BFGS-B on
    :func:`gendwd_objective` started at ``θ``."""
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    weights = np.ones(len(X)) if weights is None else weights
    Theta = np.column_stack([clf.intercept_, clf.coef_]).T
    labels = ([np.where(y == clf.classes_[1], 1.0, -1.0)] if len(clf.classes_) == 2
              else [np.where(y == c, 1.0, -1.0) for c in clf.classes_])
    gaps = []
    for theta, y_pm in zip(Theta.T, labels):
        args = (Xbar, y_pm, weights, q, alpha)
        reference = minimize(gendwd_objective, theta, args=args, jac=True, method="L-BFGS-B",
                             options=dict(gtol=1e-13, ftol=1e-16, maxiter=5000))
        gaps.append((gendwd_objective(theta, *args)[0] - reference.fun) / reference.fun)
    return np.array(gaps)

def audit_epsilon(sample_d, sample_d_prime, delta, threshold_grid, confidence=0.05):
    """Lower confidence bound of ε from threshold tests (Clopper-Pearson)."""
    n = len(sample_d)
    best = 0.0
    for t in threshold_grid:
        k1 = int(np.sum(sample_d > t))
        k2 = int(np.sum(sample_d_prime > t))
        p1_low = beta_dist.ppf(confidence / 2, k1, n - k1 + 1) if k1 > 0 else 0.0
        p2_high = beta_dist.ppf(1 - confidence / 2, k2 + 1, n - k2) if k2 < n else 1.0
        if p1_low - delta > 0 and p2_high > 0:
            best = max(best, math.log((p1_low - delta) / p2_high))
    return best


def audit_first_step_change(shift, B, delta, n=400_000, seed=5):
    """Audit a prefix-sum stream ``A X + B z`` (``z`` iid standard normal)
    whose first step's input moves by ``shift`` (in units of the noise std)
    between two neighbouring datasets.

    Every prefix sum sees the change; both outputs are projected on the
    likelihood-ratio direction (the noise covariance is ``BBᵀ`` per entry).

    Returns
    -------
    mu : float
        The pair's Gaussian distinguishability.
    lower : float
        ε lower bound at ``delta`` (Clopper-Pearson, 95%) from ``n`` draws.
    """
    distance = float(np.linalg.norm(shift))
    B = np.asarray(B)
    covariance = B @ B.T
    weights = np.linalg.solve(covariance, np.ones(len(B)))
    rng = np.random.default_rng(seed)
    released_d = (distance + rng.standard_normal((n, B.shape[1])) @ B.T) @ weights
    released_n = (rng.standard_normal((n, B.shape[1])) @ B.T) @ weights
    spread = math.sqrt(weights @ covariance @ weights)
    grid = np.linspace(0, distance * weights.sum() + 5 * spread, 200)
    return distance * math.sqrt(weights.sum()), audit_epsilon(released_d, released_n, delta, grid)
