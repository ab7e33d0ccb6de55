"""Private DWD: calibration, sensitivity, an empirical audit, accounting."""

import math
import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from _reference import audit_epsilon
from skfedpriv import DWDClassifier
from skfedpriv._losses import gendwd_derivative, gendwd_smoothed_curvature
from skfedpriv.datasets import make_federated_gaussians
from skfedpriv.linear_model._dwd_private import trust_region_step
from skfedpriv.privacy._objective_perturbation import (
    PublishedCalibration,
    clip_augmented_rows,
    curvature_sensitivity,
    gradient_sensitivity,
    gram_sensitivity,
    local_gaussian_releases,
    local_gaussian_sigma,
)
from skfedpriv.linear_model._base import ReleasedModelError
from skfedpriv.privacy import (
    PrivacyBudget,
    PrivacyBudgetError,
    SeededNoiseWarning,
    gaussian_epsilon,
)

# fixed seeds are deliberate here (reproducible tests); the warning is tested below
pytestmark = pytest.mark.filterwarnings("ignore::skfedpriv.privacy.SeededNoiseWarning")


def _data(n_batches=4, seed=0, p=5):
    return make_federated_gaussians(
        n_sites=3, n_batches=n_batches, n_per_batch=40, n_features=p, random_state=seed
    )


# -- calibration against independent computations ----------------------------


