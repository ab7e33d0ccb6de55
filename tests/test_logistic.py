"""LogisticRegression (Algorithm 1 of Zhang, Zhu, Fay, Johansson): protocol,
stream, pickling, bad input and scikit-learn's estimator contract.

Privacy-specific tests (sensitivity by brute force, calibration, horizon)
are in ``test_logistic_privacy.py``.
"""

import pickle

import numpy as np
import pytest
from scipy.special import expit
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfedpriv.estimator_checks import expected_failed_checks
from skfedpriv.linear_model import BatchLearners
from skfedpriv.linear_model._logistic import LogisticRegression
from skfedpriv.linear_model._stream_position import StreamReplayError
from skfedpriv.privacy import as_generator
from skfedpriv.privacy import make_factorization


# the tests seed their noise on purpose
pytestmark = pytest.mark.filterwarnings("ignore::skfedpriv.privacy.SeededNoiseWarning")


# --------------------------------------------------------------------------
# a plain reference loop: local SGD + server averaging, one learner at a time
# --------------------------------------------------------------------------


def reference_round(theta, X, y, groups, classes, *, tau, eta, eta_g, B, alpha,
                    fit_intercept, feature_clip=None, noise=None, pending=None,
                    learner_order=None):
    """One round of Algorithm 1 written with plain loops (no vectorization).

    ``noise[label]`` is the learner's noise increment of this round (added to
    ``pending[label]``, sent and reset when the learner is present).
    """
    theta = theta.copy()
    K, p = theta.shape
    messages = []
    labels = learner_order if learner_order is not None else list(dict.fromkeys(groups))
    if noise is not None:
        for lab in labels:
            pending[lab] = pending.get(lab, 0.0) + noise[lab]
    for lab in labels:
        rows = [j for j in range(len(y)) if groups[j] == lab]
        if not rows:
            continue
        z = theta.copy()
        for chunk in np.array_split(np.array(rows, dtype=int), tau):
            if len(chunk) == 0:
                continue
            G = np.zeros_like(z)
            for j in chunk:
                x = np.array(X[j], dtype=float)
                if feature_clip is not None:
                    nx = np.sqrt(x @ x)
                    if nx > feature_clip:
                        x = x * (feature_clip / nx)
                if fit_intercept:  # x_bar = (1, x): intercept first
                    x = np.append(1.0, x)
                for k in range(K):
                    if K == 1:
                        s = 1.0 if y[j] == classes[1] else -1.0
                    else:
                        s = 1.0 if y[j] == classes[k] else -1.0
                    u = z[k] @ x
                    grad = -s * expit(-s * u) * x
                    norm = np.sqrt(grad @ grad)
                    bound = B / np.sqrt(K)
                    if norm > bound:
                        grad = grad * (bound / norm)
                    G[k] += grad / len(chunk)
            mask = np.ones(p)
            if fit_intercept:
                mask[0] = 0.0
            z = z - eta * (G + alpha * mask * z)
        g = (theta - z) / (eta * tau)
        if noise is not None:
            g = g + pending[lab].reshape(K, p)
            pending[lab] = 0.0
        messages.append(g)
    if messages:
        theta = theta - eta_g * eta * tau * np.mean(messages, axis=0)
    return theta


def make_stream(n_rounds, seed, d=3, n_classes=2, learners=("a", "b", "c")):
    rng = np.random.default_rng(seed)
    batches = []
    for r in range(n_rounds):
        # uneven counts, some learners absent, some with fewer rows than tau
        present = [lab for lab in learners if rng.random() < 0.8] or [learners[0]]
        groups = []
        for lab in present:
            groups += [lab] * int(rng.integers(1, 9))
        rng.shuffle(groups)
        n = len(groups)
        X = rng.normal(size=(n, d)) * 2.0
        y = rng.integers(0, n_classes, size=n)
        batches.append((X, y, np.array(groups)))
    return batches


