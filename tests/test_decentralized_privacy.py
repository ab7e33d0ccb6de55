"""DecentralizedLogisticRegression: what it releases, and the audits that check it.

* Black-box audits (Clopper-Pearson lower bounds on ε from threshold tests
  on neighbouring datasets) of every released per-learner model, the
  averaged model and the difference of two learners' models.
* The label set is declared under privacy, never read from the data.
* The release holds only covered attributes; the training state resumes.
"""

import math
import pickle
import warnings

import numpy as np
import pytest
from scipy.stats import beta as beta_dist

from skfedpriv import PrivacyBudget
from skfedpriv.linear_model._base import ReleasedModelError, TrainingState
from skfedpriv.linear_model._decentralized import DecentralizedLogisticRegression as DLR
from skfedpriv.linear_model._stream_position import StreamReplayError
from skfedpriv.privacy import SeededNoiseWarning

pytestmark = pytest.mark.filterwarnings("ignore::skfedpriv.privacy.SeededNoiseWarning")

# -- black-box audit -----------------------------------------------------------


def _epsilon_lower_bound(sample_d, sample_d_prime, n_tests, confidence=0.05):
    """Largest Clopper-Pearson lower bound on ε over threshold tests.

    For every threshold ``t`` of a grid and both tails, the event
    ``{output > t}`` (or ``< t``) has probabilities ``p`` and ``p'`` under
    the two neighbours; (ε, 0)-DP needs ``p <= e^ε p'`` both ways. With
    ``k`` hits out of ``n`` runs, ``p`` is at least the lower and ``p'`` at
    most the upper Clopper-Pearson bound, each at level
    ``confidence / (2 n_tests)`` (Bonferroni over all tests of the audit).
    """
    level = confidence / (2 * n_tests)
    n = len(sample_d)
    pooled = np.concatenate([sample_d, sample_d_prime])
    grid = np.unique(np.quantile(pooled, np.linspace(0.02, 0.98, 25)))
    best = 0.0
    for a, b in ((sample_d, sample_d_prime), (sample_d_prime, sample_d)):
        for sign in (1.0, -1.0):
            for t in grid:
                k1 = int(np.sum(sign * a > sign * t))
                k2 = int(np.sum(sign * b > sign * t))
                p1_low = beta_dist.ppf(level, k1, n - k1 + 1) if k1 > 0 else 0.0
                p2_high = beta_dist.ppf(1 - level, k2 + 1, n - k2) if k2 < n else 1.0
                if p1_low > 0:
                    best = max(best, math.log(p1_low / p2_high))
    return best


def _n_tests():
    return 2 * 2 * 25  # both orders x both tails x thresholds, per statistic


_STATISTICS = ("coef_", "learner_coef_[0]", "learner_coef_[1]",
               "learner_coef_[0] - learner_coef_[1]")


def _statistics(est):
    """The released statistics audited: averaged model, each learner's, a difference."""
    lc = est.learner_coef_[:, 0, 0]
    return dict(zip(_STATISTICS, (est.coef_[0, 0], lc[0], lc[1], lc[0] - lc[1])))


# the neighbouring datasets: 2 learners, one feature, one row's label flipped
_X = np.array([[1.0], [-0.5], [0.8], [-1.0], [0.3], [0.9], [-0.7], [0.6], [1.0], [1.0],
               [0.4], [-0.2], [0.5], [-0.9], [0.7], [0.2]])
_Y = np.array([1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 1, 0, 1, 1, 0, 0])
_G = np.arange(len(_Y)) % 2

_AUDITS = {
    # PD-OGD, T = 5: the last row (learner 1, round 5) is flipped; on a
    # complete graph every learner mixes the same noisy messages, so before
    # the fix learner_coef_[0] - learner_coef_[1] was noise-free
    "ogd": (dict(solver="ogd"), 10, 9),
    # PD-FTGL / PD-OCG, T = 8, blocks of 2: the row of learner 0 in round 1
    # (block 1, whose gossiped sum is the first leaf of the trees)
    "ftgl": (dict(solver="ftgl", block_size=2, h=1.0), 16, 0),
    "ocg": (dict(solver="ocg", block_size=2, h=1.0), 16, 0),
}


