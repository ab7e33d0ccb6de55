"""Data-independent preprocessing: bounds hold, rows are mapped alone, and a
private pipeline keeps working."""

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfedpriv import DWDClassifier
from skfedpriv.preprocessing import BoundedScaler, RowNormClipper


@parametrize_with_checks([RowNormClipper(), BoundedScaler()])
def test_sklearn_compatible(estimator, check):
    check(estimator)


def _wild_rows(seed=0, n=50, p=4):
    rng = np.random.default_rng(seed)
    return rng.standard_cauchy((n, p)) * rng.choice([0.01, 1.0, 1e6], size=(n, 1))


@pytest.mark.parametrize(
    "norm,ord", [("l2", 2), ("l1", 1), ("max", np.inf)]
)
def test_row_norm_clipper_bounds_and_keeps_direction(norm, ord):
    X = _wild_rows()
    Z = RowNormClipper(max_norm=2.5, norm=norm).fit_transform(X)
    norms_in = np.linalg.norm(X, ord=ord, axis=1)
    norms_out = np.linalg.norm(Z, ord=ord, axis=1)
    assert np.all(norms_out <= 2.5 * (1 + 1e-12))
    inside = norms_in <= 2.5
    np.testing.assert_array_equal(Z[inside], X[inside])          # untouched
    np.testing.assert_allclose(norms_out[~inside], 2.5)          # on the sphere
    # same direction: Z = c X with c in (0, 1]
    scale = norms_out / np.where(norms_in > 0, norms_in, 1.0)
    np.testing.assert_allclose(Z, scale[:, None] * X, rtol=1e-12, atol=0)


def test_row_norm_clipper_l2_survives_overflowing_squares():
    X = np.array([[1e200, 1e200], [0.0, 0.0]])
    Z = RowNormClipper(max_norm=1.0).fit_transform(X)
    np.testing.assert_allclose(Z, [[2**-0.5, 2**-0.5], [0.0, 0.0]])


def test_bounded_scaler_affine_map_and_clipping():
    lower, upper = np.array([0.0, -10.0, 5.0]), np.array([100.0, 10.0, 6.0])
    X = np.array([[0.0, -10.0, 5.0], [100.0, 10.0, 6.0], [50.0, 0.0, 5.25],
                  [-3.0, 1e9, 7.0]])
    Z = BoundedScaler(lower, upper).fit_transform(X)
    np.testing.assert_allclose(
        Z, [[-1, -1, -1], [1, 1, 1], [0, 0, -0.5], [-1, 1, 1]]
    )
    unclipped = BoundedScaler(lower, upper, clip=False).fit_transform(X)
    np.testing.assert_allclose(unclipped[:3], Z[:3])
    assert unclipped[3, 0] == pytest.approx(-1.06) and unclipped[3, 2] == 3.0


def test_bounded_scaler_output_in_cube_for_any_input():
    X = _wild_rows(p=6)
    Z = BoundedScaler(lower=-1.0, upper=[1, 2, 3, 4, 5, 6]).fit_transform(X)
    assert np.all(np.abs(Z) <= 1.0)


@pytest.mark.parametrize(
    "make",
    [lambda: RowNormClipper(max_norm=1.5), lambda: RowNormClipper(3.0, norm="l1"),
     lambda: BoundedScaler(lower=[-2, 0, -1, 0], upper=[2, 1, 1, 10])],
)
def test_row_image_does_not_depend_on_other_rows(make):
    """Fit on entirely different data, transform in different company: the
    image of a row is the same (nothing is read from the data)."""
    X_a, X_b = _wild_rows(seed=1), _wild_rows(seed=2) * 1e3 + 7.0
    row = np.array([[0.7, -3.0, 0.2, 4.0]])
    outs = []
    for fit_rows in (X_a, X_b, row):
        fitted = make().fit(fit_rows)
        for company in (X_a, X_b):
            stacked = np.vstack([company[:10], row, company[10:]])
            outs.append(fitted.transform(stacked)[10])
        outs.append(fitted.transform(row)[0])
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])
    # and the fit leaves no data-derived state behind: only n_features_in_
    fitted = make().fit(X_a)
    learned = {k for k in vars(fitted) if k.endswith("_")}
    assert learned == {"n_features_in_"}


def test_transform_without_fit_is_the_same_map():
    X = _wild_rows()
    for est in (RowNormClipper(2.0), BoundedScaler(-3, 3)):
        np.testing.assert_array_equal(clone(est).transform(X), clone(est).fit_transform(X))