def model(clf):
    return np.column_stack([clf.intercept_, clf.coef_]) if clf.fit_intercept \
        else clf.coef_


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize(
    "kw",
    [
        dict(local_steps=3, learning_rate=0.3, server_learning_rate=1.0),
        dict(local_steps=4, learning_rate=0.5, server_learning_rate=0.7,
             alpha=0.1, clip_norm=0.5),
        dict(local_steps=2, learning_rate=0.2, server_learning_rate=1.5,
             fit_intercept=False, feature_clip_norm=1.5),
    ],
)
def test_equals_reference_loop_without_noise(n_classes, kw):
    batches = make_stream(12, seed=n_classes, n_classes=n_classes)
    classes = np.arange(n_classes)
    clf = LogisticRegression(solver="local-steps", **kw)
    full = dict(local_steps=5, learning_rate=0.5, server_learning_rate=1.0,
                clip_norm=1.0, alpha=0.0, fit_intercept=True,
                feature_clip_norm=None)
    full.update(kw)
    K = 1 if n_classes == 2 else n_classes
    theta = np.zeros((K, 3 + full["fit_intercept"]))
    for X, y, groups in batches:
        clf.partial_fit(X, y, sample_group=groups, classes=classes)
        theta = reference_round(
            theta, X, y, list(groups), classes, tau=full["local_steps"],
            eta=full["learning_rate"], eta_g=full["server_learning_rate"],
            B=full["clip_norm"], alpha=full["alpha"],
            fit_intercept=full["fit_intercept"],
            feature_clip=full["feature_clip_norm"],
        )
        np.testing.assert_allclose(model(clf), theta, rtol=1e-10, atol=1e-12)
    assert clf.n_rounds_seen_ == len(batches)
    assert set(clf.learner_labels_) == {"a", "b", "c"}


@pytest.mark.parametrize("mechanism", ["independent", "tree", "toeplitz", "blt"])
def test_noise_added_as_in_algorithm_1(mechanism):
    """With noise: the reference loop fed the same noise increments agrees.

    Covers learners absent from rounds (their missed increments are sent on
    return) and a learner joining late (its own stream from its first round).
    """
    R, seed = 10, 7
    batches = make_stream(R, seed=3, learners=("a", "b"))
    X, y, g = batches[4]
    batches[4] = (np.vstack([X, X[:3]]), np.r_[y, y[:3]], np.r_[g, ["late"] * 3])
    kw = dict(local_steps=2, learning_rate=0.3, n_rounds=R, mechanism=mechanism,
              epsilon=1.0, delta=1e-3, feature_clip_norm=2.0, random_state=seed)
    clf = LogisticRegression(**kw)
    clf.partial_fit(*batches[0][:2], sample_group=batches[0][2], classes=[0, 1])
    sigma = clf.noise_scale_
    # rebuild the streams the estimator draws from: one Generator from the
    # seed, one stream per cohort of learners in order of first appearance
    rng = as_generator(seed)
    fact = make_factorization(mechanism, R)
    first = sorted(set(batches[0][2]))  # learner_labels_ order: sorted within a call
    streams = {"first": (first, fact.noise_stream(rng, sigma, (len(first), 4)))}
    pending = {}
    theta = np.zeros((1, 4))
    order = list(first)
    for r, (X, y, groups) in enumerate(batches):
        if r > 0:
            clf.partial_fit(X, y, sample_group=groups)
        new = [lab for lab in sorted(set(groups)) if lab not in order]
        if new:
            streams[r] = (new, fact.noise_stream(rng, sigma, (len(new), 4)))
            order += new
        noise = {}
        for labels, stream in streams.values():
            inc = stream.next()
            for i, lab in enumerate(labels):
                noise[lab] = inc[i]
        present = [lab for lab in order if lab in set(groups)]
        absent = [lab for lab in order if lab not in set(groups)]
        theta = reference_round(
            theta, X, y, list(groups), np.array([0, 1]), tau=2, eta=0.3,
            eta_g=1.0, B=1.0, alpha=0.0, fit_intercept=True, feature_clip=2.0,
            noise=noise, pending=pending, learner_order=present,
        )
        for lab in absent:
            pending[lab] = pending.get(lab, 0.0) + noise[lab]
        np.testing.assert_allclose(model(clf), theta, rtol=1e-9, atol=1e-10)


