"""DecentralizedLogisticRegression: PD-FTGL, PD-OCG, PD-OGD (Wang et al. 2025)."""

import math
import pickle

import numpy as np
import pytest
from sklearn.datasets import load_digits, make_blobs
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfedpriv._gossip import gossip_polynomial, mixing_matrix
from skfedpriv.linear_model._conditional_gradient import (
    conditional_gradient,
    lmo,
    project,
    quadratic_objective,
)
from skfedpriv.linear_model._decentralized import (
    DecentralizedLogisticRegression as DLR,
    clipped_gradient_sum,
)
from skfedpriv.privacy import PrivacyBudgetError, clip_vectors
from skfedpriv.privacy import TreeAggregator
from skfedpriv.privacy._tree_laplace import gradient_l1_bound

# fixed seeds make the tests reproducible; the warning they raise is tested below
pytestmark = pytest.mark.filterwarnings("ignore::skfedpriv.privacy.SeededNoiseWarning")


@parametrize_with_checks([DLR(), DLR(solver="ocg", constraint="trace"), DLR(solver="ogd")])
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _blobs(n=240, p=4, classes=3, seed=0):
    X, y = make_blobs(n_samples=n, n_features=p, centers=classes, random_state=seed)
    return StandardScaler().fit_transform(X), y


# --------------------------------------------------------------------------
# learning, API
# --------------------------------------------------------------------------


@pytest.mark.parametrize("solver", ["ftgl", "ocg", "ogd"])
@pytest.mark.parametrize("constraint", ["l2", "trace"])
def test_non_private_learns_digits(digits, solver, constraint):
    X, y = digits
    sites = np.arange(len(y)) % 4
    clf = DLR(topology="ring", solver=solver, constraint=constraint).fit(X, y, sample_group=sites)
    assert clf.score(X, y) > 0.8
    assert clf.learner_coef_.shape == (4, 10, 64)
    np.testing.assert_allclose(clf.learner_coef_.mean(axis=0), clf.coef_)
    np.testing.assert_allclose(clf.predict_proba(X[:5]).sum(axis=1), 1.0)


def test_learner_view_and_binary_shapes():
    X, y = _blobs(classes=2)
    g = np.array(["a", "b", "c"])[np.arange(len(y)) % 3]
    clf = DLR(topology="ring", block_size=5, h=1.0).fit(X, y, sample_group=g)
    assert clf.coef_.shape == (1, 4) and clf.learner_coef_.shape == (3, 1, 4)
    np.testing.assert_array_equal(clf.learner_labels_, ["a", "b", "c"])
    s_b = clf.decision_function(X, learner="b")
    np.testing.assert_allclose(s_b, X @ clf.learner_coef_[1, 0] + clf.learner_intercept_[1, 0])
    assert clf.predict(X, learner="b").shape == (len(y),)
    np.testing.assert_allclose(clf.predict_proba(X, learner="b")[:, 1], 1 / (1 + np.exp(-s_b)))
    with pytest.raises(ValueError, match="not one of the learners"):
        clf.predict(X, learner="zz")


@pytest.mark.parametrize("solver", ["ftgl", "ocg", "ogd"])
@pytest.mark.parametrize("mechanism", [None, "laplace"])
def test_fit_equals_partial_fit_stream(solver, mechanism):
    X, y = _blobs(n=300)
    g = np.arange(len(y)) % 3
    params = dict(solver=solver, topology="ring", block_size=6, h=2.0, n_rounds=100,
                  mechanism=mechanism, epsilon=2.0, random_state=3, classes=np.unique(y))
    a = DLR(**params).fit(X, y, sample_group=g)
    b = DLR(**params)
    for lo, hi in [(0, 30), (30, 75), (75, 120), (120, 201), (201, 300)]:
        chunk = np.arange(lo, hi)  # whole rounds: every learner gets one row each
        b.partial_fit(X[chunk], y[chunk], sample_group=g[chunk], classes=np.unique(y))
    np.testing.assert_allclose(a.learner_coef_, b.learner_coef_)
    assert a.n_rounds_seen_ == b.n_rounds_seen_ == 100


def test_fit_resets_state():
    X, y = _blobs()
    g = np.arange(len(y)) % 2
    a = DLR(block_size=4, h=1.0).fit(X, y, sample_group=g)
    b = DLR(block_size=4, h=1.0).fit(X[::-1], y[::-1], sample_group=g).fit(X, y, sample_group=g)
    np.testing.assert_allclose(a.learner_coef_, b.learner_coef_)


