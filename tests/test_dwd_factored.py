"""Few rows, many features (issue #23): the curvature kept as rows ``D^½ X̄``
and Newton systems solved through ``m x m`` systems give the dense path's
optimum, state and continuation."""

import copy
import mmap
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from _reference import gendwd_relative_gaps
from scipy.linalg.lapack import dpotrf

import skfedpriv.linear_model._renewable as renewable
from skfedpriv import DWDClassifier
from skfedpriv.linear_model._factored_curvature import (
    CurvatureStack,
    RowBlock,
    RowCurvature,
    curvature_form,
    factored_is_smaller,
)

ALPHA = 1e-3


def _rows(n, p, seed=0, n_classes=2):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    X = rng.standard_normal((n, p))
    X[:, :5] += 0.8 * (y[:, None] - (n_classes - 1) / 2)
    return X, y


def _dense_form(sites, prior, p1, **kwargs):
    """The dense ``p1 x p1`` path for every batch (rows never wanted)."""
    return curvature_form(sites, prior, p1, **dict(kwargs, wanted=False))


def _brute_force(blocks, scales, diag, intercept):
    """``diag(r) + Σ s_i² x̄_i x̄_iᵀ`` row by row."""
    H = np.diag(diag).astype(float)
    for X, s in zip(blocks, scales):
        X = X.toarray() if sp.issparse(X) else X
        for x, si in zip(X, s):
            xbar = np.r_[1.0, x] if intercept else x
            H += si**2 * np.outer(xbar, xbar)
    return H