@pytest.mark.parametrize(
    "est,error",
    [
        (RowNormClipper(max_norm=0.0), ValueError),
        (RowNormClipper(max_norm=np.inf), ValueError),
        (RowNormClipper(max_norm="1"), TypeError),
        (RowNormClipper(norm="l3"), ValueError),
        (BoundedScaler(lower=1.0, upper=1.0), ValueError),
        (BoundedScaler(lower=[0, 0, 0], upper=[1, 1, -1]), ValueError),
        (BoundedScaler(lower=[0, 0], upper=1.0), ValueError),    # wrong length
        (BoundedScaler(lower=-np.inf, upper=1.0), ValueError),
        (BoundedScaler(lower="low", upper=1.0), TypeError),
        (BoundedScaler(clip="yes"), ValueError),
    ],
)
def test_bad_hyperparameters_raise_and_are_not_mutated(est, error):
    before = repr(est.get_params())
    with pytest.raises(error):
        est.fit(np.zeros((4, 3)))
    with pytest.raises(error):
        est.transform(np.zeros((4, 3)))
    assert repr(est.get_params()) == before


def test_nan_rows_are_refused():
    X = np.array([[1.0, np.nan]])
    for est in (RowNormClipper(), BoundedScaler()):
        with pytest.raises(ValueError):
            est.fit_transform(X)


def test_feature_names_pass_through():
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame({"age": [30.0, 90.0], "dose": [1.0, 5.0]})
    scaler = BoundedScaler([0, 0], [100, 10]).set_output(transform="pandas")
    out = scaler.fit_transform(X)
    assert list(out.columns) == ["age", "dose"]
    np.testing.assert_allclose(out.to_numpy(), [[-0.4, -0.8], [0.8, 0.0]])
    assert list(RowNormClipper().fit(X).get_feature_names_out()) == ["age", "dose"]


def _digits():
    X, y = load_digits(n_class=2, return_X_y=True)   # pixels in [0, 16]
    return X, y, np.arange(len(y)) % 3


def test_private_pipeline_bounded_scaler_dwd():
    """BoundedScaler then a site-local Gaussian DWD: clip_norm = sqrt(p + 1)
    is never binding, the guarantee is the estimator's, and it learns."""
    X, y, sites = _digits()
    dwd = DWDClassifier(mechanism="local-gaussian", epsilon=1.0, delta=1e-5,
                        clip_norm=np.sqrt(X.shape[1] + 1), random_state=0, classes=[0, 1])
    pipe = make_pipeline(BoundedScaler(lower=0, upper=16), dwd)
    pipe.fit(X, y, dwdclassifier__sample_group=sites)
    step = pipe[-1]
    assert step.privacy_spent_ == (1.0, 1e-5)
    assert pipe.score(X, y) > 0.95
    # the scaler's output never exceeds what the estimator's clipping assumes
    Z = pipe[0].transform(X)
    assert np.all(np.sqrt(1 + (Z**2).sum(axis=1)) <= step.clip_norm + 1e-12)
    # same model as feeding the scaled rows to the estimator by hand
    alone = clone(dwd).fit(Z, y, sample_group=sites)
    np.testing.assert_array_equal(step.coef_, alone.coef_)
    # a stream through the pipeline's pieces, and a pickle round trip
    stream = clone(dwd)
    for batch in np.array_split(np.arange(len(y)), 3):
        stream.partial_fit(Z[batch], y[batch], sample_group=sites[batch], classes=[0, 1])
    assert stream.n_batches_ == 3 and stream.privacy_spent_ == (1.0, 1e-5)
    assert np.all(np.isfinite(stream.coef_))
    again = pickle.loads(pickle.dumps(pipe))
    np.testing.assert_array_equal(again.predict(X), pipe.predict(X))


def test_private_pipeline_in_grid_search():
    X, y, sites = _digits()
    pipe = make_pipeline(
        RowNormClipper(max_norm=40.0),
        DWDClassifier(mechanism="local-gaussian", epsilon=2.0, clip_norm=41.0,
                      random_state=0, classes=[0, 1]),
    )
    search = GridSearchCV(pipe, {"rownormclipper__max_norm": [20.0, 40.0]}, cv=3)
    search.fit(X, y, dwdclassifier__sample_group=sites)
    assert search.best_score_ > 0.9