def test_fit_is_partial_fit_over_blocks():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(230, 4))
    y = (X[:, 0] + 0.3 * rng.normal(size=230) > 0).astype(int)
    groups = rng.integers(0, 4, size=230)
    R = 7
    a = LogisticRegression(n_rounds=R, local_steps=3, solver="local-steps").fit(
        X, y, sample_group=groups)
    b = LogisticRegression(n_rounds=R, local_steps=3, solver="local-steps")
    blocks = {lab: np.array_split(np.flatnonzero(groups == lab), R)
              for lab in np.unique(groups)}
    for r in range(R):
        rows = np.concatenate([blocks[lab][r] for lab in np.unique(groups)])
        b.partial_fit(X[rows], y[rows], sample_group=groups[rows], classes=[0, 1])
    np.testing.assert_allclose(model(a), model(b), rtol=1e-12, atol=1e-14)
    assert a.n_rounds_seen_ == R


@pytest.mark.parametrize("mechanism", [None, "independent", "tree", "toeplitz",
                                       "optimal", "blt"])
def test_pickle_mid_stream_resumes_identically(mechanism):
    batches = make_stream(10, seed=11)
    kw = dict(n_rounds=10, mechanism=mechanism, feature_clip_norm=1.0,
              learning_rate=0.5, random_state=5, delta=1e-3)
    clf = LogisticRegression(**kw)
    for X, y, g in batches[:4]:
        clf.partial_fit(X, y, sample_group=g, classes=[0, 1])
    clone = pickle.loads(pickle.dumps(clf))
    straight = LogisticRegression(**kw)  # the same seed, never pickled
    for X, y, g in batches[:4]:
        straight.partial_fit(X, y, sample_group=g, classes=[0, 1])
    for X, y, g in batches[4:]:
        clone.partial_fit(X, y, sample_group=g)
        straight.partial_fit(X, y, sample_group=g)
    np.testing.assert_array_equal(model(straight), model(clone))
    # a private stream continues on one copy only (#20, 5)
    if mechanism is None:
        clf.partial_fit(*batches[4][:2], sample_group=batches[4][2])
    else:
        with pytest.raises(StreamReplayError):
            clf.partial_fit(*batches[4][:2], sample_group=batches[4][2])


def test_seeded_private_fit_is_reproducible_and_noisy():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    kw = dict(n_rounds=20, mechanism="tree", feature_clip_norm=3.0,
              learning_rate=0.5, delta=1e-3, classes=[0, 1])
    a = LogisticRegression(random_state=0, **kw).fit(X, y)
    b = LogisticRegression(random_state=0, **kw).fit(X, y)
    c = LogisticRegression(random_state=1, **kw).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert not np.allclose(a.coef_, c.coef_)


def test_predict_proba_and_accuracy():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    clf = LogisticRegression(n_rounds=20).fit(X, y, sample_group=np.arange(len(y)) % 4)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(clf.classes_[proba.argmax(axis=1)], clf.predict(X))
    assert clf.score(X, y) > 0.95
    rng = np.random.default_rng(0)
    X3 = rng.normal(size=(300, 2)) + np.repeat([[0, 4], [4, 0], [-4, -4]], 100, axis=0)
    y3 = np.repeat(["u", "v", "w"], 100)
    perm = rng.permutation(300)
    clf3 = LogisticRegression(n_rounds=20).fit(X3[perm], y3[perm])
    p3 = clf3.predict_proba(X3)
    np.testing.assert_allclose(p3.sum(axis=1), 1.0)
    assert clf3.score(X3, y3) > 0.9


def test_feature_clipping_applies_at_prediction():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3)) * 10
    y = (X[:, 0] > 0).astype(int)
    clf = LogisticRegression(n_rounds=5, feature_clip_norm=1.0, solver="local-steps").fit(X, y)
    Xc = X * np.minimum(1.0, 1.0 / np.linalg.norm(X, axis=1))[:, None]
    np.testing.assert_allclose(clf.decision_function(X),
                               Xc @ clf.coef_.ravel() + clf.intercept_[0])