@pytest.mark.parametrize("q", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("epsilon", [0.8, 2.0])
def test_published_calibration_matches_paper_formulas(q, epsilon):
    c2, radius, alpha, n, p1, delta = 4.0, 0.05, 1e-3, 1200.0, 6, 1e-5
    rho = 500.0
    laplace = PublishedCalibration("laplace", epsilon, 0.0, loss=q, alpha=alpha, clip_norm=c2,
                                   step_radius=radius, rho=rho, p1=p1, n_seen=n)
    # eq. 61 with C1 = sqrt(p1) C2 and C_{p-1}/sqrt(N_{b-1}) replaced by R
    c1 = math.sqrt(p1) * c2
    t1 = 2 * c1 + 2 * (q + 1) ** 2 * c1 * c2 * radius / q
    t2 = 2 * math.log(1 + (q + 1) ** 2 * c2**2 / ((n * alpha + rho) * q))
    assert laplace.t1 == pytest.approx(t1, rel=1e-12)
    assert laplace.t2 == pytest.approx(t2, rel=1e-12)
    if epsilon > t2:
        assert laplace.scale == pytest.approx(t1 / (epsilon - t2), rel=1e-12)
    # eq. 64 and Algorithm 2 step 7
    auto = PublishedCalibration("gaussian", epsilon, delta, loss=q, alpha=alpha, clip_norm=c2,
                                step_radius=radius, rho=None, p1=p1, n_seen=n)
    d1 = 2 * c2 + 2 * (q + 1) ** 2 * c2**2 * radius / q
    tau = d1 * (math.sqrt(2 * math.log(1 / delta)) + math.sqrt(2 * math.log(1 / delta) + epsilon)) / epsilon
    assert auto.scale == pytest.approx(tau, rel=1e-12)
    # the default rho meets Condition 2 and T2 <= eps/2, and is the smallest such
    bound = (q + 1) ** 2 * c2**2 / q
    assert auto.rho >= bound / (math.exp(0.25) - 1) - n * alpha - 1e-9
    assert auto.t2 <= min(0.5, epsilon / 2) * (1 + 1e-12)
    smaller = auto.rho * 0.99
    assert 2 * math.log1p(bound / (n * alpha + smaller)) > min(0.5, epsilon / 2)


def test_laplace_without_valid_scale_names_rho():
    with pytest.raises(ValueError, match="rho"):
        PublishedCalibration("laplace", 0.1, 0.0, loss=1.0, alpha=0.0, clip_norm=4.0,
                             step_radius=0.1, rho=1.0, p1=3, n_seen=10)
    X, y, g, b = _data()
    clf = DWDClassifier(mechanism="laplace", epsilon=0.1, clip_norm=4.0, rho=1.0, alpha=0.0)
    with pytest.raises(ValueError, match="rho"):
        clf.partial_fit(X, y, classes=[-1, 1])
    assert not hasattr(clf, "coef_")


@pytest.mark.parametrize("epsilon, delta", [(0.5, 1e-5), (1.0, 1e-5), (4.0, 1e-6)])
@pytest.mark.parametrize("releases", [2, 11])
def test_local_gaussian_sigma_matches_dp_accounting(epsilon, delta, releases):
    dp_accounting = pytest.importorskip("dp_accounting")
    sigma = local_gaussian_sigma(epsilon, delta, releases, "analytic")
    # r unit-sensitivity Gaussian releases compose to one of sensitivity sqrt(r)
    reference = dp_accounting.get_sigma_gaussian(epsilon, delta) * math.sqrt(releases)
    assert sigma == pytest.approx(reference, rel=1e-6)
    assert local_gaussian_releases(3, 4, first=True) == 3 * 5 + 1
    assert local_gaussian_releases(1, 1, first=False) == 2


# -- sensitivity: brute force over random neighbours -------------------------


def _summaries(Xbar, y, theta, q):
    u = y * (Xbar @ theta)
    grad = Xbar.T @ (y * gendwd_derivative(u, q))
    curvature = (Xbar * gendwd_smoothed_curvature(u, q)[:, None]).T @ Xbar
    gram = Xbar.T @ Xbar
    return grad, curvature, gram


@pytest.mark.parametrize("q", [0.5, 1.0, 2.0])
def test_released_summaries_move_within_calibrated_sensitivity(q):
    rng = np.random.default_rng(0)
    c2, p = 3.0, 4
    worst = np.zeros(3)
    for trial in range(300):
        X = rng.normal(scale=rng.uniform(0.5, 4), size=(20, p))
        Xc = clip_augmented_rows(X, c2, True)
        y = rng.choice([-1.0, 1.0], size=20)
        theta = rng.normal(scale=rng.uniform(0.1, 3), size=p + 1)
        # adversarial replacement: a clipped row on the boundary, any label
        new = rng.normal(size=p)
        new *= math.sqrt(c2**2 - 1) / np.linalg.norm(new)
        Xn, yn = Xc.copy(), y.copy()
        Xn[0], yn[0] = new, -y[0]
        Xbar = np.hstack([np.ones((20, 1)), Xc])
        Xbar_n = np.hstack([np.ones((20, 1)), Xn])
        assert np.all(np.linalg.norm(Xbar, axis=1) <= c2 * (1 + 1e-12))
        a, b = _summaries(Xbar, y, theta, q), _summaries(Xbar_n, yn, theta, q)
        iu = np.triu_indices(p + 1)
        changes = [
            np.linalg.norm(a[0] - b[0]),
            np.linalg.norm((a[1] - b[1])[iu]),
            np.linalg.norm((a[2] - b[2])[iu]),
        ]
        bounds = [gradient_sensitivity(c2), curvature_sensitivity(q, c2), gram_sensitivity(c2)]
        assert all(c <= bnd * (1 + 1e-9) for c, bnd in zip(changes, bounds))
        worst = np.maximum(worst, np.array(changes) / bounds)
    assert worst[0] > 0.5  # the bound is not vacuous


def test_published_objective_perturbation_bounds_hold_in_the_ball():
    """Δξ(α) of eq. 60 stays within T1 (L1) and Δ1 (L2) for α in the ball,
    and the Jacobian ratio of eq. 58 within exp(T2)."""
    rng = np.random.default_rng(1)
    q, c2, alpha, p = 1.0, 3.0, 0.01, 3
    radius = 0.2
    for trial in range(200):
        X = clip_augmented_rows(rng.normal(scale=2, size=(30, p)), c2, True)
        y = rng.choice([-1.0, 1.0], size=30)
        Xn, yn = X.copy(), y.copy()
        Xn[0] = clip_augmented_rows(rng.normal(scale=5, size=(1, p)), c2, True)[0]
        yn[0] = rng.choice([-1.0, 1.0])
        Xbar, Xbar_n = (np.hstack([np.ones((30, 1)), Z]) for Z in (X, Xn))
        theta = rng.normal(size=p + 1)
        prior = np.eye(p + 1) * rng.uniform(0, 20)
        cal = PublishedCalibration("laplace", 2.0, 0.0, loss=q, alpha=alpha, clip_norm=c2,
                                   step_radius=radius, rho=None, p1=p + 1, n_seen=30)

        def residual(Xb, yy, point):
            grad, curvature, _ = _summaries(Xb, yy, theta, q)
            s = prior + curvature + 30 * alpha * np.eye(p + 1)
            return grad + s @ (point - theta) + cal.rho * point, s + cal.rho * np.eye(p + 1)

        step = rng.normal(size=p + 1)
        point = theta + step * rng.uniform(0, radius) / np.linalg.norm(step)
        r1, m1 = residual(Xbar, y, point)
        r2, m2 = residual(Xbar_n, yn, point)
        assert np.abs(r1 - r2).sum() <= cal.t1 * (1 + 1e-9)
        assert np.linalg.norm(r1 - r2) <= cal.delta_1 * (1 + 1e-9)
        ratio = abs(np.linalg.det(m2) / np.linalg.det(m1))
        assert math.log(ratio) <= cal.t2 + 1e-9


def test_trust_region_step_is_the_constrained_minimizer():
    rng = np.random.default_rng(2)
    for _ in range(50):
        A = rng.normal(size=(4, 4))
        P = A @ A.T + 0.1 * np.eye(4)
        g = rng.normal(size=4) * 10
        radius = rng.uniform(0.01, 2)
        d = trust_region_step(P, g, radius)
        assert np.linalg.norm(d) <= radius * (1 + 1e-9)
        value = 0.5 * d @ P @ d + g @ d
        # no feasible random point does better
        for _ in range(200):
            e = rng.normal(size=4)
            e *= rng.uniform(0, radius) / np.linalg.norm(e)
            assert value <= 0.5 * e @ P @ e + g @ e + 1e-9


# -- empirical audit ----------------------------------------------------------


@pytest.mark.parametrize("noise_factor, should_violate", [(1.0, False), (0.25, True)])
def test_empirical_audit_of_a_local_gaussian_release(noise_factor, should_violate):
    """Run a site's gradient release many times on two neighbouring batches.

    The summaries come from the package's own site code on clipped rows, the
    noise from its own calibration and generator; the audited output is one
    gradient release (one class model, one online step: 2 releases in the
    batch), projected on the direction in which the replaced row moves it.
    Its ε lower bound (Clopper-Pearson, 95%) must stay below the claimed ε;
    with the noise cut to a quarter it must exceed it (the audit has power).
    """
    from skfedpriv.linear_model._dwd_solver import site_summary
    from skfedpriv.privacy import gaussian_noise

    epsilon, delta, c2, q = 1.0, 1e-5, 2.0, 1.0
    rng = np.random.default_rng(3)
    X = clip_augmented_rows(rng.normal(size=(30, 3)), c2, True)
    y = rng.choice([-1.0, 1.0], size=(30, 1))
    # neighbour: row 0 replaced by its mirror image with the other label, the
    # replacement that moves the gradient most at theta = 0 (V' = -1 there)
    Xn, yn = X.copy(), y.copy()
    X[0] *= math.sqrt(c2**2 - 1) / np.linalg.norm(X[0])
    Xn[0], yn[0] = -X[0], -y[0]
    theta = np.zeros((4, 1))
    grad_d = site_summary(X, y, np.ones(30), theta, q, True, False)[1].ravel()
    grad_n = site_summary(Xn, yn, np.ones(30), theta, q, True, False)[1].ravel()
    direction = (grad_d - grad_n) / np.linalg.norm(grad_d - grad_n)
    sigma_unit = local_gaussian_sigma(epsilon, delta, local_gaussian_releases(1, 1, False), "analytic")
    sigma = sigma_unit * gradient_sensitivity(c2) * noise_factor
    n = 400_000
    released_d = (grad_d + gaussian_noise(sigma, (n, 4), random_state=rng)) @ direction
    released_n = (grad_n + gaussian_noise(sigma, (n, 4), random_state=rng)) @ direction
    center = grad_n @ direction
    grid = center + np.linspace(0, np.linalg.norm(grad_d - grad_n) + 5 * sigma, 200)
    lower = audit_epsilon(released_d, released_n, delta, grid)
    if should_violate:
        assert lower > epsilon
    else:
        assert lower <= epsilon


# -- estimator behaviour -------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian", "local-gaussian"])
def test_private_stream_accounts_and_resumes_after_pickle(mechanism):
    X, y, g, b = _data(n_batches=4)
    clf = DWDClassifier(mechanism=mechanism, epsilon=2.0, clip_norm=4.0, random_state=0, online_steps=2)
    first = b < 2
    for k in (0, 1):
        m = b == k
        clf.partial_fit(X[m], y[m], sample_group=g[m], classes=[-1, 1])
    delta = 0.0 if mechanism == "laplace" else 1e-5
    # Algorithm 2 charges every batch (a release each); local-gaussian once
    per_batch = mechanism != "local-gaussian"
    expected = (4.0, 2 * delta) if per_batch else (2.0, delta)
    assert clf.privacy_spent_ == expected
    resumed = pickle.loads(pickle.dumps(clf))
    assert resumed.privacy_spent_ == expected
    # the reference: the same seed streamed straight, never pickled
    clf = clone(clf)
    for k in (0, 1, 2, 3):
        m = b == k
        clf.partial_fit(X[m], y[m], sample_group=g[m], classes=[-1, 1])
        if k >= 2:
            resumed.partial_fit(X[m], y[m], sample_group=g[m])
    np.testing.assert_array_equal(clf.coef_, resumed.coef_)
    np.testing.assert_array_equal(clf.intercept_, resumed.intercept_)
    expected = (8.0, 4 * delta) if per_batch else (2.0, delta)
    assert resumed.privacy_spent_ == clf.privacy_spent_ == expected
    assert np.all(np.isfinite(clf.coef_))
    assert not np.array_equal(clf.coef_, DWDClassifier().fit(X[~first], y[~first]).coef_)


def test_same_seed_same_noise_and_none_draws_fresh():
    X, y, g, b = _data()
    kw = dict(mechanism="local-gaussian", clip_norm=4.0, classes=[-1, 1])
    a = DWDClassifier(random_state=7, **kw).fit(X, y)
    c = DWDClassifier(random_state=7, **kw).fit(X, y)
    np.testing.assert_array_equal(a.coef_, c.coef_)
    d = DWDClassifier(**kw).fit(X, y)
    e = DWDClassifier(**kw).fit(X, y)
    assert not np.array_equal(d.coef_, e.coef_)


@pytest.mark.filterwarnings("default::skfedpriv.privacy.SeededNoiseWarning")
def test_a_private_stream_from_a_fixed_seed_warns_once_at_its_start():
    import warnings

    X, y, g, b = _data()
    kw = dict(mechanism="gaussian", clip_norm=4.0, classes=[-1, 1], step_radius=0.5)
    clf = DWDClassifier(random_state=3, **kw)
    with pytest.warns(SeededNoiseWarning, match="random_state=3"):
        clf.partial_fit(X[b == 0], y[b == 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeededNoiseWarning)
        clf.partial_fit(X[b == 1], y[b == 1])  # the stream goes on: no new warning
        DWDClassifier(**kw).fit(X, y)  # fresh OS entropy
        DWDClassifier(random_state=3).fit(X, y)  # no mechanism, no noise
    with pytest.warns(SeededNoiseWarning):
        clf.fit(X, y)  # a new stream


# -- the label set is public under a mechanism ---------------------------------


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian", "local-gaussian"])
def test_a_row_with_an_unseen_label_cannot_change_the_released_shape(mechanism):
    """Neighbours: one row replaced by a row with a label the data never had.

    Reading the classes from the data made ``classes_`` and the shape of
    ``coef_`` reveal that row deterministically. Under a mechanism the label
    set is declared: the neighbour is refused before anything changes, and
    an undeclared private fit is refused too.
    """
    X, y, g, b = _data()
    y_neighbour = y.copy()
    y_neighbour[0] = 2  # -1/1 data; the replaced row says "2"
    kw = dict(mechanism=mechanism, clip_norm=4.0, epsilon=2.0, classes=[-1, 1])
    released = DWDClassifier(**kw).fit(X, y)
    assert released.classes_.tolist() == [-1, 1] and released.coef_.shape == (1, X.shape[1])
    neighbour = DWDClassifier(**kw)
    with pytest.raises(ValueError, match=r"labels .*2.* that are not in classes"):
        neighbour.fit(X, y_neighbour)
    assert not [k for k in vars(neighbour) if k.endswith("_")]
    with pytest.raises(ValueError, match=r"labels .*2.* that are not in classes"):
        released.partial_fit(X[:5], y_neighbour[:5])
    # a declared set of three classes gives three models whatever the data hold
    three = DWDClassifier(**{**kw, "classes": [-1, 1, 2]})
    for labels in (y, y_neighbour):
        fitted = clone(three).fit(X, labels)
        assert fitted.classes_.tolist() == [-1, 1, 2] and fitted.coef_.shape == (3, X.shape[1])
    # undeclared: refused, before any state
    for call in (lambda c: c.fit(X, y), lambda c: c.partial_fit(X, y)):
        clf = DWDClassifier(**{**kw, "classes": None})
        with pytest.raises(ValueError, match="label set must be declared"):
            call(clf)
        assert not [k for k in vars(clf) if k.endswith("_")]
    # partial_fit's own classes argument declares the set too
    stream = DWDClassifier(**{**kw, "classes": None}).partial_fit(X, y, classes=[-1, 1])
    assert stream.classes_.tolist() == [-1, 1]
    # without a mechanism the classes are read from the data, as in scikit-learn
    assert DWDClassifier().fit(X, y_neighbour).classes_.tolist() == [-1, 1, 2]


# -- the release and the training state ----------------------------------------


def _arrays_and_generators(root):
    """Every ndarray and random generator reachable from ``root``, with its path."""
    found, seen, stack = [], set(), [("", root)]
    while stack:
        path, obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None))):
            continue
        seen.add(id(obj))
        if isinstance(obj, (np.ndarray, np.random.Generator, np.random.BitGenerator,
                            np.random.RandomState)):
            found.append((path, obj))
            if isinstance(obj, np.ndarray) and obj.dtype == object:
                stack.extend((f"{path}[{i}]", v) for i, v in enumerate(obj.ravel()))
            continue
        if isinstance(obj, dict):
            stack.extend((f"{path}[{k!r}]", v) for k, v in obj.items())
            stack.extend((f"{path}.key", k) for k in obj)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(obj))
        else:
            if hasattr(obj, "__dict__"):
                stack.extend((f"{path}.{k}", v) for k, v in vars(obj).items())
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    stack.append((f"{path}.{slot}", getattr(obj, slot)))
    return found


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian", "local-gaussian"])
def test_the_release_holds_only_covered_arrays_and_predicts_the_same(mechanism):
    X, y, g, b = _data()
    clf = DWDClassifier(mechanism=mechanism, epsilon=2.0, clip_norm=4.0, classes=[-1, 1],
                        budget=PrivacyBudget(100.0, 1e-3), online_steps=2)
    for k in range(3):
        clf.partial_fit(X[b == k], y[b == k], sample_group=g[b == k])
    released = pickle.loads(pickle.dumps(clf.release()))
    np.testing.assert_array_equal(released.predict(X), clf.predict(X))
    np.testing.assert_array_equal(released.decision_function(X), clf.decision_function(X))
    reachable = _arrays_and_generators(released)
    # covered (noised) outputs and the declared label set: nothing else
    assert sorted(path for path, _ in reachable) == [".classes_", ".coef_", ".intercept_"]
    # the secret state is really gone, not renamed: its bytes are not in the pickle
    training = clf._training_state
    blob = pickle.dumps(released)
    assert training.curvature.tobytes() not in blob
    assert pickle.dumps(training.rng.bit_generator.state) not in blob
    # under Algorithm 2 the training object's public attributes hold no raw curvature
    assert "curvature_" not in vars(clf)
    assert sorted(path for path, _ in _arrays_and_generators(
        {k: v for k, v in vars(clf).items() if not k.startswith("_")}
    )) == ["['classes_']", "['coef_']", "['intercept_']"]
    # a release cannot continue the stream (it has no training state) ...
    before = pickle.dumps(released)
    with pytest.raises(ReleasedModelError):
        released.partial_fit(X[b == 3], y[b == 3])
    assert pickle.dumps(released) == before
    # ... but it can start a new one
    released.set_params(budget=None).fit(X, y)