def _audit_samples(params, n_rows, flipped, n_runs, seed):
    y_prime = _Y[:n_rows].copy()
    y_prime[flipped] = 1 - y_prime[flipped]
    samples = {}
    for name, y in (("d", _Y[:n_rows]), ("d_prime", y_prime)):
        rows = []
        for run in range(n_runs):
            est = DLR(topology="complete", mechanism="laplace", epsilon=1.0,
                      fit_intercept=False, classes=[0, 1],
                      random_state=seed * 100_003 + run, **params)
            est.fit(_X[:n_rows], y, sample_group=_G[:n_rows])
            rows.append(list(_statistics(est).values()))
        samples[name] = np.array(rows)
    return samples


@pytest.mark.parametrize("solver", ["ogd", "ftgl", "ocg"])
def test_audit_every_released_model_and_their_difference(solver):
    """Lower bounds on ε of every released statistic stay below the claimed ε = 1.

    Before the fix PD-OGD's learner_coef_[0] - learner_coef_[1] separated
    the two neighbours completely (lower bound 3.3 > 1 with these runs).
    """
    params, n_rows, flipped = _AUDITS[solver]
    samples = _audit_samples(params, n_rows, flipped, n_runs=300, seed=1)
    n_tests = _n_tests() * len(_STATISTICS)
    for k, name in enumerate(_STATISTICS):
        a, b = samples["d"][:, k], samples["d_prime"][:, k]
        assert np.std(a) > 0, f"{name} is not random"
        lower = _epsilon_lower_bound(a, b, n_tests)
        assert lower <= 1.0, f"{solver}: {name} leaks, ε >= {lower:.2f} > 1"


def test_audit_has_power_when_the_noise_is_cut(monkeypatch):
    """The same audit catches PD-OGD with its message noise cut 50-fold."""
    original = DLR._ogd_noise_scale.__func__

    def cut(cls, *args):
        return original(cls, *args) / 50.0

    monkeypatch.setattr(DLR, "_ogd_noise_scale", classmethod(cut))
    params, n_rows, flipped = _AUDITS["ogd"]
    samples = _audit_samples(params, n_rows, flipped, n_runs=300, seed=2)
    k = 3  # the difference of the two learners' models
    lower = _epsilon_lower_bound(samples["d"][:, k], samples["d_prime"][:, k],
                                 _n_tests() * len(_STATISTICS))
    assert lower > 1.0


def test_ogd_release_is_next_round_messages_with_independent_noise():
    """PD-OGD releases m_i = W_i + Lap(b_T) per learner, the messages round T+1 would send."""
    est = DLR(solver="ogd", topology="complete", mechanism="laplace", epsilon=1.0,
              fit_intercept=False, radius=10.0,
              classes=[0, 1], random_state=0).fit(_X[:10], _Y[:10], sample_group=_G[:10])
    st = est._training_state
    noise = st.messages - st.decisions
    assert np.all(noise != 0) and not np.allclose(noise[0], noise[1])
    W = st.messages
    np.testing.assert_array_equal(est.learner_coef_[:, 0, 0], W[:, 1, 0] - W[:, 0, 0])
    T, D = 5, 2
    b = DLR._ogd_noise_scale(T, T, D, 1.0, 10.0, 0.0, 1.0)
    # Δ_t = 2√D η_t G with η_t = R / (G √t)
    assert b == pytest.approx(T * 2 * math.sqrt(D) * 10.0 / math.sqrt(T) / 1.0)
    assert est.noise_scale_ == pytest.approx(DLR._ogd_noise_scale(1, T, D, 1.0, 10.0, 0.0, 1.0))
    # non-private: the message is the decision itself
    plain = DLR(solver="ogd", fit_intercept=False).fit(_X[:10], _Y[:10], sample_group=_G[:10])
    np.testing.assert_array_equal(plain._training_state.messages, plain._training_state.decisions)


