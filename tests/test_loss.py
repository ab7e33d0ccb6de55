"""Loss objects: derivatives against finite differences, declared bounds hold."""

import numpy as np
import pytest

from skfedpriv._loss import (
    LOSSES,
    GenDWDLoss,
    LogisticLoss,
    MarginLoss,
    MultinomialLoss,
    as_loss,
    make_loss,
)

MARGIN_LOSSES = [GenDWDLoss(0.5), GenDWDLoss(1.0), GenDWDLoss(3.0), LogisticLoss()]


def _margins(loss):
    """Margins over a wide range, away from any kink (finite differences)."""
    u = np.linspace(-6.0, 8.0, 2001)
    if isinstance(loss, GenDWDLoss):
        u = u[np.abs(u - loss.q / (loss.q + 1.0)) > 1e-3]
    return u


@pytest.mark.parametrize("loss", MARGIN_LOSSES, ids=repr)
def test_margin_derivatives_match_finite_differences(loss):
    u, h = _margins(loss), 1e-6
    numeric = (loss.value(u + h) - loss.value(u - h)) / (2 * h)
    np.testing.assert_allclose(loss.derivative(u), numeric, rtol=1e-6, atol=1e-8)
    numeric = (loss.derivative(u + h) - loss.derivative(u - h)) / (2 * h)
    np.testing.assert_allclose(loss.curvature(u), numeric, rtol=1e-5, atol=1e-7)
    value, derivative = loss.value_and_derivative(u)
    np.testing.assert_allclose(value, loss.value(u), rtol=1e-14)
    np.testing.assert_allclose(derivative, loss.derivative(u), rtol=1e-14)


@pytest.mark.parametrize("loss", MARGIN_LOSSES, ids=repr)
def test_margin_bounds_hold(loss):
    u = np.linspace(-50.0, 50.0, 200001)
    assert np.all(np.abs(loss.derivative(u)) <= loss.derivative_bound + 1e-12)
    for curvature in (loss.curvature(u), loss.smoothed_curvature(u)):
        assert np.all(curvature >= 0)
        assert np.all(curvature <= loss.curvature_bound * (1 + 1e-12))
    # the bound is tight (reached or approached on the grid)
    assert loss.curvature(u).max() >= 0.99 * loss.curvature_bound
    assert bool(loss.curvature(np.zeros(1))[0] == 0) == loss.flat_at_zero


def test_gendwd_smoothed_curvature_is_eq_8():
    loss, width = GenDWDLoss(2.0), 0.05
    u0 = loss.q / (loss.q + 1.0)
    far = np.array([u0 - 2 * width, u0 + 2 * width, 3.0])
    np.testing.assert_array_equal(loss.smoothed_curvature(far)[0], 0.0)
    np.testing.assert_allclose(loss.smoothed_curvature(far)[1:], loss.curvature(far)[1:])
    # the linear ramp: continuous at both ends of the window
    ends = np.array([u0 - width, u0 + width])
    np.testing.assert_allclose(loss.smoothed_curvature(ends), [0.0, loss.curvature(ends)[1]],
                               atol=1e-12)


def test_logistic_probabilities_and_likelihood_flags():
    assert LogisticLoss().is_likelihood and MultinomialLoss().is_likelihood
    assert not GenDWDLoss(1.0).is_likelihood
    with pytest.raises(AttributeError):
        GenDWDLoss(1.0).probabilities(np.zeros(3))
    p = LogisticLoss().probabilities(np.array([0.0, 2.0]))
    np.testing.assert_allclose(p[:, 1], 1 / (1 + np.exp(-np.array([0.0, 2.0]))))


def test_multinomial_gradient_and_curvature_product():
    rng = np.random.default_rng(0)
    loss = MultinomialLoss()
    scores = rng.normal(size=(20, 4)) * 3
    Y = np.eye(4)[rng.integers(0, 4, size=20)]
    value, grad = loss.value_and_gradient(scores, Y)
    np.testing.assert_allclose(value, loss.value(scores, Y))
    h = 1e-6
    for k in range(4):
        e = np.zeros(4)
        e[k] = h
        numeric = (loss.value(scores + e, Y) - loss.value(scores - e, Y)) / (2 * h)
        np.testing.assert_allclose(grad[:, k], numeric, rtol=1e-6, atol=1e-9)
    V = rng.normal(size=scores.shape)
    numeric = (loss.value_and_gradient(scores + h * V, Y)[1]
               - loss.value_and_gradient(scores - h * V, Y)[1]) / (2 * h)
    np.testing.assert_allclose(loss.curvature_product(scores, V), numeric, rtol=1e-5, atol=1e-8)
    # the declared bounds: ‖p - e_y‖ <= sqrt 2, spectral norm of the Hessian <= 1/2
    assert np.all(np.linalg.norm(grad, axis=1) <= loss.derivative_bound)
    for s in scores:
        p = np.exp(s - s.max())
        p /= p.sum()
        assert np.linalg.eigvalsh(np.diag(p) - np.outer(p, p)).max() <= loss.curvature_bound


def test_registry_and_coercion():
    assert set(LOSSES) >= {"gendwd", "logistic", "multinomial"}
    assert make_loss("gendwd", q=2.0) == GenDWDLoss(2.0) == as_loss(2.0)
    assert make_loss("logistic") == LogisticLoss()
    loss = LogisticLoss()
    assert as_loss(loss) is loss
    assert isinstance(as_loss(1.5), MarginLoss)
    with pytest.raises(ValueError, match="unknown loss"):
        make_loss("hinge")
    with pytest.raises(ValueError, match="q > 0"):
        GenDWDLoss(0.0)
    with pytest.raises(TypeError):
        as_loss("gendwd")


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_spec_rebuilds_the_loss_through_the_registry(name):
    loss = make_loss(name, q=0.5) if name == "gendwd" else make_loss(name)
    spec = loss.spec()
    assert spec["loss"] == name and make_loss(spec) == loss
    assert type(make_loss(spec)) is LOSSES[name]
    # the parameters are exactly the loss's own: genDWD's q, none for the others
    assert spec["params"] == ({"q": 0.5} if name == "gendwd" else {})


def test_make_loss_refuses_what_no_loss_takes():
    with pytest.raises(ValueError, match="no parameters"):
        make_loss("logistic", q=1.0)
    with pytest.raises(ValueError, match="no parameters"):
        make_loss({"loss": "gendwd", "params": {"q": 1.0, "p": 2}})
    with pytest.raises(ValueError, match="unknown loss"):
        make_loss({"loss": None, "params": {}})
    with pytest.raises(ValueError, match="a loss spec"):
        make_loss({"loss": "gendwd", "code": "x"})
    with pytest.raises(ValueError, match="a loss spec"):
        make_loss({"loss": "gendwd"}, q=2.0)
    with pytest.raises(ValueError, match="q > 0"):
        make_loss({"loss": "gendwd", "params": {"q": -1.0}})
