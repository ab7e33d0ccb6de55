"""LogisticRegression under issue 10: the declared label set, the release
(what may be published) versus the training state (what continues the
stream), the budget charge and the seeded-noise warning."""

import math
import pickle
import warnings

import numpy as np
import pytest

from skfedpriv.linear_model._base import ReleasedModelError, TrainingState
from skfedpriv.linear_model._logistic import LogisticRegression
from skfedpriv.linear_model._stream_position import StreamReplayError
from skfedpriv.privacy import (
    NoiseDominatesWarning,
    PrivacyBudget,
    PrivacyBudgetError,
    SeededNoiseWarning,
    gaussian_epsilon,
)
from skfedpriv.privacy import NoiseStream, PrefixSumFactorization

pytestmark = pytest.mark.filterwarnings("ignore::skfedpriv.privacy.SeededNoiseWarning")

MECHANISMS = [None, "independent", "tree", "honaker", "toeplitz", "optimal", "blt"]


def private(**kw):
    base = dict(n_rounds=6, local_steps=2, learning_rate=0.5, mechanism="toeplitz",
                epsilon=1.0, delta=1e-3, feature_clip_norm=1.0, solver="local-steps")
    base.update(kw)
    if base.get("classes", 0) is None:
        del base["classes"]  # the default
    return LogisticRegression(**base)


def data(n=60, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int)
    groups = np.arange(n) % 3
    return X, y, groups


# --------------------------------------------------------------------------
# 2. the label set is declared under a mechanism
# --------------------------------------------------------------------------


def _outcome(est, X, y, groups):
    """What a neighbour sees of a fit: a refusal, or the label set and model shape."""
    try:
        est.fit(X, y, sample_group=groups)
    except ValueError:
        return "refused"
    return est.classes_.tolist(), est.coef_.shape


@pytest.mark.parametrize("classes", [None, [0, 1]])
def test_row_with_an_unseen_label_does_not_change_the_release_shape(classes):
    """Replacing one row by a row with a new label (issue 10, point 2).

    On the old code ``classes_ = np.unique(y)``: the neighbour's fit had three
    classes and a (3, d) ``coef_`` against (1, d), deterministically.
    """
    X, y, groups = data()
    y2 = y.copy()
    y2[7] = 2
    a = _outcome(private(classes=classes, random_state=0), X, y, groups)
    b = _outcome(private(classes=classes, random_state=0), X, y2, groups)
    if classes is None:  # nothing declared: both refused, no release at all
        assert a == b == "refused"
    else:  # declared: the same label set and shape, or a refusal
        assert a == ([0, 1], (1, 3)) and b == "refused"


def test_private_fit_needs_declared_classes_and_changes_nothing():
    X, y, groups = data()
    budget = PrivacyBudget(10.0, 1e-2)
    est = private(budget=budget, random_state=0)
    with pytest.raises(ValueError, match="label set must be declared"):
        est.fit(X, y, sample_group=groups)
    assert not [k for k in vars(est) if k.endswith("_")]
    assert not hasattr(est, "_training_state")
    assert budget.spent == (0.0, 0.0) and len(budget.ledger) == 0
    # declared through the first partial_fit instead
    est.partial_fit(X, y, sample_group=groups, classes=[0, 1])
    assert est.classes_.tolist() == [0, 1]


def test_undeclared_label_refused_before_any_change():
    X, y, groups = data()
    budget = PrivacyBudget(10.0, 1e-2)
    est = private(classes=[0, 1], budget=budget, random_state=0).fit(X, y, sample_group=groups)
    before = pickle.dumps(est.__dict__)
    spent = budget.spent
    y2 = y.copy()
    y2[3] = 5
    with pytest.raises(ValueError, match="not in classes"):
        est.fit(X, y2, sample_group=groups)
    assert pickle.dumps(est.__dict__) == before
    assert budget.spent == spent  # refused before the spend
    stream = private(classes=[0, 1], random_state=0)
    stream.partial_fit(X[:20], y[:20], sample_group=groups[:20])
    before = pickle.dumps(stream.__dict__)
    with pytest.raises(ValueError, match="not in classes"):
        stream.partial_fit(X[20:40], y2[:20], sample_group=groups[20:40])
    with pytest.raises(ValueError, match="differs from the classes hyperparameter"):
        stream.partial_fit(X[20:40], y[20:40], sample_group=groups[20:40], classes=[0, 1, 2])
    assert pickle.dumps(stream.__dict__) == before


def test_declared_classes_without_a_mechanism_and_scikit_learn_inference():
    X, y, groups = data()
    # without a mechanism and without classes: inferred from y, as scikit-learn
    plain = LogisticRegression(n_rounds=3).fit(X, np.where(y == 1, "b", "a"))
    assert plain.classes_.tolist() == ["a", "b"]
    # a declared label set is used even when y shows only some of it
    declared = LogisticRegression(n_rounds=3, classes=[0, 1, 2]).fit(X, y)
    assert declared.classes_.tolist() == [0, 1, 2] and declared.coef_.shape == (3, 3)
    assert declared.get_params()["classes"] == [0, 1, 2]  # stored unchanged


