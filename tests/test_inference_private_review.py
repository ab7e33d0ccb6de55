"""Adversarial checks of the private inference paths ('local-gaussian',
``inference=True``): refused batches, the bootstrap's generator and what
``private_refinement_`` holds."""

import copy
import math
import warnings

import numpy as np
import pytest

from skfedpriv import DWDClassifier, PrivacyBudget
from skfedpriv.datasets import make_federated_gaussians
from skfedpriv.privacy import NoiseDominatesWarning

CLIP = 2.0 * math.sqrt(3.0)


def _data(seed, n):
    X, y, g, _ = make_federated_gaussians(n_sites=2, n_batches=1, n_per_batch=n // 2,
                                          n_features=2, mu=0.2, sigma=1.0, random_state=seed)
    return X, y, g


def _fitted(budget=None):
    X, y, g = _data(0, 6000)
    clf = DWDClassifier(mechanism="local-gaussian", inference=True, epsilon=8.0,
                        clip_norm=CLIP, classes=[-1, 1], random_state=0, budget=budget)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X[:2000], y[:2000], sample_group=g[:2000])
    return clf, (X, y, g)


def _rng_state(clf):
    return copy.deepcopy(clf._training_state.rng.bit_generator.state)


def test_a_refused_later_batch_changes_nothing_and_its_noise_is_drawn_again_once():
    """Warnings as errors on the first-batch-share warning: the batch raises
    with the estimator, its generator and the budget as they were; the
    same batch afterwards gives what it gives on a copy that never saw the
    refusal would (the stream's replay guard refuses such a copy, so the
    untouched generator state is what is checked)."""
    budget = PrivacyBudget(100.0, 1e-2)
    clf, (X, y, g) = _fitted(budget)
    coef, state, spent = clf.coef_.copy(), _rng_state(clf), budget.spent
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseDominatesWarning)
        with pytest.raises(NoiseDominatesWarning, match="first batch holds less"):
            clf.partial_fit(X[2000:], y[2000:], sample_group=g[2000:])
    assert np.array_equal(clf.coef_, coef) and clf.n_batches_ == 1
    assert _rng_state(clf) == state and budget.spent == spent
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.partial_fit(X[2000:], y[2000:], sample_group=g[2000:])
    assert clf.n_batches_ == 2 and _rng_state(clf) != state


def test_the_bootstrap_never_touches_the_sites_generator():
    """``confint(method='bootstrap')`` draws from its own generator: the
    stream's generator state is as before, and a seeded bootstrap is
    reproducible (it reads nothing else that moves)."""
    clf, _ = _fitted()
    state = _rng_state(clf)
    first = clf.confint(method="bootstrap", n_resamples=20, random_state=3)
    assert _rng_state(clf) == state
    assert np.array_equal(first, clf.confint(method="bootstrap", n_resamples=20,
                                             random_state=3))


def test_the_published_refinement_holds_releases_and_public_numbers_only():
    """``private_refinement_`` holds arrays and numbers of the documented
    fields (no generator, no sites, no raw sums); its ridge is ``α n P``
    from the public row count, and nothing in it is shared with the secret
    training state."""
    clf, _ = _fitted()
    out = clf.private_refinement_
    documented = {"pilot", "theta", "curvatures", "curvature_stds", "grad_std", "n_sites",
                  "ridge", "steps", "damping", "score_cov", "sampling_cov", "residual_bound",
                  "std_err", "cov"}
    assert set(vars(out)) == documented
    for value in vars(out).values():
        for item in (value if isinstance(value, (list, tuple)) else [value]):
            assert isinstance(item, (np.ndarray, float, int)), type(item)
    assert np.allclose(out.ridge, clf.alpha * clf.n_samples_seen_ * np.r_[0.0, 1.0, 1.0])
    secret = clf._training_state
    for value in (secret.curvature, secret.coef_cov):
        for item in [*out.curvatures, out.cov, out.score_cov, out.sampling_cov]:
            assert not np.shares_memory(value, item)


def test_a_refinement_refused_by_its_warning_keeps_its_charge_and_fits_nothing():
    """The refinement's NoiseDominatesWarning is decided from drawn noise:
    raised as an error, the fit leaves the estimator unfitted and the
    charge stands (a refund would make retries free)."""
    X, y, g, _ = make_federated_gaussians(n_sites=3, n_batches=1, n_per_batch=200,
                                          n_features=5, mu=0.2, sigma=1.0, random_state=3)
    budget = PrivacyBudget(100.0, 1e-2)
    clf = DWDClassifier(mechanism="local-gaussian", inference=True, epsilon=1.0,
                        clip_norm=2.0 * math.sqrt(6.0), classes=[-1, 1], budget=budget,
                        random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseDominatesWarning)
        with pytest.raises(NoiseDominatesWarning, match="standard errors are NaN"):
            clf.fit(X, y, sample_group=g)
    assert not hasattr(clf, "coef_") and not hasattr(clf, "private_refinement_")
    assert budget.spent == pytest.approx((1.0, 1e-5))