def test_algorithm2_curvature_differs_between_neighbours_and_is_not_public():
    """The accumulated ``Σ J_j`` of Algorithm 2 is raw (un-noised): it moves with
    one replaced row and is identical across seeds. It is training state."""
    X, y, g, b = _data()
    Xn = X.copy()
    Xn[0] *= -3  # one row replaced
    # q = 0.01: the curvature at θ_0 = 0 is not zero (at q = 1 it is)
    kw = dict(mechanism="gaussian", clip_norm=4.0, classes=[-1, 1], q=0.01)
    a = DWDClassifier(random_state=1, **kw).fit(X, y)
    a2 = DWDClassifier(random_state=2, **kw).fit(X, y)
    n = DWDClassifier(random_state=1, **kw).fit(Xn, y)
    np.testing.assert_array_equal(a._training_state.curvature, a2._training_state.curvature)
    assert np.abs(a._training_state.curvature - n._training_state.curvature).max() > 1.0
    for fitted in (a, a2, n, a.release()):
        assert not hasattr(fitted, "curvature_")
    # without a mechanism it is an ordinary fitted statistic
    plain = DWDClassifier().fit(X, y)
    np.testing.assert_array_equal(plain.curvature_, plain._training_state.curvature)
    np.testing.assert_array_equal(plain.release().curvature_, plain.curvature_)
    # refitting a non-private model privately drops the public curvature
    plain.set_params(**kw).fit(X, y)
    assert not hasattr(plain, "curvature_")