# --------------------------------------------------------------------------
# 3. release versus training state
# --------------------------------------------------------------------------

ALLOWED_ARRAYS = {"coef_", "intercept_", "classes_", "learner_labels_", "feature_names_in_"}
FORBIDDEN_TYPES = (np.random.Generator, np.random.BitGenerator, np.random.RandomState,
                   NoiseStream, PrefixSumFactorization, TrainingState)


def _walk(obj, path, seen, found):
    """Every (path, object) reachable from ``obj`` through containers and attributes."""
    if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None), type)):
        return
    seen.add(id(obj))
    found.append((path, obj))
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            for i, item in enumerate(obj.ravel()):
                _walk(item, f"{path}[{i}]", seen, found)
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            _walk(key, f"{path}.<key>", seen, found)
            _walk(value, f"{path}[{key!r}]", seen, found)
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        for i, item in enumerate(obj):
            _walk(item, f"{path}[{i}]", seen, found)
        return
    if hasattr(obj, "__dict__"):
        for key, value in vars(obj).items():
            _walk(value, f"{path}.{key}", seen, found)
    for key in getattr(type(obj), "__slots__", ()):
        if hasattr(obj, key):
            _walk(getattr(obj, key), f"{path}.{key}", seen, found)


def _reachable(obj):
    found = []
    _walk(obj, "est", set(), found)
    return found


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("random_state", [None, 3])
def test_release_pickle_holds_only_the_covered_arrays(mechanism, random_state):
    X, y, groups = data()
    budget = PrivacyBudget(10.0, 1e-2)
    est = private(mechanism=mechanism, classes=[0, 1], random_state=random_state,
                  budget=budget).fit(X, y, sample_group=groups)
    released = pickle.loads(pickle.dumps(est.release()))
    arrays = [path for path, obj in _reachable(released) if isinstance(obj, np.ndarray)]
    assert {p.split(".")[1].split("[")[0] for p in arrays} <= ALLOWED_ARRAYS, arrays
    assert not [p for p, obj in _reachable(released) if isinstance(obj, FORBIDDEN_TYPES)]
    # the training object does hold them (so the walk does look)
    secret = [p for p, obj in _reachable(est) if isinstance(obj, FORBIDDEN_TYPES)]
    assert secret and all(p.startswith(("est._training_state", "est.random_state"))
                          for p in secret)
    # it predicts identically
    for method in ("predict", "decision_function", "predict_proba", "score"):
        args = (X, y) if method == "score" else (X,)
        np.testing.assert_array_equal(getattr(released, method)(*args),
                                      getattr(est, method)(*args))
    assert released.privacy_spent_ == est.privacy_spent_
    params = {k: v for k, v in est.get_params().items() if k not in ("budget", "random_state")}
    assert {k: released.get_params()[k] for k in params} == params
    assert released.random_state is None  # a seed would regenerate the noise (#20, 6)


def test_release_cannot_continue_but_can_start_a_new_stream():
    X, y, groups = data()
    est = private(classes=[0, 1], random_state=0)
    est.partial_fit(X[:30], y[:30], sample_group=groups[:30])
    released = est.release()
    before = pickle.dumps(released.__dict__)
    with pytest.raises(ReleasedModelError):
        released.partial_fit(X[30:], y[30:], sample_group=groups[30:])
    assert pickle.dumps(released.__dict__) == before
    est.partial_fit(X[30:], y[30:], sample_group=groups[30:])  # the training object continues
    assert est.n_rounds_seen_ == 2
    released.fit(X, y, sample_group=groups)  # fit starts a new stream
    assert released.n_rounds_seen_ == 6 and hasattr(released, "_training_state")


@pytest.mark.parametrize("mechanism", ["independent", "tree", "toeplitz", "optimal", "blt"])
def test_unseeded_training_pickle_resumes_bit_identically(mechanism):
    """The generator drawn from OS entropy lives in the training state and pickles with it."""
    X, y, groups = data(n=90)
    est = private(mechanism=mechanism, classes=[0, 1], random_state=None)
    blocks = np.array_split(np.arange(90), 6)
    for rows in blocks[:2]:
        est.partial_fit(X[rows], y[rows], sample_group=groups[rows])
    copy = pickle.loads(pickle.dumps(est))
    # the copy holds the same stream, generator state included, bit for bit
    assert pickle.dumps(copy._training_state) == pickle.dumps(est._training_state)
    for rows in blocks[2:]:
        copy.partial_fit(X[rows], y[rows], sample_group=groups[rows])
    assert copy.n_rounds_seen_ == 6
    # and the stream continues on that one copy only (#20, 5)
    before = pickle.dumps(est.__dict__)
    with pytest.raises(StreamReplayError):
        est.partial_fit(X[blocks[2]], y[blocks[2]], sample_group=groups[blocks[2]])
    assert pickle.dumps(est.__dict__) == before