def test_learners_with_fewer_rows_sit_rounds_out():
    X, y = _blobs(n=200)
    g = np.where(np.arange(200) < 140, np.arange(200) % 2, 2)  # learner 2 has 60 rows
    clf = DLR(topology="ring", block_size=5, h=1.0).fit(X, y, sample_group=g)
    assert clf.n_rounds_seen_ == 70
    # a later batch may name a subset of the learners, not a new one
    clf.partial_fit(X[:10], y[:10], sample_group=np.zeros(10))
    assert clf.n_rounds_seen_ == 80
    with pytest.raises(ValueError, match="fixed by the first call"):
        clf.partial_fit(X[:10], y[:10], sample_group=np.full(10, 7))


def test_user_mixing_matrix():
    X, y = _blobs()
    g = np.arange(len(y)) % 4
    P = mixing_matrix("ring", 4)
    a = DLR(topology=P, block_size=4, h=1.0).fit(X, y, sample_group=g)
    b = DLR(topology="ring", block_size=4, h=1.0).fit(X, y, sample_group=g)
    np.testing.assert_allclose(a.learner_coef_, b.learner_coef_)
    with pytest.raises(ValueError, match="learners"):
        DLR(topology=P).fit(X, y, sample_group=np.arange(len(y)) % 3)
    bad = np.array([[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="positive semi-definite"):
        DLR(topology=bad).fit(X, y, sample_group=np.arange(len(y)) % 2)


@pytest.mark.parametrize(
    "params",
    [dict(solver="sgd"), dict(constraint="l1"), dict(radius=0), dict(clip_norm=-1),
     dict(alpha=-1), dict(h=0.0), dict(block_size=0), dict(n_rounds=2.5),
     dict(epsilon=0.0), dict(epsilon="1"), dict(epsilon=None), dict(mechanism="gaussian"),
     dict(topology="star")],
)
def test_bad_hyperparameters(params):
    X, y = _blobs(n=30)
    with pytest.raises(ValueError):
        DLR(**params).fit(X, y)


# --------------------------------------------------------------------------
# atomicity: bad input and the horizon
# --------------------------------------------------------------------------


def _snapshot(est):
    return pickle.dumps(est.__dict__)


def test_bad_input_leaves_state_unchanged():
    X, y = _blobs(n=120)
    g = np.arange(120) % 3
    clf = DLR(mechanism="laplace", epsilon=1.0, n_rounds=100, block_size=4, random_state=0)
    clf.partial_fit(X[:60], y[:60], sample_group=g[:60], classes=np.unique(y))
    before = _snapshot(clf)
    X_nan = X[60:].copy()
    X_nan[0, 0] = np.nan
    bad_calls = [
        (X_nan, y[60:], g[60:]),
        (X[60:, :3], y[60:], g[60:]),  # wrong n_features
        (X[60:], np.full(60, 99), g[60:]),  # unseen class
        (X[60:], y[60:], g[61:]),  # wrong sample_group length
        (X[60:], y[60:], np.full(60, 9)),  # unknown learner
    ]
    for Xb, yb, gb in bad_calls:
        with pytest.raises(ValueError):
            clf.partial_fit(Xb, yb, sample_group=gb)
        assert _snapshot(clf) == before
    with pytest.raises(ValueError, match="changed"):
        clf.set_params(epsilon=2.0).partial_fit(X[60:], y[60:], sample_group=g[60:])
    clf.set_params(epsilon=1.0)
    assert _snapshot(clf) == before


def test_an_interrupted_update_changes_nothing(monkeypatch):
    """_update works on a copy of the training state: a run that fails half-way
    (after some blocks) leaves the estimator as it was."""
    from skfedpriv.linear_model import _decentralized as module

    X, y = _blobs(n=120)
    g = np.arange(120) % 3
    clf = DLR(block_size=4, h=1.0)
    clf.partial_fit(X[:60], y[:60], sample_group=g[:60], classes=np.unique(y))
    before = _snapshot(clf)
    calls = []
    original = module.clipped_gradient_sum

    def fails_on_the_third_block(*args):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("interrupted")
        return original(*args)

    monkeypatch.setattr(module, "clipped_gradient_sum", fails_on_the_third_block)
    with pytest.raises(RuntimeError, match="interrupted"):
        clf.partial_fit(X[60:], y[60:], sample_group=g[60:])
    assert _snapshot(clf) == before


def test_exceeding_n_rounds_raises_before_any_change():
    X, y = _blobs(n=120)
    g = np.arange(120) % 2  # 60 rounds of data
    clf = DLR(mechanism="laplace", epsilon=1.0, n_rounds=40, block_size=4, random_state=0)
    clf.partial_fit(X[:60], y[:60], sample_group=g[:60], classes=np.unique(y))  # 30 rounds
    before = _snapshot(clf)
    with pytest.raises(PrivacyBudgetError):
        clf.partial_fit(X[60:84], y[60:84], sample_group=g[60:84])  # 12 more rounds
    assert _snapshot(clf) == before
    clf.partial_fit(X[60:80], y[60:80], sample_group=g[60:80])  # exactly 10
    assert clf.n_rounds_seen_ == 40 and clf.privacy_spent_ == (1.0, 0.0)
    with pytest.raises(PrivacyBudgetError):
        clf.partial_fit(X[80:82], y[80:82], sample_group=g[80:82])
    # fit past the horizon, and a private stream without a horizon
    with pytest.raises(PrivacyBudgetError):
        DLR(mechanism="laplace", epsilon=1.0, n_rounds=10, classes=[0, 1, 2]).fit(
            X, y, sample_group=g)
    with pytest.raises(ValueError, match="n_rounds"):
        DLR(mechanism="laplace", epsilon=1.0).partial_fit(X, y, classes=np.unique(y))
    assert DLR().fit(X, y).privacy_spent_ == (math.inf, 0.0)


# --------------------------------------------------------------------------
# clipping, tree, noise
# --------------------------------------------------------------------------


def test_clipped_gradient_sum_matches_materialized_clipping():
    rng = np.random.default_rng(0)
    n, m, q, p = 3, 7, 4, 5
    W = rng.normal(size=(n, q, p))
    X = rng.normal(size=(n, m, p)) * 3
    X[0, 0] = 0.0
    y = rng.integers(0, q, size=(n, m))
    mask = rng.random((n, m)) > 0.2
    logits = np.einsum("nqp,nmp->nmq", W, X)
    prob = np.exp(logits - logits.max(axis=2, keepdims=True))
    prob /= prob.sum(axis=2, keepdims=True)
    prob[np.arange(n)[:, None], np.arange(m), y] -= 1
    per_example = np.einsum("nmq,nmp->nmqp", prob, X) * mask[:, :, None, None]
    expected = clip_vectors(per_example.reshape(n * m, q, p), 0.7).reshape(n, m, q, p).sum(axis=1)
    got = clipped_gradient_sum(W, X, y, mask, 0.7)
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_tree_is_exact_with_noise_off():
    X, y = _blobs(n=300)
    g = np.arange(300) % 3
    clf = DLR(topology="ring", block_size=4, h=1.0, n_rounds=100)
    clf._trace_leaves = True
    clf.fit(X, y, sample_group=g)
    leaves = np.array([leaf for leaf, _ in clf._training_state.leaf_trace])
    released = np.array([z for _, z in clf._training_state.leaf_trace])
    assert len(leaves) == 100 // 4 - 1
    np.testing.assert_allclose(released, np.cumsum(leaves, axis=0), atol=1e-10)
    tree = clf._training_state.tree
    assert tree.horizon == 24
    bound = math.floor(math.log2(tree.horizon)) + 1
    assert all(tree.nodes_in_prefix(t) <= bound for t in range(1, tree.horizon + 1))
    # the final decision is eq. 6 applied to the exact prefix sum
    z = clf._training_state.block - 1
    eta = 2 * clf.h_
    np.testing.assert_allclose(clf._training_state.decisions, project(-released[-1] / eta, "l2", 10.0))
    assert z == 25


def test_tree_noise_variance_matches_nodes_used():
    X, y = _blobs(n=150, p=3)
    g = np.arange(150) % 3
    residuals = []
    for seed in range(12):
        clf = DLR(topology="complete", block_size=2, h=1.0, n_rounds=50,
                  mechanism="laplace", epsilon=5.0,
                  random_state=seed, classes=[0, 1, 2])
        clf._trace_leaves = True
        clf.fit(X, y, sample_group=g)
        leaves = np.array([leaf for leaf, _ in clf._training_state.leaf_trace])
        released = np.array([z for _, z in clf._training_state.leaf_trace])
        noise = released - np.cumsum(leaves, axis=0)
        tree = clf._training_state.tree
        for t in range(1, len(leaves) + 1):
            residuals.append(noise[t - 1].ravel() / math.sqrt(tree.nodes_in_prefix(t)))
    b = clf.noise_scale_
    var = np.var(np.concatenate(residuals))
    assert var == pytest.approx(2 * b**2, rel=0.15)  # Laplace(b) variance per node


@pytest.mark.parametrize("solver, topology", [("ftgl", "ring"), ("ocg", "grid"), ("ftgl", "complete")])
def test_replacing_one_row_moves_each_leaf_within_sensitivity(solver, topology):
    """Brute force over random neighbours (Appendix C, eq. 15 made exact)."""
    rng = np.random.default_rng(0)
    n, rounds, G = 4, 40, 0.5
    X, y = _blobs(n=n * rounds, p=3)
    g = np.arange(n * rounds) % n
    params = dict(solver=solver, topology=topology, block_size=4, h=0.5, clip_norm=G,
                  n_rounds=rounds)
    base = DLR(**params)
    base._trace_leaves = True
    base.fit(X, y, sample_group=g)
    leaves = np.array([leaf for leaf, _ in base._training_state.leaf_trace])
    D = 3 * (3 + 1)
    M = gossip_polynomial(base.mixing_matrix_, base.gossip_steps_, base.theta_)
    bound = gradient_l1_bound(G, D, n_classes=3)
    assert base.leaf_sensitivity_ == pytest.approx(2 * bound * np.abs(M).sum(0).max())
    worst = 0.0
    for _ in range(25):
        row = rng.integers(len(y))
        Xn, yn = X.copy(), y.copy()
        Xn[row] = rng.normal(size=3) * rng.choice([0.1, 10, 1000])
        yn[row] = rng.integers(3)
        other = DLR(**params)
        other._trace_leaves = True
        other.fit(Xn, yn, sample_group=g)
        leaves2 = np.array([leaf for leaf, _ in other._training_state.leaf_trace])
        j, tau = g[row], row // n  # learner and (0-based) round of the row
        block = tau // 4 + 1  # 1-based block; its leaf is leaf number `block`
        if block > len(leaves):
            continue  # the row's block never became a leaf
        np.testing.assert_array_equal(leaves[: block - 1], leaves2[: block - 1])
        diff = np.abs(leaves[block - 1] - leaves2[block - 1]).sum(axis=(1, 2))
        assert np.all(diff <= 2 * bound * np.abs(M[:, j]) + 1e-9)
        assert diff.sum() <= base.leaf_sensitivity_ + 1e-9
        worst = max(worst, diff.sum() / base.leaf_sensitivity_)
    assert worst > 0.2  # the bound is not vacuous


def test_noise_scale_calibration_and_theorem_3_6():
    X, y = _blobs(n=900, p=4)
    g = np.arange(900) % 9
    clf = DLR(mechanism="laplace", epsilon=2.0, random_state=0, classes=[0, 1, 2])
    clf.fit(X, y, sample_group=g)  # eq. 7 L
    T, D, G = 100, 3 * 5, 1.0
    n_leaves = T // clf.block_size_ - 1
    levels = TreeAggregator(n_leaves).max_nodes_per_input
    assert clf.noise_scale_ == pytest.approx(levels * clf.leaf_sensitivity_ / 2.0)
    # with eq. 7's L the joint sensitivity is ~2 x (the softmax gradient's L1
    # bound, below G√D) and the scale is below Theorem 3.6's
    assert clf.leaf_sensitivity_ == pytest.approx(2 * gradient_l1_bound(G, D, 3), rel=1e-6)
    assert clf.leaf_sensitivity_ < 2 * G * math.sqrt(D)
    assert clf.noise_scale_ <= 6 * math.sqrt(D) * G * (2 + math.log2(T)) / 2.0


# --------------------------------------------------------------------------
# conditional gradient over the trace-norm ball (Algorithm 4)
# --------------------------------------------------------------------------


def _trace_norm(W):
    return np.linalg.svd(W, compute_uv=False).sum(axis=-1)


def test_trace_lmo_is_top_singular_pair_times_radius():
    rng = np.random.default_rng(0)
    G = rng.normal(size=(5, 6, 4))
    V = lmo(G, "trace", 3.0)
    for Gi, Vi in zip(G, V):
        # independent: top singular pair by power iteration on GᵀG
        v = rng.normal(size=4)
        for _ in range(500):
            v = Gi.T @ (Gi @ v)
            v /= np.linalg.norm(v)
        u = Gi @ v / np.linalg.norm(Gi @ v)
        np.testing.assert_allclose(Vi, -3.0 * np.outer(u, v), atol=1e-8)
        sigma1 = np.linalg.norm(Gi, 2)
        assert np.sum(Gi * Vi) == pytest.approx(-3.0 * sigma1)
        # no point of the ball does better (duality of trace and spectral norms)
        for _ in range(20):
            R = rng.normal(size=(6, 4))
            R *= 3.0 / _trace_norm(R) * rng.random()
            assert np.sum(Gi * R) >= np.sum(Gi * Vi) - 1e-10
    np.testing.assert_allclose(lmo(np.zeros((1, 2, 2)), "trace", 1.0), 0.0)


def test_trace_projection_is_nearest_point():
    rng = np.random.default_rng(1)
    W = rng.normal(size=(4, 5, 3)) * 3
    Pw = project(W, "trace", 2.0)
    assert np.all(_trace_norm(Pw) <= 2.0 + 1e-9)
    for Wi, Pi in zip(W, Pw):
        for _ in range(50):  # variational inequality <W - Π(W), V - Π(W)> <= 0
            V = rng.normal(size=(5, 3))
            V *= 2.0 / _trace_norm(V) * rng.random()
            assert np.sum((Wi - Pi) * (V - Pi)) <= 1e-9
    inside = W / (_trace_norm(W)[:, None, None]) * 1.5
    np.testing.assert_allclose(project(inside, "trace", 2.0), inside, atol=1e-12)


@pytest.mark.parametrize("constraint", ["trace", "l2"])
def test_cg_iterates_feasible_and_objective_decreases(constraint):
    rng = np.random.default_rng(2)
    linear = rng.normal(size=(3, 6, 4)) * 10
    eta = 1.5
    X = np.zeros((3, 6, 4))
    norm = _trace_norm if constraint == "trace" else (lambda W: np.linalg.norm(W, axis=(1, 2)))
    values = [quadratic_objective(X, linear, eta)]
    for _ in range(60):
        X = conditional_gradient(X, linear, eta, 1, constraint, 2.0)
        assert np.all(norm(X) <= 2.0 + 1e-9)
        values.append(quadratic_objective(X, linear, eta))
    values = np.array(values)
    assert np.all(np.diff(values, axis=0) <= 1e-10)
    # converges to the exact minimizer Π_K(-linear/eta) (Lemma H.2 rate)
    best = project(-linear / eta, constraint, 2.0)
    gap = values[-1] - quadratic_objective(best, linear, eta)
    assert np.all(gap >= -1e-9) and np.all(gap <= 8 * eta * 4.0 / 62 + 1e-9)


def test_shared_budget_counts_every_private_fit_and_refuses_overspend():
    from sklearn.base import clone

    from skfedpriv import DecentralizedLogisticRegression as Public
    from skfedpriv import PrivacyBudget, PrivacyBudgetError

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] > 0).astype(int)
    groups = np.arange(120) % 3
    budget = PrivacyBudget(epsilon=2.5)
    est = Public(mechanism="laplace", epsilon=1.0, random_state=0, budget=budget, classes=[0, 1])
    assert clone(est).budget is budget
    est.fit(X, y, sample_group=groups)
    clone(est).fit(X, y, sample_group=groups)
    assert budget.spent == (2.0, 0.0)
    refused = clone(est)
    with pytest.raises(PrivacyBudgetError):
        refused.fit(X, y, sample_group=groups)
    assert not [k for k in vars(refused) if k.endswith("_")] and budget.spent == (2.0, 0.0)
    Public(budget=budget).fit(X, y, sample_group=groups)  # non-private: no spend
    assert budget.spent == (2.0, 0.0)