def test_ogd_message_sensitivity_brute_force():
    """Given the same earlier messages, one replaced row moves only its learner's
    next message, by at most Δ_t = 2√D η_t (G + αR) in L1 (brute force)."""
    from skfedpriv.linear_model._conditional_gradient import project
    from skfedpriv.linear_model._decentralized import clipped_gradient_sum

    rng = np.random.default_rng(0)
    n, q, p1, G, R, alpha = 3, 3, 4, 0.7, 2.0, 0.3
    D = q * p1
    P = np.full((n, n), 1.0 / n)
    worst = 0.0
    for t in range(1, 40):
        sent = rng.normal(size=(n, q, p1)) * 3
        W = project(rng.normal(size=(n, q, p1)) * 3, "l2", R)
        W2 = W.copy()
        W2[1] = project(rng.normal(size=(1, q, p1)) * 3, "l2", R)[0]  # learner 1 differs
        X = rng.normal(size=(n, 1, p1)) * rng.choice([0.1, 10.0])
        X2 = X.copy()
        X2[1] = rng.normal(size=(1, p1)) * 10
        y = rng.integers(q, size=(n, 1))
        y2 = y.copy()
        y2[1] = rng.integers(q)
        mask = np.ones((n, 1), dtype=bool)
        eta = DLR._ogd_step(t, G + alpha * R, R, alpha)
        mixed = (P @ sent.reshape(n, -1)).reshape(sent.shape)
        new = project(mixed - eta * (clipped_gradient_sum(W, X, y, mask, G) + alpha * W), "l2", R)
        new2 = project(mixed - eta * (clipped_gradient_sum(W2, X2, y2, mask, G) + alpha * W2),
                       "l2", R)
        np.testing.assert_array_equal(new[[0, 2]], new2[[0, 2]])
        delta = 2 * math.sqrt(D) * eta * (G + alpha * R)
        change = np.abs(new[1] - new2[1]).sum()
        assert change <= delta + 1e-12
        assert DLR._ogd_noise_scale(t, 50, D, G, R, alpha, 2.0) == pytest.approx(50 * delta / 2.0)
        worst = max(worst, change / delta)
    assert worst > 0.1  # the bound is not vacuous


# -- the label set is public ---------------------------------------------------


def _blobs3(n=90):
    rng = np.random.default_rng(0)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, 2)) + np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.0]])[y]
    return X, y, np.arange(n) % 3


def _fitted_attributes(est):
    return sorted(k for k in vars(est) if k.endswith("_") and not k.startswith("_"))


def test_private_fit_requires_declared_classes_and_reads_none_from_the_data():
    X, y, g = _blobs3()
    budget = PrivacyBudget(10.0)
    est = DLR(mechanism="laplace", epsilon=1.0, budget=budget)
    with pytest.raises(ValueError, match="declared"):
        est.fit(X, y, sample_group=g)
    assert _fitted_attributes(est) == [] and budget.spent == (0.0, 0.0)
    # declared: a label the data lacks still has its row of coef_, so replacing
    # the only row of a class by another label changes neither classes_ nor shapes
    declared = DLR(mechanism="laplace", epsilon=1.0, classes=[0, 1, 2, 3], random_state=0)
    a = declared.fit(X, y, sample_group=g)
    assert a.classes_.tolist() == [0, 1, 2, 3] and a.coef_.shape == (4, 2)
    y_one = y.copy()
    y_one[5] = 3  # the only row with label 3
    b = DLR(mechanism="laplace", epsilon=1.0, classes=[0, 1, 2, 3], random_state=0).fit(
        X, y_one, sample_group=g)
    assert b.classes_.tolist() == a.classes_.tolist() and b.coef_.shape == a.coef_.shape
    # the first partial_fit may declare instead; it must agree with the hyperparameter
    DLR(mechanism="laplace", epsilon=1.0, n_rounds=40).partial_fit(
        X, y, sample_group=g, classes=[0, 1, 2])
    with pytest.raises(ValueError, match="differs"):
        DLR(mechanism="laplace", epsilon=1.0, n_rounds=40, classes=[0, 1, 2]).partial_fit(
            X, y, sample_group=g, classes=[0, 1, 2, 3])
    # without privacy fit infers the classes, as scikit-learn does
    assert DLR().fit(X, y, sample_group=g).classes_.tolist() == [0, 1, 2]