def _noise_total_from_state(obj):
    """The attacker of issue 10: sum of the noise increments a Toeplitz stream sent.

    ``_HistoryStream`` keeps every draw ``z_s`` and the coefficients of
    ``C^{-1}``; the increment of round r is ``sum_{s<=r} D[r-s] z_s``.
    Returns None when the object holds no such stream.
    """
    streams = [o for _, o in _reachable(obj) if isinstance(o, NoiseStream)]
    if not streams:
        return None
    (stream,) = streams
    z = stream._history[: stream.round_]
    coef = stream._toeplitz
    return sum(np.tensordot(coef[r::-1], z[: r + 1], axes=(0, 0)) for r in range(stream.round_))


def test_attack_reads_a_label_from_the_training_object_not_from_the_release():
    """One learner, one row, ``random_state=None``: the training object's noise
    stream gives back the exact clipped gradient (hence the label); the release
    holds no stream to read."""
    x = np.array([[0.3, -0.2]])
    kw = dict(n_rounds=1, local_steps=1, learning_rate=0.5, mechanism="toeplitz",
              epsilon=1.0, delta=1e-5, feature_clip_norm=1.0, classes=[0, 1])
    step = 1.0 * 0.5 * 1  # eta_g * eta * tau
    for label in (0, 1):
        est = LogisticRegression(random_state=None, **kw).fit(x, [label])
        stolen = pickle.loads(pickle.dumps(est))
        noise = _noise_total_from_state(stolen)
        model = np.r_[stolen.intercept_, stolen.coef_.ravel()]  # intercept first
        g = -model / step - noise.ravel()  # exact g of the one row, noise removed
        clean = LogisticRegression(**{**kw, "mechanism": None, "solver": "local-steps"}).fit(
            x, [label])
        np.testing.assert_allclose(-g * step, np.r_[clean.intercept_, clean.coef_.ravel()],
                                   atol=1e-9)
        assert (g[0] < 0) == (label == 1)  # the intercept gradient's sign is the label
        # the release: nothing to read
        published = pickle.loads(pickle.dumps(est.release()))
        assert _noise_total_from_state(published) is None
        assert not hasattr(published, "_training_state")


# --------------------------------------------------------------------------
# 5. the budget charge
# --------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["independent", "tree", "toeplitz", "blt"])
def test_budget_entry_is_the_stream_gaussian_mechanism(mechanism):
    X, y, groups = data()
    budget = PrivacyBudget(10.0, 1e-2)
    est = private(mechanism=mechanism, classes=[0, 1], random_state=0, budget=budget)
    est.fit(X, y, sample_group=groups)
    (entry,) = budget.ledger.entries
    assert entry.mechanism == "gaussian"
    assert entry.sigma == est.noise_scale_ and entry.sensitivity == est.sensitivity_
    assert (entry.epsilon, entry.delta) == est.privacy_spent_
    # the exact epsilon of that Gaussian is the claimed one
    exact = gaussian_epsilon(entry.sigma, entry.delta, entry.sensitivity)
    assert exact == pytest.approx(est.privacy_spent_[0], rel=1e-6)
    assert exact <= est.privacy_spent_[0] * (1 + 1e-12)
    # a partial_fit stream: one entry for all its rounds
    stream = private(mechanism=mechanism, classes=[0, 1], random_state=0, budget=budget)
    for rows in np.array_split(np.arange(60), 3):
        stream.partial_fit(X[rows], y[rows], sample_group=groups[rows])
    assert len(budget.ledger) == 2
    # two identical streams compose as one Gaussian of mu * sqrt(2)
    eps_total, delta_total = budget.ledger.total()
    mu = est.sensitivity_ / est.noise_scale_
    assert delta_total == pytest.approx(2e-3)
    assert eps_total == pytest.approx(
        min(2.0, gaussian_epsilon(1.0, 2e-3, mu * math.sqrt(2))), rel=1e-6)


def test_refused_charge_changes_nothing():
    X, y, groups = data()
    budget = PrivacyBudget(0.5, 1e-2)
    est = private(classes=[0, 1], random_state=0, budget=budget)
    with pytest.raises(PrivacyBudgetError):
        est.fit(X, y, sample_group=groups)
    assert not [k for k in vars(est) if k.endswith("_")]
    assert len(budget.ledger) == 0


# --------------------------------------------------------------------------
# 5c. a fixed seed under a mechanism warns when the stream starts
# --------------------------------------------------------------------------


@pytest.mark.filterwarnings("error::skfedpriv.privacy.SeededNoiseWarning")
def test_seeded_private_stream_warns_once_at_its_start():
    X, y, groups = data()
    with pytest.warns(SeededNoiseWarning, match="random_state=4"):
        private(classes=[0, 1], random_state=4).fit(X, y, sample_group=groups)
    stream = private(classes=[0, 1], random_state=4)
    with pytest.warns(SeededNoiseWarning):
        stream.partial_fit(X[:20], y[:20], sample_group=groups[:20])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # these small streams warn that noise dominates (a different warning)
        warnings.simplefilter("ignore", NoiseDominatesWarning)
        stream.partial_fit(X[20:40], y[20:40], sample_group=groups[20:40])  # not again
        private(classes=[0, 1], random_state=None).fit(X, y, sample_group=groups)
        LogisticRegression(n_rounds=3, random_state=4).fit(X, y)  # no mechanism