# --------------------------------------------------------------------------
# bad input leaves the estimator unchanged
# --------------------------------------------------------------------------


def _snapshot(clf):
    return pickle.dumps(clf.__dict__)


@pytest.mark.parametrize(
    "bad",
    [
        lambda X, y, g: (X[:, :2], y, g, None),            # wrong n_features
        lambda X, y, g: (X, np.full_like(y, 7), g, None),  # unseen label
        lambda X, y, g: (np.where(X > 0, np.nan, X), y, g, None),
        lambda X, y, g: (X, y, g[:-1], None),              # groups length
        lambda X, y, g: (X, y, g, [0, 1, 2]),               # classes changed
    ],
)
@pytest.mark.parametrize("mechanism", [None, "toeplitz"])
def test_bad_input_leaves_state_unchanged(bad, mechanism):
    batches = make_stream(3, seed=2)
    clf = LogisticRegression(n_rounds=5, mechanism=mechanism, feature_clip_norm=1.0,
                             random_state=0, delta=1e-3)
    X, y, g = batches[0]
    clf.partial_fit(X, y, sample_group=g, classes=[0, 1])
    before = _snapshot(clf)
    X, y, g = batches[1]
    Xb, yb, gb, classes = bad(X, y, g)
    with pytest.raises(ValueError):
        clf.partial_fit(Xb, yb, sample_group=gb, classes=classes)
    assert _snapshot(clf) == before
    # and the stream continues as if the bad call never happened
    ref = LogisticRegression(n_rounds=5, mechanism=mechanism, feature_clip_norm=1.0,
                             random_state=0, delta=1e-3)
    ref.partial_fit(*batches[0][:2], sample_group=batches[0][2], classes=[0, 1])
    clf.partial_fit(X, y, sample_group=g)
    ref.partial_fit(X, y, sample_group=g)
    np.testing.assert_array_equal(model(clf), model(ref))


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(local_steps=0), "local_steps"),
        (dict(learning_rate=-1.0), "learning_rate"),
        (dict(n_rounds=1.5), "n_rounds"),
        (dict(mechanism="gauss"), "mechanism"),
        (dict(mechanism="tree", epsilon=0.0), "epsilon"),
        (dict(mechanism="tree", delta=0.0), "delta"),
        (dict(clip_norm=0.0), "clip_norm"),
        (dict(feature_clip_norm=-1.0), "feature_clip_norm"),
        (dict(mechanism="tree", feature_clip_norm=2.0, learning_rate=1.7),
         "non-expansive"),
        (dict(mechanism="tree", learning_rate=1.0, alpha=3.0), "alpha"),
    ],
)
def test_bad_hyperparameters(params, match):
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = np.arange(20) % 2
    with pytest.raises(ValueError, match=match):
        LogisticRegression(**params).fit(X, y)


# --------------------------------------------------------------------------
# the default learning rate works with every valid feature_clip_norm
# --------------------------------------------------------------------------


def _private(**kw):
    return LogisticRegression(n_rounds=3, mechanism="tree", delta=1e-3, random_state=0,
                              classes=[0, 1], **kw)


@pytest.mark.parametrize("cx", [0.1, 1.0, 3.0, 6.0, 50.0])
@pytest.mark.parametrize("alpha, intercept", [(0.0, True), (0.3, False)])
def test_default_learning_rate_works_with_every_feature_clip_norm(cx, alpha, intercept):
    """The issue's example, LogisticRegression(mechanism='tree',
    feature_clip_norm=6.0), raised with the old default 0.5; 'auto' takes
    min(0.5, 2 / (L + alpha)), L = (C_x^2 + fit_intercept) / 4, from the
    hyperparameters alone."""
    X = np.random.default_rng(0).normal(size=(30, 3)) * 4
    y = np.arange(30) % 2
    clf = _private(feature_clip_norm=cx, alpha=alpha, fit_intercept=intercept).fit(X, y)
    bound = 2.0 / ((cx**2 + intercept) / 4.0 + alpha)
    assert clf.learning_rate_ == min(0.5, bound)
    assert clf.gradient_sensitivity_ == pytest.approx(2 * 1.0 / 5)  # the 2 B_g / tau regime
    # the value 'auto' chose is itself accepted explicitly, and is the same run
    explicit = _private(feature_clip_norm=cx, alpha=alpha, fit_intercept=intercept,
                        learning_rate=clf.learning_rate_).fit(X, y)
    np.testing.assert_array_equal(model(explicit), model(clf))