def test_undeclared_label_is_refused_before_any_change():
    X, y, g = _blobs3()
    budget = PrivacyBudget(10.0)
    y_bad = y.copy()
    y_bad[7] = 9
    fresh = DLR(mechanism="laplace", epsilon=1.0, classes=[0, 1, 2], budget=budget)
    with pytest.raises(ValueError, match="not in classes"):
        fresh.fit(X, y_bad, sample_group=g)
    assert _fitted_attributes(fresh) == [] and budget.spent == (0.0, 0.0)
    est = DLR(mechanism="laplace", epsilon=1.0, classes=[0, 1, 2], n_rounds=60, budget=budget,
              random_state=0)
    est.partial_fit(X[:45], y[:45], sample_group=g[:45])
    before = pickle.dumps(vars(est))
    for call in (lambda: est.partial_fit(X[45:], y_bad[45:] * 0 + 9, sample_group=g[45:]),
                 lambda: est.fit(X, y_bad, sample_group=g)):
        with pytest.raises(ValueError, match="not in classes"):
            call()
        assert pickle.dumps(vars(est)) == before
    assert budget.spent == (1.0, 0.0)


# -- the release and the training state ---------------------------------------

_RELEASED_ARRAYS = {"coef_", "intercept_", "learner_coef_", "learner_intercept_", "classes_",
                    "learner_labels_", "mixing_matrix_"}