def test_softmax_loss_gradient_curvature_and_probabilities():
    from skfedpriv._losses import (
        softmax_curvature_bound,
        softmax_gradient,
        softmax_loss,
        softmax_probabilities,
    )

    rng = np.random.default_rng(0)
    scores = rng.normal(size=(6, 4)) * 3
    y = rng.integers(0, 4, size=6)
    step = 1e-6
    numeric = np.empty_like(scores)
    for k in range(4):
        e = np.zeros(4)
        e[k] = step
        numeric[:, k] = (softmax_loss(scores + e, y) - softmax_loss(scores - e, y)) / (2 * step)
    np.testing.assert_allclose(softmax_gradient(scores, y), numeric, atol=1e-7)
    p = softmax_probabilities(scores)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    np.testing.assert_allclose(softmax_probabilities(scores, log=True), np.log(p))
    hessians = np.einsum("nk,kl->nkl", p, np.eye(4)) - np.einsum("nk,nl->nkl", p, p)
    assert np.linalg.eigvalsh(hessians).max() <= softmax_curvature_bound() + 1e-12
    half = softmax_probabilities(np.array([0.0]))  # two classes at even odds
    np.testing.assert_allclose(half, [[0.5, 0.5]])
    np.testing.assert_allclose(softmax_loss(np.array([[0.0, 0.0]]), np.array([1])), np.log(2))