def test_default_learning_rate_without_row_clipping_keeps_the_penalty_contracting():
    X = np.random.default_rng(0).normal(size=(30, 3))
    y = np.arange(30) % 2
    assert _private(alpha=5.0).fit(X, y).learning_rate_ == 2.0 / 5.0
    with pytest.raises(ValueError, match="alpha"):  # an explicit 0.5 expands: refused
        _private(alpha=5.0, learning_rate=0.5).fit(X, y)


@pytest.mark.parametrize("kw", [
    dict(),                                        # not private
    dict(feature_clip_norm=6.0),                   # not private: no bound applies
    dict(feature_clip_norm=6.0, alpha=1.0, mechanism=None),
    dict(mechanism="tree", feature_clip_norm=1.0, delta=1e-3, random_state=0),
    dict(mechanism="toeplitz", alpha=0.1, delta=1e-3, random_state=0),
])
def test_auto_learning_rate_leaves_working_configurations_unchanged(kw):
    """Every configuration that ran with the old default 0.5 runs the same."""
    X = np.random.default_rng(1).normal(size=(40, 3)) * 2
    y = np.arange(40) % 2
    kw = dict(solver="local-steps", **kw)
    auto = LogisticRegression(n_rounds=4, classes=[0, 1], **kw).fit(X, y)
    old = LogisticRegression(n_rounds=4, classes=[0, 1], learning_rate=0.5, **kw).fit(X, y)
    assert auto.learning_rate_ == 0.5
    np.testing.assert_array_equal(model(auto), model(old))


def test_explicit_learning_rate_beyond_the_bound_still_raises():
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = np.arange(20) % 2
    clf = _private(feature_clip_norm=6.0, learning_rate=0.5)
    with pytest.raises(ValueError, match="non-expansive"):
        clf.fit(X, y)
    assert not hasattr(clf, "coef_")


# --------------------------------------------------------------------------
# learners from outside: fit_sites / partial_fit_sites
# --------------------------------------------------------------------------


def _learners(X, y, g, n_rounds=1):
    labels, codes = np.unique(g, return_inverse=True)
    return BatchLearners(X, y, labels, codes, n_rounds)