def _walk(obj, path, found, seen):
    """Every ndarray, generator and TrainingState reachable from ``obj``, by path."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        found.append((path, obj))
    elif isinstance(obj, (np.random.Generator, np.random.BitGenerator, TrainingState)):
        found.append((path, obj))
    elif isinstance(obj, dict):
        for key, value in obj.items():
            _walk(value, f"{path}[{key!r}]", found, seen)
    elif isinstance(obj, (list, tuple, set)):
        for k, value in enumerate(obj):
            _walk(value, f"{path}[{k}]", found, seen)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        for key, value in vars(obj).items():
            _walk(value, f"{path}.{key}", found, seen)


def _reachable(obj):
    found = []
    _walk(obj, "est", found, set())
    return found


def _private_stream(solver, seed=0):
    X, y, g = _blobs3(n=120)
    est = DLR(solver=solver, topology="ring", block_size=4, h=1.0, mechanism="laplace",
              epsilon=2.0, n_rounds=40,
              classes=[0, 1, 2], random_state=seed)
    est.partial_fit(X[:60], y[:60], sample_group=g[:60])
    return est, X, y, g


@pytest.mark.parametrize("solver", ["ftgl", "ocg", "ogd"])
def test_release_holds_only_covered_arrays_and_predicts_identically(solver):
    est, X, y, g = _private_stream(solver)
    # the training object keeps all its secrets in one place
    outside = [p for p, _ in _reachable({k: v for k, v in vars(est).items()
                                         if k != "_training_state"})]
    assert {p.split("[")[1].strip("']") for p in outside} <= _RELEASED_ARRAYS
    released = pickle.loads(pickle.dumps(est.release()))
    found = _reachable(released)
    assert all(isinstance(obj, np.ndarray) for _, obj in found), found
    assert {p.split(".")[1] for p, _ in found} <= _RELEASED_ARRAYS
    for name in _RELEASED_ARRAYS:
        np.testing.assert_array_equal(getattr(released, name), getattr(est, name))
    for learner in (None, 0, 1, 2):
        for method in ("decision_function", "predict", "predict_proba"):
            np.testing.assert_array_equal(getattr(released, method)(X, learner=learner),
                                          getattr(est, method)(X, learner=learner))
    with pytest.raises(ReleasedModelError):
        released.partial_fit(X[60:], y[60:], sample_group=g[60:])
    assert not hasattr(released, "_training_state")
    released.fit(X, y, sample_group=g)  # a new stream is allowed
    assert hasattr(released, "_training_state")


@pytest.mark.parametrize("solver", ["ftgl", "ocg", "ogd"])
def test_training_pickle_resumes_bit_identically(solver):
    est, X, y, g = _private_stream(solver)
    resumed = pickle.loads(pickle.dumps(est))
    assert "secret" in repr(resumed._training_state)
    straight, *_ = _private_stream(solver)  # the same seed, never pickled
    for lo, hi in ((60, 90), (90, 120)):
        straight.partial_fit(X[lo:hi], y[lo:hi], sample_group=g[lo:hi])
        resumed.partial_fit(X[lo:hi], y[lo:hi], sample_group=g[lo:hi])
    np.testing.assert_array_equal(straight.learner_coef_, resumed.learner_coef_)
    np.testing.assert_array_equal(straight._training_state.decisions, resumed._training_state.decisions)
    assert straight.n_rounds_seen_ == resumed.n_rounds_seen_ == 40
    with pytest.raises(StreamReplayError):  # the stream continues on one copy (#20, 5)
        est.partial_fit(X[60:90], y[60:90], sample_group=g[60:90])


# -- budget and seeds -----------------------------------------------------------


def test_budget_charges_one_pure_laplace_spend_per_stream():
    X, y, g = _blobs3(n=120)
    budget = PrivacyBudget(5.0)
    est = DLR(mechanism="laplace", epsilon=1.5, n_rounds=40, classes=[0, 1, 2], budget=budget)
    for lo in range(0, 120, 30):
        est.partial_fit(X[lo:lo + 30], y[lo:lo + 30], sample_group=g[lo:lo + 30])
    DLR(solver="ogd", mechanism="laplace", epsilon=1.5, classes=[0, 1, 2], budget=budget).fit(
        X, y, sample_group=g)
    entries = budget.ledger.entries
    assert len(entries) == 2 and budget.spent == (3.0, 0.0)
    assert all(e.mechanism == "laplace" and e.epsilon == 1.5 and e.delta == 0.0
               for e in entries)


def test_seeded_private_stream_warns():
    X, y, g = _blobs3()
    with pytest.warns(SeededNoiseWarning, match="DecentralizedLogisticRegression"):
        DLR(mechanism="laplace", epsilon=1.0, classes=[0, 1, 2], random_state=0).fit(
            X, y, sample_group=g)
    with pytest.warns(SeededNoiseWarning):
        DLR(mechanism="laplace", epsilon=1.0, n_rounds=30, random_state=0).partial_fit(
            X, y, sample_group=g, classes=[0, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeededNoiseWarning)
        DLR(mechanism="laplace", epsilon=1.0, classes=[0, 1, 2]).fit(X, y, sample_group=g)
        DLR(random_state=0).fit(X, y, sample_group=g)


# -- the calibration module -------------------------------------------------------


def test_tree_laplace_calibration_and_draws():
    from skfedpriv._gossip import gossip_polynomial, gossip_theta, mixing_matrix
    from skfedpriv.privacy import TreeAggregator
    from skfedpriv.privacy._tree_laplace import (
        LaplaceNoise,
        leaf_sensitivity,
        ogd_noise_scale,
        tree_noise_scale,
    )

    P = mixing_matrix("ring", 5)
    M = gossip_polynomial(P, 3, gossip_theta(0.8))
    # the worst column of M: one learner's change reaches all leaves through it
    worst = max(np.abs(M[:, j]).sum() for j in range(5))
    assert leaf_sensitivity(M, 0.5, 12) == pytest.approx(2 * 0.5 * math.sqrt(12) * worst)
    for n_leaves in (1, 2, 7, 8, 100):
        levels = TreeAggregator(n_leaves).max_nodes_per_input
        assert tree_noise_scale(2.0, n_leaves, 3.0) == pytest.approx(levels * 3.0 / 2.0)
    # b_t = T Δ_t / ε with Δ_t = 2√D η_t (G + αR)
    assert ogd_noise_scale(0.1, 50, 8, 1.0, 2.0, 0.5, 4.0) == pytest.approx(
        50 * 2 * math.sqrt(8) * 0.1 * 2.0 / 4.0)
    # the draws are the generator's Laplace draws, and the noise pickles with it
    noise = LaplaceNoise(np.random.default_rng(3), 0.7)
    expected = np.random.default_rng(3).laplace(0.0, 0.7, size=(2, 3))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(noise))((2, 3)), expected)
    np.testing.assert_array_equal(noise((2, 3)), expected)
