"""The label checks of a fit (issue #23, the fixed cost of a small fit): the
batch's target type is read once, and every rejected label set is still
rejected with scikit-learn's own error, every warning still raised, in the
same order against the other checks. Each expectation is what
scikit-learn's functions themselves raise on the same labels."""

import warnings

import numpy as np
import pytest
from sklearn.utils import multiclass
from sklearn.utils.multiclass import check_classification_targets, unique_labels
from sklearn.utils.validation import validate_data

from skfedpriv.linear_model import DecentralizedLogisticRegression, DWDClassifier, LogisticRegression
from skfedpriv.linear_model import _base

X = np.random.default_rng(0).standard_normal((30, 3))
ESTIMATORS = [DWDClassifier, LogisticRegression, DecentralizedLogisticRegression]


def _raised(func, *args):
    with pytest.raises(Exception) as info:
        func(*args)
    return info.type, str(info.value)


@pytest.mark.parametrize("make", ESTIMATORS)
@pytest.mark.parametrize("y", [np.linspace(0, 1, 30),                 # continuous
                               np.array(["a", 1] * 15, dtype=object),   # string and number
                               np.array([[0.5, 1.5]] * 15).ravel()],    # float classes
                         ids=["continuous", "mixed", "float"])
def test_fit_rejects_targets_as_sklearn(make, y):
    expected = _raised(check_classification_targets, y)
    assert _raised(make().fit, X, y) == expected
    assert _raised(make().partial_fit, X, y, None, *([None] if make is DWDClassifier else []),
                   np.array([0, 1])) == expected


@pytest.mark.parametrize("make", ESTIMATORS)
def test_one_class_and_unseen_labels(make):
    with pytest.raises(ValueError, match="only one class is present"):
        make().fit(X, np.zeros(30))
    with pytest.raises(ValueError, match=r"y contains labels array\(\[2\]\) that are not in"):
        make().partial_fit(X, np.arange(30) % 3, classes=[0, 1])
    model = make().partial_fit(X, np.arange(30) % 2, classes=[0, 1])
    # a later batch: labels against classes_, continuous ones included
    with pytest.raises(ValueError, match=r"y contains labels array\(\[5\]\) that are not in"):
        model.partial_fit(X, np.where(np.arange(30) < 29, 0, 5))
    with pytest.raises(ValueError, match="that are not in classes"):
        model.partial_fit(X, np.linspace(0, 1, 30))
    expected = _raised(unique_labels, np.array(["a", 1], dtype=object))
    assert _raised(make().partial_fit, X, np.arange(30) % 2, None,
                   *([None] if make is DWDClassifier else []),
                   np.array(["a", 1], dtype=object)) == expected


@pytest.mark.parametrize("y", [np.arange(30) % 20, np.array(["b", "a", "c"] * 10),
                               np.arange(30) % 2 + 0.0, np.array([True, False] * 15)],
                         ids=["many", "strings", "floats", "bool"])
def test_classes_and_warnings_as_sklearn(y):
    with warnings.catch_warnings(record=True) as expected:
        warnings.simplefilter("always")
        check_classification_targets(y)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        model = DWDClassifier(max_iter=5).fit(X, y)
    assert [str(w.message) for w in got if w.category is UserWarning] == \
        [str(w.message) for w in expected]
    classes = unique_labels(y)
    assert model.classes_.dtype == classes.dtype
    np.testing.assert_array_equal(model.classes_, classes)


def test_private_fit_checks_the_target_type_then_asks_for_classes():
    # the target type is checked first, then a private fit without declared
    # classes is refused before the labels' set is read
    y = np.linspace(0, 1, 30)
    assert _raised(DWDClassifier(mechanism="gaussian", clip_norm=2.0).fit, X, y) == \
        _raised(check_classification_targets, y)
    with pytest.raises(ValueError, match="must be declared"):
        DWDClassifier(mechanism="gaussian", clip_norm=2.0).fit(X, np.arange(30) % 2)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_target_type_read_once_per_fit(monkeypatch):
    calls = []
    original = multiclass.type_of_target

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(multiclass, "type_of_target", counted)
    monkeypatch.setattr(_base, "type_of_target", counted)
    # string labels (integer ones are typed without it: the test below)
    y = np.array(["a", "b", "c"])[np.arange(30) % 3]
    model = DWDClassifier(max_iter=2).fit(X, y)
    # scikit-learn < 1.7's unique_labels reads the type again itself
    assert len(calls) == (1 if _base._UNIQUE_LABELS_TAKES_TYPES else 2)
    np.testing.assert_array_equal(model.classes_, ["a", "b", "c"])
    # declared classes (the hyperparameter) are put in order once
    calls.clear()
    DWDClassifier(max_iter=2, classes=["c", "a", "b"]).fit(X, y)
    assert len(calls) == 2  # the labels' type, the declared classes