def test_private_accuracy_grows_with_epsilon():
    X, y, g, b = make_federated_gaussians(n_sites=5, n_batches=20, n_per_batch=200,
                                          n_features=10, random_state=4)
    Xt, yt, _, _ = make_federated_gaussians(n_sites=5, n_batches=4, n_per_batch=200,
                                            n_features=10, random_state=5)
    scores = {}
    for eps in (0.05, 50.0):
        clf = DWDClassifier(mechanism="local-gaussian", epsilon=eps, clip_norm=5.0,
                            random_state=0, online_steps=1)
        for k in range(20):
            m = b == k
            clf.partial_fit(X[m], y[m], sample_group=g[m], classes=[-1, 1])
        scores[eps] = clf.score(Xt, yt)
    offline = DWDClassifier().fit(X, y).score(Xt, yt)
    assert scores[50.0] > offline - 0.03
    assert scores[50.0] > scores[0.05]


@pytest.mark.parametrize(
    "params, data_kwargs, message",
    [
        (dict(mechanism="gaussian", clip_norm=None), {}, "clip_norm"),
        (dict(mechanism="gaussian", clip_norm=1.0), {}, "clip_norm"),
        (dict(mechanism="gaussian", clip_norm=3.0, epsilon=np.nan), {}, "epsilon"),
        (dict(mechanism="gaussian", clip_norm=3.0, delta=0.0), {}, "delta"),
        (dict(mechanism="local-gaussian", clip_norm=3.0), dict(sample_weight=True), "sample_weight"),
        (dict(mechanism="local-gaussian", clip_norm=3.0, class_weight={1: 2.0}), {}, "class_weight"),
        (dict(mechanism="bogus"), {}, "mechanism"),
    ],
)
def test_invalid_private_configuration_raises_and_changes_nothing(params, data_kwargs, message):
    X, y, g, b = _data()
    clf = DWDClassifier(mechanism="local-gaussian", clip_norm=3.0, random_state=0)
    clf.partial_fit(X[b == 0], y[b == 0], classes=[-1, 1])
    before = pickle.dumps(clf.__dict__)
    clf.set_params(**{"mechanism": "local-gaussian", **params})
    weights = np.full((b == 1).sum(), 2.0) if data_kwargs else None
    with pytest.raises((ValueError, TypeError), match=message):
        clf.partial_fit(X[b == 1], y[b == 1], sample_weight=weights)
    clf.set_params(mechanism="local-gaussian", clip_norm=3.0, epsilon=1.0, delta=1e-5,
                   class_weight=None)
    after = {k: v for k, v in clf.__dict__.items()}
    assert pickle.dumps(after) == before