@pytest.mark.parametrize("intercept", [True, False])
@pytest.mark.parametrize("shift", [0.0, 0.05])
def test_woodbury_solve_and_products_match_the_dense_matrix(intercept, shift):
    rng = np.random.default_rng(1)
    X1, X2 = rng.standard_normal((6, 40)), sp.random(4, 40, density=0.3, format="csr",
                                                        random_state=2)
    s1, s2 = rng.random(6), rng.random(4)
    p1 = 40 + intercept
    diag = np.full(p1, 0.2)
    if intercept:
        diag[0] = 0.0  # the unpenalized intercept: the Schur complement
    H = RowCurvature([RowBlock(X1, intercept), RowBlock(X2, intercept)], [s1, s2], diag,
                     intercept).shifted(shift)
    reference = _brute_force([X1, X2], [s1, s2], diag + shift, intercept)
    np.testing.assert_allclose(H.dense(), reference, rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(p1)
    np.testing.assert_allclose(H.dot(g), reference @ g, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(H.woodbury().solve(g), np.linalg.solve(reference, g),
                               rtol=1e-9, atol=1e-10)


def _relative_gaps(clf, X, y, q):
    """``(F(θ) - min F) / min F`` per model, ``min F`` by L-BFGS-B from θ."""
    return gendwd_relative_gaps(clf, X, y, q, ALPHA)


@pytest.mark.parametrize("q, n_classes", [(0.5, 2), (1.0, 2), (4.0, 2), (1.0, 3)])
def test_few_rows_fit_is_the_optimum_and_keeps_the_factored_state(q, n_classes):
    X, y = _rows(30, 300, n_classes=n_classes)
    clf = DWDClassifier(q=q, alpha=ALPHA).fit(X, y)
    assert isinstance(clf.curvature_, CurvatureStack)
    assert clf.curvature_.shape == (1 if n_classes == 2 else n_classes, 301, 301)
    assert np.all(_relative_gaps(clf, X, y, q) <= 1e-10)


def test_few_rows_fit_equals_the_dense_path(monkeypatch):
    X, y = _rows(30, 300)
    factored = DWDClassifier(alpha=ALPHA, tol=1e-14).fit(X, y)
    with monkeypatch.context() as patch:
        patch.setattr(renewable, "curvature_form", _dense_form)
        dense = DWDClassifier(alpha=ALPHA, tol=1e-14).fit(X, y)
    assert isinstance(dense.curvature_, np.ndarray)
    np.testing.assert_allclose(factored.coef_, dense.coef_, atol=1e-7)
    np.testing.assert_allclose(np.asarray(factored.curvature_), dense.curvature_,
                               rtol=1e-6, atol=1e-8)


def test_curvature_is_the_dense_sum_at_the_returned_point():
    X, y = _rows(20, 250)
    clf = DWDClassifier(alpha=ALPHA).fit(X, y)
    assert isinstance(clf.curvature_, CurvatureStack)
    theta = np.r_[clf.intercept_, clf.coef_[0]]
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    u = np.where(y == 1, 1.0, -1.0) * (Xbar @ theta)
    from skfedpriv._loss import GenDWDLoss  # the smoothed curvature of eq. 8
    d = GenDWDLoss(q=1.0).smoothed_curvature(u)
    ridge = np.r_[0.0, np.full(250, ALPHA * len(X))]
    expected = np.diag(ridge) + (Xbar * d[:, None]).T @ Xbar
    np.testing.assert_allclose(clf.curvature_[0], expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(clf.curvature_)[0], expected, rtol=1e-10,
                               atol=1e-10)


def test_partial_fit_continues_from_the_factored_state_as_the_dense_state():
    X, y = _rows(45, 200)
    clf = DWDClassifier(alpha=ALPHA).fit(X[:15], y[:15])
    twin = copy.deepcopy(clf)
    twin._training_state.curvature = twin._training_state.curvature.dense()
    for batch in (slice(15, 30), slice(30, 45)):
        clf.partial_fit(X[batch], y[batch])
        twin.partial_fit(X[batch], y[batch])
        assert isinstance(clf.curvature_, CurvatureStack)
        assert isinstance(twin.curvature_, np.ndarray)
        np.testing.assert_allclose(clf.coef_, twin.coef_, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(clf.intercept_, twin.intercept_, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.asarray(clf.curvature_), twin.curvature_, rtol=1e-10,
                                   atol=1e-10)


def test_the_state_turns_dense_once_rows_seen_make_dense_smaller():
    X, y = _rows(160, 200)
    clf = DWDClassifier(alpha=ALPHA).fit(X[:40], y[:40])
    for end in (80, 120):
        clf.partial_fit(X[end - 40:end], y[end - 40:end])
        state = clf._training_state.curvature
        assert isinstance(state, CurvatureStack) and state.n_rows == end
        # the rows' copies, their Gram matrices and scales: below the matrix
        assert state.nbytes < 201 * 201 * 8
    # 160 rows and their Gram matrix would exceed the 201 x 201 matrix
    assert not factored_is_smaller(160, 201) and factored_is_smaller(120, 201)
    clf.partial_fit(X[120:], y[120:])
    assert isinstance(clf.curvature_, np.ndarray) and clf.curvature_.shape == (1, 201, 201)


def test_a_pickled_factored_estimator_continues_alike():
    X, y = _rows(40, 250)
    clf = DWDClassifier(alpha=ALPHA).fit(X[:20], y[:20])
    assert isinstance(clf.curvature_, CurvatureStack)
    restored = pickle.loads(pickle.dumps(clf))
    clf.partial_fit(X[20:], y[20:])
    restored.partial_fit(X[20:], y[20:])
    np.testing.assert_array_equal(restored.coef_, clf.coef_)


def test_sparse_rows_take_the_factored_path_to_the_same_optimum():
    X, y = _rows(25, 200)
    X[np.abs(X) < 1.0] = 0.0
    dense_rows = DWDClassifier(alpha=ALPHA, tol=1e-14).fit(X, y)
    sparse_rows = DWDClassifier(alpha=ALPHA, tol=1e-14).fit(sp.csr_matrix(X), y)
    assert isinstance(sparse_rows.curvature_, CurvatureStack)
    np.testing.assert_allclose(sparse_rows.coef_, dense_rows.coef_, rtol=1e-9, atol=1e-9)


def test_small_problems_keep_the_dense_path():
    # scikit-learn's estimator checks (15 rows, 30 features) among them
    X, y = _rows(15, 30)
    assert isinstance(DWDClassifier(alpha=ALPHA).fit(X, y).curvature_, np.ndarray)


def test_inference_and_private_mechanisms_keep_the_dense_state():
    X, y = _rows(20, 300)
    inferred = DWDClassifier(alpha=ALPHA, inference=True).fit(X, y)
    assert isinstance(inferred.curvature_, np.ndarray)
    private = DWDClassifier(alpha=ALPHA, mechanism="local-gaussian", epsilon=1.0,
                            delta=1e-5, clip_norm=2.0, random_state=0,
                            classes=[0, 1]).fit(X, y)
    assert isinstance(private._training_state.curvature, np.ndarray)


def test_remote_sites_keep_the_dense_sums_and_reach_the_same_model():
    from skfedpriv.federated import DWDSite, LocalTransport, federated_fit

    X, y = _rows(30, 250)
    sites = np.arange(30) % 3
    transport = LocalTransport([
        DWDSite(lambda k, s=s: (X[sites == s], y[sites == s]), None, name=f"s{s}")
        for s in range(3)])
    remote = federated_fit(DWDClassifier(alpha=ALPHA, tol=1e-14), transport)
    local = DWDClassifier(alpha=ALPHA, tol=1e-14).fit(X, y, sample_group=sites)
    assert isinstance(remote.curvature_, np.ndarray)
    assert isinstance(local.curvature_, CurvatureStack)
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-7)
    np.testing.assert_allclose(np.asarray(local.curvature_), remote.curvature_, rtol=1e-6,
                               atol=1e-8)


def test_a_few_row_fit_that_runs_out_reports_its_gap_from_the_factored_system():
    from sklearn.exceptions import ConvergenceWarning

    X, y = _rows(30, 300, n_classes=3)
    with pytest.warns(ConvergenceWarning, match="estimated relative objective gap"):
        clf = DWDClassifier(alpha=ALPHA, max_iter=3).fit(X, y)
    assert isinstance(clf.curvature_, CurvatureStack)


def test_the_majorization_fallback_runs_on_rows_and_reaches_the_optimum(monkeypatch):
    from skfedpriv.linear_model import _dwd_solver, _newton

    # at q = 4 a Newton step on these rows is refused (found by trying) from
    # the gradient's first step (the piled start avoids it: taken away here)
    monkeypatch.setattr(_newton, "piled_direction", lambda *args: None)
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((60, 250)), rng.integers(0, 2, 60)
    calls, original = [], _dwd_solver.SiteData.majorizer_rows
    monkeypatch.setattr(_dwd_solver.SiteData, "majorizer_rows",
                        lambda self, loss: calls.append(loss) or original(self, loss))
    clf = DWDClassifier(q=4.0, alpha=ALPHA).fit(X, y)
    assert calls and isinstance(clf.curvature_, CurvatureStack)
    assert np.all(_relative_gaps(clf, X, y, 4.0) <= 1e-10)


# -- the steps in the span of the rows (linear_model/_row_span.py) ----------

def _span_blocks():
    rng = np.random.default_rng(3)
    X1 = rng.standard_normal((6, 50))
    X1[4] = X1[1]  # a repeated row: the Gram matrix is singular (pivoted Cholesky)
    X2 = sp.random(5, 50, density=0.3, format="csr", random_state=4)
    return [RowBlock(X1, True), RowBlock(X2, True)], np.vstack([X1, X2.toarray()])


def test_row_span_is_an_orthonormal_basis_holding_every_row():
    from skfedpriv.linear_model._row_span import RowSpan

    blocks, X = _span_blocks()
    span = RowSpan(blocks)
    assert span.rank == np.linalg.matrix_rank(X) == 10
    basis = span.expand(np.eye(span.rank))  # Qᵀ, one column per direction
    np.testing.assert_allclose(basis.T @ basis, np.eye(span.rank), atol=1e-12)
    # row i's coordinates are Q x_i, and Qᵀ Q x_i gives the row back
    np.testing.assert_allclose(span.coordinates, X @ basis, atol=1e-12)
    np.testing.assert_allclose(span.coordinates @ basis.T, X, atol=1e-12)
    # a vector outside: its projection (least squares), and in_span refuses it
    v = np.random.default_rng(5).standard_normal((50, 1))
    projection = X.T @ np.linalg.lstsq(X.T, v, rcond=None)[0]
    np.testing.assert_allclose(span.expand(span.reduce(v)), projection, atol=1e-12)
    assert span.in_span(v) is None
    np.testing.assert_allclose(span.in_span(projection), span.reduce(projection))


def test_repeated_and_nearly_dependent_rows_reach_the_optimum():
    X, y = _rows(40, 300)
    X[20:25], y[20:25] = X[:5], y[:5]  # repeated rows
    X[25:30], y[25:30] = X[5:10] * (1 + 1e-7), y[5:10]  # dependent ones
    noise = 1e-7 * np.random.default_rng(7).standard_normal((5, 300))
    X[30:35], y[30:35] = X[10:15] + noise, y[10:15]  # nearly dependent ones
    for q in (1.0, 4.0):
        clf = DWDClassifier(q=q, alpha=ALPHA).fit(X, y)
        assert isinstance(clf.curvature_, CurvatureStack)
        assert np.all(_relative_gaps(clf, X, y, q) <= 1e-10)
    # rows 1e-5 apart: the plain Cholesky factor holds, with tiny pivots
    X, y = _rows(40, 300)
    X[20:40], y[20:40] = X[:20] + 1e-5 * np.random.default_rng(9).standard_normal((20, 300)), y[:20]
    assert dpotrf(X @ X.T, lower=1)[1] == 0
    clf = DWDClassifier(alpha=ALPHA).fit(X, y)
    assert np.all(_relative_gaps(clf, X, y, 1.0) <= 1e-10)


def test_the_steps_ask_only_the_sites_in_the_span(monkeypatch):
    from skfedpriv.linear_model import _dwd_solver

    widths = []
    for name in ("summaries", "line_losses", "curvature_rows", "curvature_product"):
        original = getattr(_dwd_solver.SiteData, name)
        monkeypatch.setattr(_dwd_solver.SiteData, name,
                            lambda self, *a, _f=original, **k: widths.append(self.n_features)
                            or _f(self, *a, **k))
    X, y = _rows(30, 300)
    clf = DWDClassifier(alpha=ALPHA).fit(X[:15], y[:15])
    clf.partial_fit(X[15:], y[15:])
    # no request to the 300-feature rows: every step in the span's coordinates
    assert widths and max(widths) <= 30


def test_sites_in_parts_solve_in_the_span_as_pooled_rows():
    from skfedpriv.linear_model._dwd_solver import SiteData
    from skfedpriv.linear_model._newton import solve_batch

    X, y = _rows(30, 250)
    Y = np.where(y == 1, 1.0, -1.0)[:, None]
    pooled = SiteData(X, Y, np.ones(30), [np.arange(30)], None, True)
    parts = SiteData(X, Y, np.ones(30), [np.arange(30)], None, True)
    parts.parts = [(X[:12], Y[:12], np.ones(12)), (X[12:], Y[12:], np.ones(18))]
    out = [solve_batch(s, np.zeros((251, 1)), q=1.0, alpha=ALPHA, fit_intercept=True,
                       tol=1e-14, rows=True) for s in (pooled, parts)]
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-9, atol=1e-10)
    assert [len(b) for b in out[1][1][0].blocks] == [12, 18]
    np.testing.assert_allclose(np.asarray(out[1][1]), np.asarray(out[0][1]), rtol=1e-9,
                               atol=1e-9)


def test_a_start_outside_the_span_takes_the_unreduced_path():
    from skfedpriv.linear_model._dwd_solver import SiteData
    from skfedpriv.linear_model._newton import solve_batch
    from skfedpriv.linear_model._row_span import reduce_to_row_span

    X, y = _rows(30, 250)
    Y = np.where(y == 1, 1.0, -1.0)[:, None]
    sites = SiteData(X, Y, np.ones(30), [np.arange(30)], None, True)
    outside = np.random.default_rng(6).standard_normal((251, 1))
    assert reduce_to_row_span(sites, outside, None, None, True) is None
    assert reduce_to_row_span(sites, np.zeros((251, 1)), None, None, True) is not None
    Theta, curvature, _ = solve_batch(sites, outside, q=1.0, alpha=ALPHA, fit_intercept=True,
                                      tol=1e-14, rows=True)
    reference, _, _ = solve_batch(sites, np.zeros((251, 1)), q=1.0, alpha=ALPHA,
                                  fit_intercept=True, tol=1e-14, rows=True)
    assert isinstance(curvature, CurvatureStack)
    np.testing.assert_allclose(Theta, reference, atol=1e-7)


def test_the_state_keeps_its_own_rows_when_the_callers_change():
    X, y = _rows(30, 250)
    rows = X[:15].copy()
    clf = DWDClassifier(alpha=ALPHA).fit(rows, y[:15])
    twin = DWDClassifier(alpha=ALPHA).fit(X[:15], y[:15])
    rows[:] = 0.0  # the caller reuses its array
    clf.partial_fit(X[15:], y[15:])
    twin.partial_fit(X[15:], y[15:])
    np.testing.assert_array_equal(clf.coef_, twin.coef_)


@pytest.mark.parametrize("numpy_switch", [True, False])
def test_a_large_private_copy_is_an_independent_array_that_pickles(monkeypatch, numpy_switch):
    import skfedpriv.linear_model._factored_curvature as factored

    switch = factored._HUGEPAGE_SWITCH
    if numpy_switch and switch is None:
        pytest.skip("this numpy has no huge-page switch")
    if not numpy_switch:  # the memory map
        monkeypatch.setattr(factored, "_HUGEPAGE_SWITCH", None)
    X = np.arange(factored._ORDINARY_PAGES_FROM // 8, dtype=float).reshape(8, -1)  # 4 MiB
    advised = switch(True) if numpy_switch else None
    block = RowBlock(X, True)
    if numpy_switch:  # numpy's process-wide advice is left as it was
        assert switch(advised) is True
    else:
        owner = block.X
        while isinstance(owner, (np.ndarray, memoryview)):
            owner = owner.base if isinstance(owner, np.ndarray) else owner.obj
        assert isinstance(owner, mmap.mmap)
    assert block.X is not X and not np.shares_memory(block.X, X)
    assert block.X.flags.c_contiguous and block.X.flags.writeable
    np.testing.assert_array_equal(block.X, X)
    X[:] = 0.0
    restored = pickle.loads(pickle.dumps(block))
    for other in (restored, copy.deepcopy(block)):
        np.testing.assert_array_equal(other.X, block.X)
        assert not np.shares_memory(other.X, block.X)
    assert block.X.any()


@pytest.mark.parametrize("p", [2_000, 10_000])
def test_the_issue_shape_reaches_the_optimum_and_continues_from_its_own_rows(p):
    # n = 400 (issue #23's few-rows shapes; 6.4 and 32 MB of rows, the state's
    # copy beyond _ORDINARY_PAGES_FROM): the optimum against L-BFGS-B, and a
    # partial_fit from a state whose caller zeroed its rows equal to the one
    # from a twin that kept them
    from skfedpriv.linear_model._factored_curvature import _ORDINARY_PAGES_FROM

    X, y = _rows(500, p, seed=3)
    rows = X[:400].copy()
    assert rows.nbytes >= _ORDINARY_PAGES_FROM
    clf = DWDClassifier(alpha=ALPHA).fit(rows, y[:400])
    assert isinstance(clf.curvature_, CurvatureStack)
    assert np.all(_relative_gaps(clf, X[:400], y[:400], 1.0) <= 1e-10)
    twin = DWDClassifier(alpha=ALPHA).fit(X[:400], y[:400])
    rows[:] = 0.0
    clf.partial_fit(X[400:], y[400:])
    twin.partial_fit(X[400:], y[400:])
    np.testing.assert_array_equal(clf.coef_, twin.coef_)
    np.testing.assert_array_equal(clf.intercept_, twin.intercept_)


@pytest.mark.parametrize("split", [False, True])
def test_smoothing_inert_is_no_margin_in_the_smoothing_window(split):
    from skfedpriv._losses import SMOOTHING_WIDTH
    from skfedpriv.linear_model._dwd_solver import SiteData

    X, y = _rows(30, 250)
    Y = np.where(y == 1, 1.0, -1.0)[:, None]
    sites = SiteData(X, Y, np.ones(30), [np.arange(30)], None, True)
    if split:
        sites.parts = [(X[:12], Y[:12], np.ones(12)), (X[12:], Y[12:], np.ones(18))]
    rng = np.random.default_rng(3)
    kink = 0.5  # q = 1
    for scale in (0.0, 1e-3, 0.1, 1.0, 10.0):
        theta = np.r_[0.3, scale * rng.standard_normal(250)]
        Theta = np.column_stack([theta, -theta])
        margins = Y * (Theta[0] + X @ Theta[1:])
        # brute force: a margin strictly inside (u0 - w, u0 + w), where the
        # ramp replaces the loss's own curvature
        inside = (np.abs(margins - kink) < SMOOTHING_WIDTH).any(axis=0)
        np.testing.assert_array_equal(sites.smoothing_inert(Theta, 1.0), ~inside)
    # one row moved into the window: that model's answer turns
    theta = np.r_[0.0, np.zeros(250)]
    theta[1] = 0.52 / (Y[0, 0] * X[0, 0])
    margins = Y[:, 0] * (X[:, 0] * theta[1])
    assert np.abs(margins[0] - kink) < SMOOTHING_WIDTH
    expected = not (np.abs(margins - kink) < SMOOTHING_WIDTH).any()
    assert sites.smoothing_inert(theta[:, None], 1.0)[0] == expected


@pytest.mark.parametrize("q", [0.5, 1.0, 4.0])
def test_the_final_check_skips_the_confirming_cg_only_where_it_is_one_matrix(q, monkeypatch):
    """Few rows: where no row is in the smoothing window at the returned
    point, the semismooth decrement is the smoothed one and no CG round
    confirms it; the fit is the one the CG's confirmation gives."""
    from skfedpriv.linear_model import _dwd_solver, _newton

    X, y = _rows(40, 400, seed=int(2 * q))
    calls = []
    original = _newton._conjugate_gradient
    monkeypatch.setattr(_newton, "_conjugate_gradient",
                        lambda *a, **k: calls.append(1) or original(*a, **k))
    skipped = DWDClassifier(q=q, alpha=ALPHA).fit(X, y)
    assert not calls
    monkeypatch.setattr(_dwd_solver.SiteData, "smoothing_inert",
                        lambda self, Theta, loss: np.zeros(Theta.shape[1], dtype=bool))
    confirmed = DWDClassifier(q=q, alpha=ALPHA).fit(X, y)
    assert calls
    np.testing.assert_array_equal(skipped.coef_, confirmed.coef_)
    np.testing.assert_array_equal(skipped.intercept_, confirmed.intercept_)
    assert gendwd_relative_gaps(skipped, X, y, q=q, alpha=ALPHA).max() <= 1e-10


@pytest.mark.parametrize("intercept", [True, False])
def test_decrement_bound_from_an_earlier_factor_bounds_the_exact_decrement(intercept):
    # H_new ⪰ κ H_old with κ = min(1, min s_new² / s_old²): the bound from the
    # old factor is at least the exact ½ gᵀH_new⁻¹g (dense solve), and equal
    # to it when the scales did not change
    from skfedpriv.linear_model._factored_curvature import WoodburyFactor

    rng = np.random.default_rng(5)
    X = rng.standard_normal((12, 60))
    block = RowBlock(X, intercept)
    p1 = 60 + intercept
    diag = np.full(p1, 0.3)
    diag[0] = 0.0 if intercept else diag[0]
    s_old = rng.random(12) + 0.1
    g = rng.standard_normal(p1)
    old = WoodburyFactor(RowCurvature([block], [s_old], diag, intercept))
    for change in (0.0, 1e-4, 0.3):
        s_new = s_old * (1 + change * rng.uniform(-1, 1, 12))
        new = RowCurvature([block], [s_new], diag, intercept)
        exact = 0.5 * g @ np.linalg.solve(_brute_force([X], [s_new], diag, intercept), g)
        bound = old.decrement_bound(new, g)
        assert exact <= bound * (1 + 1e-10)
        if change == 0.0:
            np.testing.assert_allclose(bound, exact, rtol=1e-9)
    # a row whose scale fell to 0, or other rows: no bound
    s_zero = s_old.copy()
    s_zero[3] = 0.0
    assert old.decrement_bound(RowCurvature([block], [s_zero], diag, intercept), g) == np.inf
    other = RowBlock(X, intercept)
    assert old.decrement_bound(RowCurvature([other], [s_old], diag, intercept), g) == np.inf


@pytest.mark.parametrize(("q", "n", "p", "n_classes"),
                         [(1.0, 100, 700, 2), (0.5, 60, 500, 3), (4.0, 150, 600, 2)])
def test_the_final_check_on_the_last_factor_stops_at_the_same_point(q, n, p, n_classes,
                                                                     monkeypatch):
    # the check at the returned point decided from the last step's factor
    # (no factor formed there) returns the fit that factors there, bitwise:
    # the same point, curvature and partial_fit continuation, one factor
    # fewer per model, at the optimum of an independent solve
    from skfedpriv.linear_model import _factored_curvature as fc

    X, y = _rows(n, p, seed=7, n_classes=n_classes)
    counted = {"factors": 0}
    original = fc.WoodburyFactor.__init__

    def counting(self, curvature, *args):
        counted["factors"] += 1
        original(self, curvature, *args)

    monkeypatch.setattr(fc.WoodburyFactor, "__init__", counting)

    def fit_and_continue():
        counted["factors"] = 0
        clf = DWDClassifier(q=q, alpha=ALPHA).fit(X, y)
        factors = counted["factors"]
        continued = copy.deepcopy(clf).partial_fit(X[:20], y[:20])
        return clf, continued, factors

    lean, lean_continued, lean_factors = fit_and_continue()
    monkeypatch.setattr(fc.WoodburyFactor, "decrement_bound", lambda *a: np.inf)
    full, full_continued, full_factors = fit_and_continue()
    np.testing.assert_array_equal(lean.coef_, full.coef_)
    np.testing.assert_array_equal(lean.intercept_, full.intercept_)
    np.testing.assert_array_equal(np.asarray(lean.curvature_), np.asarray(full.curvature_))
    np.testing.assert_array_equal(lean_continued.coef_, full_continued.coef_)
    # one factor fewer for each model that stops in the local phase (binary: the one)
    n_models = len(lean.coef_)
    assert full_factors - n_models <= lean_factors < full_factors
    if n_models == 1:
        assert lean_factors == full_factors - 1
    assert max(_relative_gaps(lean, X, y, q)) <= 1e-10


def test_a_float32_factor_solves_to_its_precision_and_gives_no_bound():
    # from SINGLE_FROM rows a single-precision factor is float32 and solves
    # the system to about cond(M) float32 epsilons (against a dense solve);
    # fewer rows keep float64; the decrement bound never uses float32
    from skfedpriv.linear_model._factored_curvature import SINGLE_FROM, WoodburyFactor

    rng = np.random.default_rng(11)
    for m, single in ((SINGLE_FROM + 4, True), (SINGLE_FROM - 4, False)):
        X = rng.standard_normal((m, 300))
        block, s = RowBlock(X, True), 0.1 * rng.random(m)
        diag = np.r_[0.0, np.full(300, 0.5)]
        curvature = RowCurvature([block], [s], diag, True)
        factor = WoodburyFactor(curvature, single=True)
        assert factor.single is single
        assert factor.M.dtype == (np.float32 if single else np.float64)
        g = rng.standard_normal(301)
        exact = np.linalg.solve(_brute_force([X], [s], diag, True), g)
        error = np.linalg.norm(factor.solve(g) - exact) / np.linalg.norm(exact)
        assert error <= (1e-4 if single else 1e-10)
        assert (factor.decrement_bound(curvature, g) == np.inf) is single
    # cond(M) possibly above SINGLE_MAX_COND (its trace bound): float64
    from skfedpriv.linear_model._factored_curvature import SINGLE_MAX_COND

    X = rng.standard_normal((SINGLE_FROM + 4, 300))
    s = np.full(len(X), 10.0)
    diag = np.r_[0.0, np.full(300, 0.5)]
    assert 1 + (s * s * (X * X).sum(axis=1)).sum() / 0.5 > SINGLE_MAX_COND  # 1 + trace - m
    ill = WoodburyFactor(RowCurvature([RowBlock(X, True)], [s], diag, True), single=True)
    assert not ill.single


@pytest.mark.parametrize("q", [1.0, 4.0])
def test_float32_early_steps_reach_the_float64_optimum_and_state(q, monkeypatch):
    # n = 300 rows (the float32 factors' range): the early Newton systems and
    # the piled direction in float32, the last steps and the state in float64:
    # at the optimum of an independent solve, the curvature the exact
    # smoothed sum at the returned point, the all-float64 fit's point to the
    # stopping tolerance, and partial_fit continuing as from the dense state
    from skfedpriv._loss import GenDWDLoss
    from skfedpriv.linear_model import _factored_curvature as fc

    X, y = _rows(340, 800, seed=4)
    X_fit, y_fit = X[:300], y[:300]
    kinds = []
    original = fc.WoodburyFactor.__init__

    def recording(self, curvature, single=False):
        original(self, curvature, single)
        kinds.append(self.single)

    monkeypatch.setattr(fc.WoodburyFactor, "__init__", recording)
    clf = DWDClassifier(q=q, alpha=ALPHA).fit(X_fit, y_fit)
    assert any(kinds) and not all(kinds)
    assert max(_relative_gaps(clf, X_fit, y_fit, q)) <= 1e-10
    theta = np.r_[clf.intercept_, clf.coef_[0]]
    Xbar = np.hstack([np.ones((300, 1)), X_fit])
    d = GenDWDLoss(q=q).smoothed_curvature(np.where(y_fit == 1, 1.0, -1.0) * (Xbar @ theta))
    expected = np.diag(np.r_[0.0, np.full(800, ALPHA * 300)]) + (Xbar * d[:, None]).T @ Xbar
    np.testing.assert_allclose(np.asarray(clf.curvature_)[0], expected, rtol=1e-10,
                               atol=1e-10)
    with monkeypatch.context() as patch:
        patch.setattr(fc, "SINGLE_FROM", 10**9)
        kinds.clear()
        double = DWDClassifier(q=q, alpha=ALPHA).fit(X_fit, y_fit)
        assert not any(kinds)
    np.testing.assert_allclose(clf.coef_, double.coef_, rtol=1e-8, atol=1e-10)
    twin = copy.deepcopy(clf)
    twin._training_state.curvature = twin._training_state.curvature.dense()
    clf.partial_fit(X[300:], y[300:])
    twin.partial_fit(X[300:], y[300:])
    np.testing.assert_allclose(clf.coef_, twin.coef_, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(clf.intercept_, twin.intercept_, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("tol", [1e-2, 1e-5, 1e-12])
def test_only_a_float64_factor_stops_a_model(tol, monkeypatch):
    # whatever tol, a model stops on a float64 system (a float32 direction
    # within reach of tol is solved again in float64), and the point is
    # within tol by an independent solve
    from skfedpriv.linear_model import _newton

    X, y = _rows(300, 800, seed=6)
    stopped_on = []
    original = _newton.NewtonSolver.convergence_test

    def spying(self, newton, direct, iterative):
        before = self.active.copy()
        out = original(self, newton, direct, iterative)
        stopped_on.extend(bool(getattr(self.preconditioner[k], "single", False))
                          for k in np.flatnonzero(before & ~self.active))
        return out

    monkeypatch.setattr(_newton.NewtonSolver, "convergence_test", spying)
    clf = DWDClassifier(alpha=ALPHA, tol=tol).fit(X, y)
    assert stopped_on and not any(stopped_on)
    assert max(_relative_gaps(clf, X, y, 1.0)) <= max(tol, 1e-10)
