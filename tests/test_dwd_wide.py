"""Wide rows (issue #23): the L-BFGS phase before the Newton steps reaches
the same optimum as an independent solver, forms the curvature matrix once
(at the returned point: the renewable state), and a stream continues from
that state as from the Newton steps' own."""

import types

import numpy as np
import pytest
from _reference import gendwd_objective
from scipy.optimize import minimize
from test_dwd_bundled import _models
from test_dwd_solver import _count_curvature_matrices

from skfedpriv import DWDClassifier
from skfedpriv._losses import gendwd_smoothed_curvature
from skfedpriv.datasets import make_federated_gaussians
from skfedpriv.linear_model import _dwd_solver, _newton
from skfedpriv.linear_model._quasi_newton import LBFGSPhase

ALPHA = 1e-3


def _wide(n, p, seed=0, n_classes=2):
    """Non-separable wide rows: the paper's Gaussian classes at the mean
    offset 0.2 sqrt(50 / p) (benchmarks' wide part), 3 sites; with more
    classes, the label is the class of the nearer of shifted means."""
    X, y, g, batch = make_federated_gaussians(
        n_sites=3, n_batches=max(n // 30, 1), n_per_batch=10, n_features=p,
        mu=0.2 * np.sqrt(50.0 / p), random_state=seed)
    if n_classes > 2:
        y = np.random.default_rng(seed).integers(0, n_classes, len(y))
        X = X + 0.3 * np.sqrt(50.0 / p) * (y[:, None] == np.arange(p) % n_classes)
    return X, y, g, batch


def _check_optimum(clf, X, y, q):
    """Per model: relative gap <= 1e-10 against L-BFGS-B on the same
    objective, the stopping rule on the kept curvature, and the kept
    curvature the smoothed one (plus ridge) at the returned point."""
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    weights = np.ones(len(X))
    ridge = np.diag(ALPHA * len(X) * np.r_[0.0, np.ones(X.shape[1])])
    for k, (theta, labels) in enumerate(_models(clf, y)):
        args = (Xbar, labels, weights, q, ALPHA)
        value, grad = gendwd_objective(theta, *args)
        reference = minimize(gendwd_objective, np.zeros_like(theta), args=args, jac=True,
                             method="L-BFGS-B",
                             options=dict(gtol=1e-12, ftol=1e-16, maxiter=5000, maxcor=20))
        assert value <= reference.fun * (1 + 1e-10)
        d = gendwd_smoothed_curvature(labels * (Xbar @ theta), q)
        expected = Xbar.T @ (d[:, None] * Xbar) + ridge
        np.testing.assert_allclose(clf.curvature_[k], expected, rtol=1e-9, atol=1e-8)
        assert 0.5 * grad @ np.linalg.solve(expected, grad) <= clf.tol * value


@pytest.mark.parametrize("q", [0.5, 1.0, 4.0])
def test_wide_fit_reaches_the_optimum_forming_the_curvature_matrix_once(q, monkeypatch):
    X, y, g, _ = _wide(3000, 300)
    formed = _count_curvature_matrices(monkeypatch)
    clf = DWDClassifier(q=q, alpha=ALPHA).fit(X, y, sample_group=g)
    assert len(formed) == 1  # at the returned point, for the renewable state
    _check_optimum(clf, X, y, q)


def test_wide_one_vs_rest_models_each_reach_their_optimum():
    X, y, g, _ = _wide(2400, 260, seed=1, n_classes=3)
    clf = DWDClassifier(alpha=ALPHA).fit(X, y, sample_group=g)
    assert len(clf.classes_) == 3
    _check_optimum(clf, X, y, 1.0)


def _spy_reduced_precision(monkeypatch):
    """Force the float32 passes at any size; the switches asked and answered."""
    monkeypatch.setattr(_dwd_solver, "_REDUCED_SIZE", 0)
    switches, original = [], _dwd_solver.SiteData.reduced_precision

    def spy(self, on):
        switches.append((on, original(self, on)))
        return switches[-1][1]

    monkeypatch.setattr(_dwd_solver.SiteData, "reduced_precision", spy)
    return switches


@pytest.mark.parametrize("q", [0.5, 4.0])
def test_float32_passes_reach_the_optimum_of_the_rows_as_given(q, monkeypatch):
    # the phase's early passes on a float32 copy of the rows, then the rows
    # as given: the optimum of the float64 objective (gap <= 1e-10 against
    # L-BFGS-B), the kept curvature the float64 one at the returned point
    # (rtol 1e-9: a float32 sum would be off by ~1e-7), formed once
    X, y, g, _ = _wide(3000, 300, seed=3)
    switches = _spy_reduced_precision(monkeypatch)
    formed = _count_curvature_matrices(monkeypatch)
    clf = DWDClassifier(q=q, alpha=ALPHA).fit(X, y, sample_group=g)
    assert switches == [(True, True), (False, True)]
    assert len(formed) == 1
    _check_optimum(clf, X, y, q)


@pytest.mark.parametrize("reduced", [False, True], ids=["float64", "float32-passes"])
def test_a_stream_continues_from_the_wide_fit_as_from_the_newton_steps(reduced, monkeypatch):
    X, y, g, batch = _wide(3000, 300, seed=2)
    first, second = batch < batch.max() // 2, batch >= batch.max() // 2
    if reduced:
        switches = _spy_reduced_precision(monkeypatch)
    quasi = DWDClassifier(alpha=ALPHA).fit(X[first], y[first], sample_group=g[first])
    if reduced:
        assert switches == [(True, True), (False, True)]
    monkeypatch.setattr(_newton, "_QUASI_NEWTON_PARAMS", 10**9)  # Newton steps only
    newton = DWDClassifier(alpha=ALPHA).fit(X[first], y[first], sample_group=g[first])
    # both stopped within tol = 1e-12 of the same optimum: the same state to
    # the optimum's precision (square root of the objective's; the fit on
    # float64 passes alone is 3.4e-7 from a tol = 1e-15 Newton solve here)
    scale = np.abs(newton.curvature_).max()
    np.testing.assert_allclose(quasi.coef_, newton.coef_, rtol=1e-5, atol=5e-7)
    np.testing.assert_allclose(quasi.curvature_, newton.curvature_, rtol=1e-5, atol=1e-6 * scale)
    for clf in (quasi, newton):
        clf.partial_fit(X[second], y[second], sample_group=g[second])
    # the online batch (10 steps on the curvature at the start, eq. 35) moves
    # both alike; its steps amplify the states' 1e-7 difference to ~1e-5
    # (and the batch's smoothed curvature, steep next to the kink, the sum)
    np.testing.assert_allclose(quasi.coef_, newton.coef_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(quasi.curvature_, newton.curvature_, rtol=1e-4, atol=1e-4 * scale)


def _stub_phase(n_params, n_models, scale=1.0):
    """An L-BFGS phase on a stand-in solver (the memory and direction only)."""
    solver = types.SimpleNamespace(active=np.ones(n_models, dtype=bool), scale=scale,
                                   Theta=np.zeros((n_params, n_models)), sites=None)
    return LBFGSPhase(solver)


def test_lbfgs_direction_is_the_bfgs_update_of_the_pairs_kept():
    # BFGS: the updated inverse curvature maps the newest y to the newest s
    # (Nocedal & Wright eq. 6.17), whatever the older pairs and H0
    rng = np.random.default_rng(0)
    A = rng.standard_normal((6, 6))
    A = A @ A.T + 6 * np.eye(6)

    phase = _stub_phase(6, 2)
    for _ in range(4):
        s = rng.standard_normal((6, 2))
        phase.remember(s, A @ s)
    np.testing.assert_allclose(phase.direction(A @ s), -s, rtol=1e-10)
    # the BFGS inverse updates written out (Nocedal & Wright eq. 6.17) from
    # H0 = γ I, γ = sᵀy / yᵀy of the newest pair
    g = rng.standard_normal((6, 2))
    for k in range(2):
        pairs = list(zip(phase.S[k], phase.Y[k]))
        gamma = pairs[-1][0] @ pairs[-1][1] / (pairs[-1][1] @ pairs[-1][1])
        H = gamma * np.eye(6)
        for s_k, y_k in pairs:
            rho = 1.0 / (s_k @ y_k)
            V = np.eye(6) - rho * np.outer(y_k, s_k)
            H = V.T @ H @ V + rho * np.outer(s_k, s_k)
        np.testing.assert_allclose(phase.direction(g)[:, k], -H @ g[:, k], rtol=1e-9)
    # a pair breaking the curvature condition is left out of that model's recursion
    bad = rng.standard_normal((6, 2))
    phase.remember(bad, np.column_stack([A @ bad[:, 0], -bad[:, 1]]))
    np.testing.assert_allclose(phase.direction(A @ bad)[:, 0], -bad[:, 0], rtol=1e-10)
    np.testing.assert_allclose(phase.direction(A @ s)[:, 1], -s[:, 1], rtol=1e-10)


def test_lbfgs_initial_scaling_is_the_newest_pair_kept_in_the_window():
    # H0 = γ I with γ = sᵀy / yᵀy of the newest pair a model kept while the
    # window holds it, 1 / scale once every pair in the window was left out
    from skfedpriv.linear_model._quasi_newton import _MEMORY

    rng = np.random.default_rng(2)
    A = rng.standard_normal((4, 4))
    A = A @ A.T + 4 * np.eye(4)

    phase = _stub_phase(4, 2, scale=7.0)
    s = rng.standard_normal((4, 2))
    phase.remember(s, A @ s)
    newest = s[:, 1] @ A @ s[:, 1] / ((A @ s[:, 1]) @ (A @ s[:, 1]))
    g = rng.standard_normal((4, 2))
    for n_left_out in range(1, _MEMORY + 1):
        bad = rng.standard_normal((4, 2))
        # model 0 keeps each pair, model 1 leaves each out (sᵀy < 0)
        phase.remember(bad, np.column_stack([A @ bad[:, 0], -bad[:, 1]]))
        # model 1's only pair kept: H g = γ g + (its BFGS terms), written out
        old = s[:, 1]
        y_old = A @ old
        rho = 1.0 / (old @ y_old)
        V = np.eye(4) - rho * np.outer(y_old, old)
        gamma = newest if n_left_out < _MEMORY else None
        if gamma is None:  # the kept pair has left the window
            expected = -g[:, 1] / phase.solver.scale
        else:
            expected = -(gamma * V.T @ V + rho * np.outer(old, old)) @ g[:, 1]
        np.testing.assert_allclose(phase.direction(g)[:, 1], expected, rtol=1e-10,
                                   err_msg=f"{n_left_out} pairs left out")
    # model 0 kept every pair: the newest pair's γ (its direction maps y to s)
    np.testing.assert_allclose(phase.direction(A @ bad)[:, 0], -bad[:, 0], rtol=1e-10)


def test_one_vs_rest_phase_takes_fewer_rounds_and_matrices_to_the_same_optimum(monkeypatch):
    # digits (10 classes, the 70 % split of issue #23): the L-BFGS phase moves
    # every class model in one round; the Newton steps alone wait for the
    # slowest model's CG each round and form matrices along the way
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    from skfedpriv.linear_model import _renewable

    X, y = load_digits(return_X_y=True)
    X, _, y, _ = train_test_split(X, y, train_size=0.7, random_state=0)
    X = StandardScaler().fit_transform(X)
    infos, original = [], _renewable.solve_batch

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        infos.append(out[2])
        return out

    monkeypatch.setattr(_renewable, "solve_batch", spy)
    formed = _count_curvature_matrices(monkeypatch)
    quasi = DWDClassifier(alpha=ALPHA).fit(X, y)
    quasi_matrices = len(formed)
    monkeypatch.setattr(_newton, "_QUASI_NEWTON_MODELS", 10**9)  # Newton steps only
    newton = DWDClassifier(alpha=ALPHA).fit(X, y)
    assert infos[0]["rounds"] < 0.5 * infos[1]["rounds"]
    assert quasi_matrices < 0.5 * (len(formed) - quasi_matrices)
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    for (theta, labels), (other, _) in zip(_models(quasi, y), _models(newton, y)):
        args = (Xbar, labels, np.ones(len(X)), 1.0, ALPHA)
        values = gendwd_objective(theta, *args)[0], gendwd_objective(other, *args)[0]
        assert abs(values[0] - values[1]) <= 1e-11 * values[1]


def test_lbfgs_memory_keeps_the_newest_pairs_and_their_products():
    # past the memory, the oldest pairs leave; the products kept (formed a
    # row and column at a time) are those of the pairs kept, S Yᵀ and Y Yᵀ
    from skfedpriv.linear_model._quasi_newton import _MEMORY

    rng = np.random.default_rng(1)

    phase = _stub_phase(5, 3)
    pairs = []
    for _ in range(_MEMORY + 7):
        s, y = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
        y[:, 0] = np.abs(s[:, 0]) * np.sign(s[:, 0])  # model 0 keeps every pair
        phase.remember(s, y)
        pairs.append((s, y))
    kept = pairs[-_MEMORY:]
    np.testing.assert_array_equal(phase.S[0], np.array([s[:, 0] for s, _ in kept]))
    for k in range(3):
        np.testing.assert_allclose(phase.sy[k], phase.S[k] @ phase.Y[k].T, rtol=1e-12,
                                   atol=1e-12)
        np.testing.assert_allclose(phase.yy[k], phase.Y[k] @ phase.Y[k].T, rtol=1e-12,
                                   atol=1e-12)
    # a pair a model left out is zero in its memory
    left_out = [(s[:, 1] * y[:, 1]).sum() <= 0 for s, y in kept]
    assert np.all(phase.S[1][left_out] == 0) and np.any(left_out)
    # the direction's R⁻¹, kept a column at a time through the window's
    # slides: the inverse of the upper triangle of S Yᵀ of the pairs kept,
    # with a unit diagonal where a model left a pair out
    for k in range(3):
        R = np.triu(phase.S[k] @ phase.Y[k].T)
        R[np.diag_indices(_MEMORY)] = np.where(np.diag(R) > 0, np.diag(R), 1.0)
        np.testing.assert_allclose(phase.r_inverse[k], np.linalg.inv(R), rtol=1e-9,
                                   atol=1e-12 * np.abs(np.linalg.inv(R)).max())


def test_float32_copy_only_for_pooled_dense_float64_rows_and_dropped_after(monkeypatch):
    import scipy.sparse as sp

    X, y, g, _ = _wide(600, 40, seed=4)
    Y = np.where(y == y.max(), 1.0, -1.0)[:, None]
    w = np.ones(len(X))
    pooled = _dwd_solver.SiteData(X, Y, w, [np.arange(len(X))], None, True)
    assert not pooled.reduced_precision(True)  # below _REDUCED_SIZE: read as given
    monkeypatch.setattr(_dwd_solver, "_REDUCED_SIZE", 0)
    Theta = np.full((41, 1), 0.01)
    exact = pooled.summaries(Theta, 1.0, False)
    assert pooled.reduced_precision(True) and pooled.parts[0][0].dtype == np.float32
    coarse = pooled.summaries(Theta, 1.0, False)
    np.testing.assert_allclose(coarse[1], exact[1], rtol=1e-5, atol=1e-5)
    assert not np.array_equal(coarse[1], exact[1])  # float32 products, not cached numbers
    assert pooled.reduced_precision(False) and pooled.parts[0][0] is X
    for a, b in zip(pooled.summaries(Theta, 1.0, False)[:2], exact[:2]):
        np.testing.assert_array_equal(a, b)  # the rows as given again, nothing float32 kept
    assert not pooled.reduced_precision(False)
    for sites in (_dwd_solver.SiteData(sp.csr_matrix(X), Y, w, [np.arange(len(X))], None, True),
                  _dwd_solver.SiteData(X.astype(np.float32), Y, w, [np.arange(len(X))], None,
                                       True)):
        assert not sites.reduced_precision(True)


def test_sites_read_the_rows_as_given_after_a_solve_that_raised(monkeypatch):
    X, y, g, _ = _wide(900, 300, seed=5)
    switches = _spy_reduced_precision(monkeypatch)

    def fail(self, direction, running):
        raise RuntimeError("a transport failed")

    monkeypatch.setattr(LBFGSPhase, "step", fail)
    with pytest.raises(RuntimeError, match="transport"):
        DWDClassifier(alpha=ALPHA).fit(X, y, sample_group=g)
    assert switches == [(True, True), (False, True)]


@pytest.mark.parametrize("left_of_kink", [False, True])
@pytest.mark.parametrize("order", ["C", "F"])
def test_curvature_matrix_of_wide_rows_is_the_weighted_product(left_of_kink, order):
    # several row blocks and gathered chunks per block, rows with zero
    # curvature (left of the kink) skipped or none to skip
    X, y, _, _ = _wide(5000, 300)
    X = np.asarray(X, order=order)
    labels = np.where(y == y.max(), 1.0, -1.0)
    theta = np.random.default_rng(0).standard_normal(300) / 30
    d = gendwd_smoothed_curvature(labels * (X @ theta) + (0.5 if left_of_kink else 5.0), 1.0)
    assert np.all(d > 0) != left_of_kink and np.mean(d > 0) > 0.3
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    gram = _dwd_solver.augmented_gram(X, d, True)
    np.testing.assert_allclose(gram, Xbar.T @ (d[:, None] * Xbar), rtol=1e-12, atol=1e-10)
    np.testing.assert_array_equal(gram, gram.T)
