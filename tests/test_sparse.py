"""Sparse CSR rows give the estimators' dense results (#25).

Every estimator fits, continues and predicts on a CSR matrix as on the same
rows dense: the summaries' passes are sparse products (the same sums in
another order, so the models agree to rounding), the paths that need dense
rows densify a bounded number of rows (then the same code runs on the same
numbers: bit-identical), and the clipping of a private fit is
``clip_rows``'s on the stored values.
"""

import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import estimator_checks

from skfedpriv import DecentralizedLogisticRegression, DWDClassifier, LogisticRegression
from skfedpriv.linear_model._dwd_solver import _augmented_sum, augmented_gram, augmented_scores
from skfedpriv.preprocessing import RowNormClipper
from skfedpriv.privacy import clip_rows
from skfedpriv.privacy._objective_perturbation import clip_augmented_rows

pytestmark = [pytest.mark.filterwarnings("ignore::skfedpriv.privacy.SeededNoiseWarning"),
              pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]

TIGHT = dict(rtol=1e-10, atol=1e-10)


def _random_sparse(n=240, p=30, density=0.15, seed=0):
    """A text-like sparse matrix (scipy.sparse.random) and labels of a
    linear rule on it, three sites."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, p, density=density, format="csr", random_state=seed,
                  data_rvs=lambda k: rng.uniform(0.0, 2.0, size=k))
    y = (X @ rng.normal(size=p) > np.median(X @ rng.normal(size=p))).astype(int)
    return X, y, rng.integers(3, size=n)


def _digits(n=400):
    data = load_digits()
    X = data.data[:n] / 16.0
    return sp.csr_matrix(X), data.target[:n], np.arange(n) % 4


BINARY = [
    DWDClassifier(),
    DWDClassifier(inference=True, alpha=1e-3),
    DWDClassifier(mechanism="laplace", clip_norm=2.0, classes=[0, 1], random_state=0),
    DWDClassifier(mechanism="local-gaussian", clip_norm=2.0, classes=[0, 1], random_state=0),
    DWDClassifier(mechanism="local-tree", n_batches=3, clip_norm=2.0, classes=[0, 1],
                  random_state=0),
    DWDClassifier(mechanism="secagg-tree", n_batches=3, clip_norm=2.0, classes=[0, 1],
                  random_state=0),
    LogisticRegression(),
    LogisticRegression(solver="local-steps", feature_clip_norm=1.5, n_rounds=3),
    LogisticRegression(mechanism="tree", feature_clip_norm=1.5, epsilon=5.0, n_rounds=3,
                       classes=[0, 1], random_state=0),
    DecentralizedLogisticRegression(),
    DecentralizedLogisticRegression(mechanism="laplace", n_rounds=200, classes=[0, 1],
                                    random_state=0),
]

MULTICLASS = [
    LogisticRegression(),  # multinomial Newton
    LogisticRegression(solver="local-steps", n_rounds=2),
    DWDClassifier(mechanism="laplace", clip_norm=3.0, classes=list(range(10)), random_state=0),
    DecentralizedLogisticRegression(),
]

# the paths that densify their rows run the dense code on the same numbers
BIT_IDENTICAL = (DecentralizedLogisticRegression,)


def _fitted(estimator):
    names = ["coef_", "intercept_", "n_iter_", "coef_cov_", "privacy_spent_"]
    return {name: np.asarray(getattr(estimator, name)) for name in names
            if hasattr(estimator, name)}


def _assert_same_model(sparse_model, dense_model):
    dense, sparse = _fitted(dense_model), _fitted(sparse_model)
    assert dense.keys() == sparse.keys()
    for name in dense:
        if isinstance(dense_model, BIT_IDENTICAL):
            np.testing.assert_array_equal(sparse[name], dense[name], err_msg=name)
        else:
            np.testing.assert_allclose(sparse[name], dense[name], **TIGHT, err_msg=name)


def _assert_same_predictions(sparse_model, dense_model, X):
    np.testing.assert_allclose(sparse_model.decision_function(X),
                               dense_model.decision_function(X.toarray()), **TIGHT)
    np.testing.assert_array_equal(sparse_model.predict(X), dense_model.predict(X.toarray()))
    if hasattr(dense_model, "predict_proba"):
        np.testing.assert_allclose(sparse_model.predict_proba(X),
                                   dense_model.predict_proba(X.toarray()), **TIGHT)


def _fit_both(estimator, X, y, g):
    dense = estimator.__sklearn_clone__().fit(X.toarray(), y, sample_group=g)
    sparse = estimator.__sklearn_clone__().fit(X, y, sample_group=g)
    return sparse, dense


@pytest.mark.parametrize("data, estimator",
                         [(_random_sparse, e) for e in BINARY]
                         + [(_digits, e) for e in MULTICLASS],
                         ids=lambda v: getattr(v, "__name__", None) or repr(v))
def test_fit_on_csr_is_the_dense_fit(data, estimator):
    X, y, g = data()
    sparse, dense = _fit_both(estimator, X, y, g)
    _assert_same_model(sparse, dense)
    _assert_same_predictions(sparse, dense, X)


def test_dwd_on_digits_as_csr_is_the_dense_fit_to_its_rounding():
    # genDWD on digits at the default alpha is ill-conditioned: a pure
    # rounding change (the same dense rows in another order) moves coef_ by
    # ~5e-9, so the sparse sums' rounding may too, and not more
    X, y, g = _digits()
    sparse, dense = _fit_both(DWDClassifier(), X, y, g)
    order = np.random.default_rng(0).permutation(X.shape[0])
    shuffled = DWDClassifier().fit(X.toarray()[order], y[order], sample_group=g[order])
    spread = np.abs(shuffled.coef_ - dense.coef_).max()
    assert sparse.n_iter_ == dense.n_iter_
    assert np.abs(sparse.coef_ - dense.coef_).max() <= 4 * spread
    assert np.abs(sparse.intercept_ - dense.intercept_).max() <= 4 * spread + 1e-12
    np.testing.assert_array_equal(sparse.predict(X), dense.predict(X.toarray()))


@pytest.mark.parametrize("estimator", BINARY, ids=repr)
def test_partial_fit_on_csr_is_the_dense_stream(estimator):
    X, y, g = _random_sparse(n=300)
    batches = [slice(0, 100), slice(100, 200), slice(200, 300)]
    classes = np.array([0, 1])
    dense, sparse = estimator.__sklearn_clone__(), estimator.__sklearn_clone__()
    for rows in batches:
        dense.partial_fit(X[rows].toarray(), y[rows], sample_group=g[rows], classes=classes)
        sparse.partial_fit(X[rows], y[rows], sample_group=g[rows], classes=classes)
        _assert_same_model(sparse, dense)
    _assert_same_predictions(sparse, dense, X)


@pytest.mark.parametrize("to_format", [sp.csc_matrix, sp.coo_matrix, sp.csr_array])
def test_other_sparse_formats_are_taken_as_csr(to_format):
    X, y, g = _random_sparse()
    reference = DWDClassifier().fit(X, y, sample_group=g)
    clf = DWDClassifier().fit(to_format(X), y, sample_group=g)
    np.testing.assert_array_equal(clf.coef_, reference.coef_)
    np.testing.assert_array_equal(clf.decision_function(to_format(X)),
                                  reference.decision_function(X))


def test_threaded_sites_on_csr_give_the_pooled_model():
    # n_jobs=2: each group of sites gets its own CSR rows
    X, y, g = _random_sparse(n=3000, p=20)
    g = np.arange(3000) % 8
    reference = DWDClassifier().fit(X.toarray(), y, sample_group=g)
    clf = DWDClassifier(n_jobs=2).fit(X, y, sample_group=g)
    np.testing.assert_allclose(clf.coef_, reference.coef_, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("Estimator",
                         [DWDClassifier, LogisticRegression, DecentralizedLogisticRegression])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_stored_values_are_refused_before_any_change(Estimator, bad):
    X, y, g = _random_sparse()
    clf = Estimator().fit(X, y, sample_group=g)
    before = clf.coef_.copy()
    X_bad = X.copy()
    X_bad.data[3] = bad
    with pytest.raises(ValueError, match="NaN|infinity"):
        clf.fit(X_bad, y, sample_group=g)
    with pytest.raises(ValueError, match="NaN|infinity"):
        clf.partial_fit(X_bad, y, sample_group=g)
    np.testing.assert_array_equal(clf.coef_, before)
    with pytest.raises(ValueError, match="NaN|infinity"):
        clf.predict(X_bad)


# -- the pieces: sums, Gram matrices, clipping ------------------------------


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_augmented_sums_on_csr_are_the_brute_force_ones(fit_intercept):
    X, _, _ = _random_sparse(n=5000, p=12)  # more rows than one Gram block
    rng = np.random.default_rng(1)
    d = rng.normal(size=X.shape[0])  # signed weights, as the multinomial blocks
    Xbar = X.toarray()
    if fit_intercept:
        Xbar = np.hstack([np.ones((X.shape[0], 1)), Xbar])
    Theta, R = rng.normal(size=(Xbar.shape[1], 3)), rng.normal(size=(X.shape[0], 3))
    np.testing.assert_allclose(augmented_gram(X, d, fit_intercept), Xbar.T @ (d[:, None] * Xbar),
                               **TIGHT)
    np.testing.assert_allclose(augmented_gram(X, d**2, fit_intercept),
                               Xbar.T @ (d[:, None] ** 2 * Xbar), **TIGHT)
    np.testing.assert_allclose(augmented_scores(X, Theta, fit_intercept), Xbar @ Theta, **TIGHT)
    np.testing.assert_allclose(_augmented_sum(X, R, fit_intercept), Xbar.T @ R, **TIGHT)


@pytest.mark.parametrize("ord", [2, 1])
def test_clip_rows_on_csr_is_the_dense_clip(ord):
    X, _, _ = _random_sparse(n=400, p=30, density=0.3)
    X = X.multiply(np.linspace(0.1, 40.0, X.shape[0])[:, None]).tolil()
    X[5] = 0.0  # an empty row
    X = X.tocsr()
    for max_norm in (0.5, 3.0, 1e6):
        clipped = clip_rows(X, max_norm, ord=ord)
        dense = clip_rows(X.toarray(), max_norm, ord=ord)
        assert sp.issparse(clipped)
        np.testing.assert_allclose(clipped.toarray(), dense, rtol=1e-14, atol=0.0)
        norms = np.linalg.norm(clipped.toarray(), ord=ord, axis=1)
        assert np.all(norms <= max_norm)
        inside = np.linalg.norm(X.toarray(), ord=ord, axis=1) <= max_norm
        np.testing.assert_array_equal(clipped.toarray()[inside], X.toarray()[inside])
        assert clipped.nnz == X.nnz  # zeros stay zeros, no value is dropped
    assert X.data.max() > 1.0  # the input is untouched (clipping copies)


def test_clip_of_augmented_csr_rows_bounds_the_augmented_norm():
    X, _, _ = _random_sparse(n=300, p=20, density=0.5)
    X = (X * 5.0).tocsr()
    clipped = clip_augmented_rows(X, 2.0, True)
    np.testing.assert_allclose(clipped.toarray(), clip_augmented_rows(X.toarray(), 2.0, True),
                               rtol=1e-14, atol=0.0)
    augmented = np.hstack([np.ones((X.shape[0], 1)), clipped.toarray()])
    assert np.all(np.linalg.norm(augmented, axis=1) <= 2.0)


def test_clip_rows_refuses_non_finite_stored_values():
    X, _, _ = _random_sparse()
    X.data[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        clip_rows(X, 1.0)


# -- scikit-learn's sparse checks, and memory --------------------------------


# check_estimator_sparse_tag came with scikit-learn 1.7; CI also runs 1.6
SPARSE_CHECKS = [getattr(estimator_checks, name) for name in (
    "check_estimator_sparse_array", "check_estimator_sparse_matrix", "check_estimator_sparse_tag")
    if hasattr(estimator_checks, name)]


@pytest.mark.parametrize("check", SPARSE_CHECKS, ids=lambda check: check.__name__)
@pytest.mark.parametrize("Estimator",
                         [DWDClassifier, LogisticRegression, DecentralizedLogisticRegression])
def test_scikit_learn_sparse_checks(Estimator, check):
    estimator = Estimator()
    assert estimator.__sklearn_tags__().input_tags.sparse
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(Estimator.__name__, estimator)


@pytest.mark.parametrize("estimator", [DWDClassifier(), LogisticRegression()], ids=repr)
def test_a_sparse_fit_does_not_densify_the_rows(estimator):
    # 20 000 x 400 rows dense are 64 MB; the fit's own arrays (scores,
    # (p+1)^2 curvature matrices) are a few MB
    n, p = 20_000, 400
    X = sp.random(n, p, density=0.01, format="csr", random_state=0)
    y = np.random.default_rng(0).integers(2, size=n)
    tracemalloc.start()
    try:
        estimator.fit(X, y)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n * p * 8 / 4


def test_dask_sites_take_the_csr_rows():
    # the Dask path scatters each site group's CSR rows as they are
    distributed = pytest.importorskip("distributed")
    import joblib

    X, y, _ = _random_sparse(n=400, p=10)
    g = np.arange(400) % 4
    reference = DWDClassifier().fit(X.toarray(), y, sample_group=g)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None, silence_logs="error") as cluster, \
            distributed.Client(cluster), joblib.parallel_config(backend="dask"):
        clf = DWDClassifier(n_jobs=2).fit(X, y, sample_group=g)
    np.testing.assert_allclose(clf.coef_, reference.coef_, **TIGHT)


def test_clip_rows_bounds_rows_that_store_a_column_twice():
    # a non-canonical CSR row: column 0 stored twice (value 3 + 3 = 6)
    X = sp.csr_matrix((np.array([3.0, 3.0, 0.0]), np.array([0, 0, 1]), np.array([0, 3])),
                      shape=(1, 2))
    clipped = clip_rows(X, 5.0).toarray()
    assert np.linalg.norm(clipped) <= 5.0
    np.testing.assert_allclose(clipped, clip_rows(X.toarray(), 5.0), rtol=1e-14)
    transformed = RowNormClipper(max_norm=5.0).fit_transform(X).toarray()
    assert np.linalg.norm(transformed) <= 5.0 * (1 + 1e-15)
    assert X.nnz == 3  # the input is left as it was