def test_shared_budget_counts_every_grid_candidate_and_refuses_overspend():
    X, y, g, b = _data(n_batches=6)
    budget = PrivacyBudget(epsilon=10.0, delta=7e-5)  # δ room for seven fits
    est = DWDClassifier(mechanism="local-gaussian", epsilon=1.0, clip_norm=4.0, random_state=0,
                        budget=budget, classes=[-1, 1])
    assert clone(est).budget is budget
    search = GridSearchCV(est, {"alpha": [1e-3, 1e-2]}, cv=3, error_score="raise")
    search.fit(X, y)
    entries = budget.ledger.entries
    assert len(entries) == 2 * 3 + 1  # 6 candidate fits + refit
    # seven identical Gaussian mechanisms compose exactly as one of μ√7
    sigma, sensitivity = entries[0].sigma, entries[0].sensitivity
    assert all((e.sigma, e.sensitivity) == (sigma, sensitivity) for e in entries)
    composed = gaussian_epsilon(sigma, 7e-5, math.sqrt(7) * sensitivity)
    assert budget.spent == pytest.approx((composed, 7e-5))
    assert composed < 7.0 / 2
    search = GridSearchCV(est, {"alpha": [1e-3, 1e-2]}, cv=3, error_score="raise")
    with pytest.raises(PrivacyBudgetError):  # δ is used up
        search.fit(X, y)
    assert budget.spent == pytest.approx((composed, 7e-5))
    # a refused fit leaves the estimator unfitted
    fresh = DWDClassifier(mechanism="local-gaussian", epsilon=5.0, clip_norm=4.0, budget=budget,
                          classes=[-1, 1])
    with pytest.raises(PrivacyBudgetError):
        fresh.fit(X, y)
    assert not [k for k in vars(fresh) if k.endswith("_")]


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_algorithm2_charges_every_batch_before_any_state(mechanism):
    """Each batch of Algorithm 2 is a release: one charge each, refused before
    anything changes, and ``privacy_spent_`` is the composed total charged."""
    X, y, g, b = _data(n_batches=5)
    delta = 0.0 if mechanism == "laplace" else 1e-5
    budget = PrivacyBudget(epsilon=2.0, delta=1e-3)
    clf = DWDClassifier(mechanism=mechanism, epsilon=0.5, clip_norm=4.0, budget=budget,
                        classes=[-1, 1])
    for k in range(4):
        m = b == k
        clf.partial_fit(X[m], y[m])
        assert len(budget.ledger) == k + 1
        assert clf.privacy_spent_ == pytest.approx(((k + 1) * 0.5, (k + 1) * delta))
        assert budget.spent == pytest.approx(clf.privacy_spent_)
    kinds = {e.mechanism for e in budget.ledger.entries}
    assert kinds == {"laplace" if mechanism == "laplace" else "approx"}
    assert budget.ledger.total() == pytest.approx(clf.privacy_spent_)
    # the fifth release would overspend: refused, nothing changes
    before = pickle.dumps(clf.__dict__)
    with pytest.raises(PrivacyBudgetError):
        clf.partial_fit(X[b == 4], y[b == 4])
    assert pickle.dumps(clf.__dict__) == before
    assert len(budget.ledger) == 4