@pytest.mark.filterwarnings("ignore:The number of unique classes")
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint64, bool])
def test_integer_labels_typed_as_type_of_target_and_unique_labels(dtype):
    # integer and boolean labels are typed from their sorted distinct values:
    # type_of_target's answer and unique_labels' array (values and dtype) on
    # every length and label count
    rng = np.random.default_rng(0)
    low = 0 if np.dtype(dtype).kind in "ub" else -3
    for n in (1, 2, 3, 21, 40):
        for k in (1, 2, 3, 25):
            y = rng.integers(low, low + k, n).astype(dtype)
            y_type, labels = _base._classification_target_type(y)
            assert y_type == multiclass.type_of_target(y)
            expected = unique_labels(y)
            assert labels.dtype == expected.dtype
            np.testing.assert_array_equal(labels, expected)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_sites_classes_as_sklearn(monkeypatch):
    from skfedpriv.linear_model._dwd_solver import SiteData

    y = np.array(["b", "a", "c"] * 10)
    sites = lambda labels: SiteData.from_rows(X, labels, np.ones(30), [np.arange(30)])
    model = DWDClassifier(max_iter=2).fit_sites(sites(y))
    np.testing.assert_array_equal(model.classes_, unique_labels(y))
    assert _raised(DWDClassifier().fit_sites, sites(np.linspace(0, 1, 30))) == \
        _raised(unique_labels, np.linspace(0, 1, 30))
    with pytest.raises(ValueError, match="not in classes"):
        DWDClassifier(classes=["a", "b"]).fit_sites(sites(y))
    calls = []
    original = multiclass.type_of_target
    monkeypatch.setattr(multiclass, "type_of_target",
                        lambda *a, **k: calls.append(1) or original(*a, **k))
    DWDClassifier(max_iter=2).fit_sites(sites(y))
    assert len(calls) == 1  # the labels' set, read once


def _validate(X, y, estimator):
    """scikit-learn's validate_data on a fit's batch, as _validate_batch calls it."""
    return estimator, validate_data(estimator, X, y, reset=True, dtype=np.float64,
                                    y_numeric=False, accept_sparse="csr")


@pytest.mark.parametrize("X_bad", [np.full((30, 3), np.nan), np.full((30, 3), np.inf),
                                   np.zeros((30, 0)), np.zeros((0, 3)), X.astype(np.float32),
                                   X[:, :, None], X.astype(object)],
                         ids=["nan", "inf", "no-features", "no-rows", "float32", "3d", "object"])
@pytest.mark.parametrize("make", ESTIMATORS)
def test_fit_on_ready_arrays_is_validate_data(make, X_bad):
    """A fit's ready numpy batch skips validate_data (``_is_validated_batch``
    with ``reset``) only where validate_data returns it unchanged and raises
    nothing; everything else raises validate_data's own error or is
    converted by it."""
    y = np.arange(len(X_bad)) % 2
    ready = _base._is_validated_batch(make(), X_bad, y, reset=True)
    try:
        _, (X_out, y_out) = _validate(X_bad, y, make())
    except Exception as error:  # noqa: BLE001 - the expectation is its error
        assert not ready
        assert _raised(make().fit, X_bad, y) == (type(error), str(error))
        return
    assert ready == (X_out is X_bad)
    for X_ok in (X, X.astype(np.float32)):
        yy = np.arange(len(X_ok)) % 2
        assert _base._is_validated_batch(make(), X_ok, yy, reset=True) == (
            _validate(X_ok, yy, make())[1][0] is X_ok)


@pytest.mark.parametrize("make", ESTIMATORS)
def test_fit_on_ready_arrays_writes_what_validate_data_writes(make):
    """After a fit on named columns, a fit on a plain array drops
    ``feature_names_in_`` and sets ``n_features_in_``, as validate_data's
    reset does (the fast path writes them itself)."""
    pd = pytest.importorskip("pandas")
    y = np.arange(30) % 2
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    model = make().fit(frame, y)
    assert list(model.feature_names_in_) == ["a", "b", "c"]
    X_wide = np.random.default_rng(1).standard_normal((30, 5))
    assert _base._is_validated_batch(model, X_wide, y, reset=True)
    model.fit(X_wide, y)
    reference, _ = _validate(X_wide, y, make().fit(frame, y))
    assert model.n_features_in_ == reference.n_features_in_ == 5
    assert not hasattr(model, "feature_names_in_") and not hasattr(reference, "feature_names_in_")
