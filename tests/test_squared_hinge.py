"""The loss axis is real: squared hinge on both protocols, from the loss module alone.

Nothing but :class:`skfedpriv._loss.SquaredHingeLoss` and its registry line
was added for it; the federated Newton protocol and the local-steps protocol
run it unchanged, each checked against scipy's L-BFGS-B on the same objective.
"""

import numpy as np
from scipy.optimize import minimize
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from skfedpriv._loss import LOSSES, make_loss
from skfedpriv.linear_model._dwd_solver import SiteData
from skfedpriv.linear_model._local_steps import local_round
from skfedpriv.linear_model._newton import solve_batch


def _problem(n=200, alpha=1e-2):
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X[:n, :8])
    s = np.where(y[:n] == 1, 1.0, -1.0)
    Xa = np.hstack([np.ones((n, 1)), X])
    mask = np.r_[0.0, np.ones(X.shape[1])]

    def objective(theta):
        """Mean squared hinge + (alpha/2)|w|², and its gradient (independent)."""
        slack = np.maximum(0.0, 1.0 - s * (Xa @ theta))
        value = (slack**2).mean() + 0.5 * alpha * (mask * theta) @ theta
        grad = -2.0 * Xa.T @ (s * slack) / n + alpha * mask * theta
        return value, grad

    best = minimize(objective, np.zeros(Xa.shape[1]), jac=True, method="L-BFGS-B",
                    options=dict(gtol=1e-12, ftol=1e-16, maxiter=10000)).x
    return X, y[:n], s, Xa, mask, alpha, best


def test_squared_hinge_is_registered():
    assert make_loss("squared_hinge") == LOSSES["squared_hinge"]()


def test_squared_hinge_on_the_federated_newton_protocol():
    X, y, _, _, _, alpha, best = _problem()
    rows = [np.arange(len(y))[k::3] for k in range(3)]  # three sites
    sites = SiteData.from_rows(X, y, np.ones(len(y)), rows)
    sites.prepare(np.array([0, 1]), fit_intercept=True)
    theta, _, info = solve_batch(sites, np.zeros((X.shape[1] + 1, 1)),
                                 loss=make_loss("squared_hinge"), alpha=alpha,
                                 fit_intercept=True, tol=1e-14)
    np.testing.assert_allclose(theta[:, 0], best, atol=1e-6 * np.abs(best).max())
    assert info["n_iter"] <= 20


def test_squared_hinge_on_the_local_steps_protocol():
    """One learner, one local step a round, every row each round, no
    effective clipping: the protocol is gradient descent on the same
    objective, so its rounds converge to L-BFGS-B's minimizer."""
    X, y, s, Xa, mask, alpha, best = _problem(alpha=0.1)  # well conditioned for GD
    loss = make_loss("squared_hinge")
    theta = np.zeros((1, Xa.shape[1]))
    codes = np.zeros(len(y), dtype=int)
    eta = 1.0 / (loss.curvature_bound * np.linalg.norm(Xa, 2) ** 2 / len(y) + alpha)
    for _ in range(3000):
        _, g = local_round(theta, Xa, s[:, None], codes, local_steps=1, learning_rate=eta,
                           clip_norm=1e6, alpha=alpha, penalize=mask, loss=loss)
        theta = theta - eta * g[0]  # the server's step, eta_g = 1, tau = 1
    np.testing.assert_allclose(theta[0], best, atol=1e-6 * np.abs(best).max())


def test_squared_hinge_derivatives_and_bounds():
    loss = make_loss("squared_hinge")
    u = np.linspace(-5.0, 5.0, 1001)
    u = u[np.abs(u - 1.0) > 1e-3]  # off the kink of the second derivative
    h = 1e-6
    np.testing.assert_allclose(loss.derivative(u),
                               (loss.value(u + h) - loss.value(u - h)) / (2 * h), atol=1e-7)
    np.testing.assert_allclose(loss.curvature(u),
                               (loss.derivative(u + h) - loss.derivative(u - h)) / (2 * h),
                               atol=1e-6)
    assert loss.curvature(u).max() == loss.curvature_bound
    assert not loss.flat_at_zero and not loss.is_likelihood


def test_no_sensitivity_for_an_unbounded_derivative():
    """Clipped rows bound no squared-hinge gradient sum: the summary
    protocol's sensitivities refuse it instead of calibrating to infinity."""
    import pytest

    from skfedpriv.privacy._objective_perturbation import (
        PublishedCalibration,
        summary_sensitivity,
    )

    loss = make_loss("squared_hinge")
    with pytest.raises(ValueError, match="unbounded derivative"):
        summary_sensitivity("gradient", loss, 2.0)
    with pytest.raises(ValueError, match="unbounded derivative"):
        PublishedCalibration("laplace", 1.0, 0.0, loss=loss, alpha=0.1, clip_norm=2.0,
                             step_radius=1.0, rho=None, p1=3, n_seen=100)
    assert summary_sensitivity("curvature", loss, 2.0) == pytest.approx(2 ** 0.5 * 2 * 4)