def test_fit_sites_is_fit_and_partial_fit_sites_is_partial_fit():
    batches = make_stream(4, seed=5)
    X = np.vstack([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    g = np.concatenate([b[2] for b in batches])
    kw = dict(n_rounds=4, local_steps=2, alpha=0.01, solver="local-steps")
    a = LogisticRegression(**kw).fit(X, y, sample_group=g)
    b = LogisticRegression(**kw).fit_sites(_learners(X, y, g, n_rounds=4))
    np.testing.assert_array_equal(model(a), model(b))
    assert list(a.learner_labels_) == list(b.learner_labels_)
    assert b.n_features_in_ == 3 and b.n_rounds_seen_ == 4
    c, d = LogisticRegression(**kw), LogisticRegression(**kw)
    for Xb, yb, gb in batches:
        c.partial_fit(Xb, yb, sample_group=gb, classes=[0, 1])
        d.partial_fit_sites(_learners(Xb, yb, gb), classes=[0, 1])
    np.testing.assert_array_equal(model(c), model(d))
    # the same checks: classes on the first call, then the same label set
    with pytest.raises(ValueError, match="first call"):
        LogisticRegression(**kw).partial_fit_sites(_learners(*batches[0]))
    with pytest.raises(ValueError, match="not the same"):
        d.partial_fit_sites(_learners(*batches[0]), classes=[0, 1, 2])


def test_fit_sites_refuses_learners_that_do_not_add_their_own_noise():
    X, y, g = make_stream(1, seed=2)[0]
    clf = _private(feature_clip_norm=1.0)
    with pytest.raises(ValueError, match="add their own noise"):
        clf.fit_sites(_learners(X, y, g, n_rounds=3))
    assert not [k for k in vars(clf) if k.endswith("_")]


def test_hyperparameter_change_mid_stream_is_refused():
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = np.arange(20) % 2
    clf = LogisticRegression(mechanism="tree", feature_clip_norm=1.0, delta=1e-3,
                             random_state=0).partial_fit(X, y, classes=[0, 1])
    before = _snapshot(clf)
    clf.set_params(epsilon=10.0)
    with pytest.raises(ValueError, match="changed"):
        clf.partial_fit(X, y)
    clf.set_params(epsilon=1.0)
    assert _snapshot(clf) == before


# --------------------------------------------------------------------------
# scikit-learn's contract
# --------------------------------------------------------------------------


@parametrize_with_checks(
    [
        LogisticRegression(),
        LogisticRegression(alpha=0.01, fit_intercept=False),
        LogisticRegression(solver="local-steps", local_steps=1, alpha=0.01, fit_intercept=False),
        LogisticRegression(mechanism="tree", feature_clip_norm=1.0, epsilon=50.0,
                           random_state=0, classes=[0, 1]),
    ],
    # the private instance fails some checks by design, declared with reasons
    expected_failed_checks=expected_failed_checks,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_a_round_that_fails_midway_leaves_the_noise_streams_unchanged(monkeypatch):
    """The noise streams are advanced on a copy, committed only on success
    (an exception after the noise is added must not leave the streams one
    round ahead of n_rounds_seen_)."""
    from skfedpriv.linear_model import _logistic

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 3)), rng.integers(0, 2, 60)
    sites = np.repeat([0, 1, 2], 20)
    est = LogisticRegression(mechanism="tree", n_rounds=4, feature_clip_norm=2.0,
                             classes=[0, 1], random_state=0)
    est.partial_fit(X[:40], y[:40], sample_group=sites[:40])
    noise = est._training_state.noise

    def streams(noise):  # what a round advances, without the shared generator
        return (dict(noise.index), noise.pending.copy(),
                [(start, end, stream.round_) for start, end, stream in noise.cohorts])

    before = streams(noise)

    def fail(*args, **kwargs):
        raise RuntimeError("the server fails after the noise was added")

    monkeypatch.setattr(_logistic, "_server_step", fail)
    with pytest.raises(RuntimeError):
        est.partial_fit(X, y, sample_group=sites)  # learner 2 is new
    assert est._training_state.noise is noise
    after = streams(noise)
    assert after[0] == before[0] and after[2] == before[2]
    np.testing.assert_array_equal(after[1], before[1])
    assert est.n_rounds_seen_ == 1
    monkeypatch.undo()
    for _ in range(3):  # every planned round still runs
        est.partial_fit(X, y, sample_group=sites)
    assert est.n_rounds_seen_ == 4


def test_fit_sites_refuses_labels_outside_the_declared_classes_as_fit_does():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 2)), np.array([0, 1, 2] * 10)
    codes = np.arange(30) % 3
    labels = np.array(["a", "b", "c"])
    est = LogisticRegression(n_rounds=2, classes=[0, 1])
    with pytest.raises(ValueError, match="not in classes"):
        est.fit(X, y, sample_group=labels[codes])
    with pytest.raises(ValueError, match="not in classes"):
        est.fit_sites(BatchLearners(X, y, labels, codes, 2, None))
    assert not hasattr(est, "classes_")
    ok = y < 2
    est.fit_sites(BatchLearners(X[ok], y[ok], labels, codes[ok], 2, None))
    with pytest.raises(ValueError, match="not in classes"):
        est.partial_fit_sites(BatchLearners(X, y, labels, codes, 1, None))
    with pytest.raises(ValueError, match="expecting 2 features"):
        est.partial_fit_sites(BatchLearners(X[ok][:, :1], y[ok], labels, codes[ok], 1, None))
    assert est.n_rounds_seen_ == 2