@pytest.mark.parametrize("calibration", ["analytic", "classic", "zcdp"])
def test_local_gaussian_charges_one_exact_gaussian_entry_per_stream(calibration):
    """'local-gaussian' is one Gaussian mechanism over the stream (disjoint
    batches): one ledger entry with its σ and sensitivity, whose exact ε is
    what ``privacy_spent_`` claims."""
    X, y, g, b = _data(n_batches=5)
    budget = PrivacyBudget(epsilon=2.0, delta=1e-4)
    clf = DWDClassifier(mechanism="local-gaussian", epsilon=1.0, delta=1e-5, clip_norm=4.0,
                        budget=budget, classes=[-1, 1], online_steps=2,
                        calibration=calibration)
    for k in range(5):
        m = b == k
        clf.partial_fit(X[m], y[m], sample_group=g[m])
    (entry,) = budget.ledger.entries
    releases = local_gaussian_releases(1, 2, first=True)
    assert entry.mechanism == "gaussian"
    assert entry.sigma == local_gaussian_sigma(1.0, 1e-5, releases, calibration)
    assert entry.sensitivity == pytest.approx(math.sqrt(releases), rel=1e-15)
    exact = gaussian_epsilon(entry.sigma, 1e-5, entry.sensitivity)
    assert clf.privacy_spent_[0] == pytest.approx(exact, rel=1e-9)
    assert clf.privacy_spent_ == (entry.epsilon, entry.delta) == budget.spent
    if calibration == "analytic":
        assert clf.privacy_spent_ == (1.0, 1e-5)
    else:  # the conservative calibrations add more noise than (1, 1e-5) needs
        assert clf.privacy_spent_[0] < 1.0
    # every batch is calibrated to the same noise multiplier per unit of
    # sensitivity, so the first batch's entry covers the stream
    later = local_gaussian_sigma(1.0, 1e-5, local_gaussian_releases(1, 2, first=False),
                                 calibration)
    assert clf.noise_scale_ == later
    assert later / math.sqrt(local_gaussian_releases(1, 2, first=False)) == pytest.approx(
        entry.sigma / entry.sensitivity, rel=1e-9)


@pytest.mark.parametrize("change", [dict(mechanism="laplace"), dict(epsilon=5.0),
                                    dict(clip_norm=9.0), dict(mechanism=None)])
def test_privacy_settings_are_frozen_for_a_stream(change):
    X, y, g, b = _data()
    clf = DWDClassifier(mechanism="local-gaussian", clip_norm=4.0, random_state=0,
                        classes=[-1, 1])
    clf.partial_fit(X[b == 0], y[b == 0])
    before = pickle.dumps(clf.__dict__)
    clf.set_params(**change)
    with pytest.raises(ValueError, match="changed in the middle of a stream"):
        clf.partial_fit(X[b == 1], y[b == 1])
    clf.set_params(mechanism="local-gaussian", epsilon=1.0, clip_norm=4.0)
    assert pickle.dumps(clf.__dict__) == before
    clf.set_params(**change)
    clf.fit(X, y)  # fit starts a new stream with the new settings
