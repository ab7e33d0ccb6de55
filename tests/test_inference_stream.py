"""Streams with inference=True: a first batch that does not show every class
is refused before anything changes; batches too small for the parameter
count warn (the shift index from public quantities); later batches of one
class are fine."""

import math
import warnings

import numpy as np
import pytest
from scipy.special import expit

from skfedpriv import DWDClassifier, LogisticRegression
from skfedpriv.linear_model import StreamShiftWarning
from skfedpriv.linear_model._inference_stream import SHIFT_INDEX_LIMIT, track_stream_shift

ESTIMATORS = [lambda: LogisticRegression(inference=True), lambda: DWDClassifier(inference=True)]


def _rows(n, seed, n_classes=2, n_features=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_features))
    if n_classes == 2:
        return X, (rng.random(n) < expit(0.4 + X[:, 0] - 0.7 * X[:, 1])).astype(int)
    return X, rng.integers(n_classes, size=n)


@pytest.mark.parametrize("make", ESTIMATORS)
def test_first_batch_of_one_class_is_refused_and_changes_nothing(make):
    X, y = _rows(300, 0)
    zeros = y == 0
    clf = make()
    with pytest.raises(ValueError, match="first batch of a stream must show every class"):
        clf.partial_fit(X[zeros], y[zeros], classes=[0, 1])
    assert not hasattr(clf, "coef_") and not hasattr(clf, "coef_se_")
    # a stream that starts with both classes takes a later one-class batch
    clf.partial_fit(X[:100], y[:100], classes=[0, 1])
    rest = np.flatnonzero(zeros)[-40:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StreamShiftWarning)
        clf.partial_fit(X[rest], y[rest])
    assert np.all(np.isfinite(clf.coef_se_)) and np.all(clf.intercept_se_ > 0)


def test_first_multinomial_batch_without_every_class_is_refused():
    X, y = _rows(300, 1, n_classes=3)
    clf = LogisticRegression(inference=True)
    two = y < 2
    with pytest.raises(ValueError, match="must show every class"):
        clf.partial_fit(X[two], y[two], classes=[0, 1, 2])
    assert not hasattr(clf, "coef_")
    # without inference the stream may start so (its model starts later)
    LogisticRegression().partial_fit(X[two], y[two], classes=[0, 1, 2])


def test_shift_index_of_equal_batches_is_the_harmonic_sum():
    """``I = n_params (H_B - 1) / √N`` for B equal batches; the warning
    fires exactly when ``I`` passes the limit."""
    n_params, size, ratio = 6, 100.0, None
    for b in range(1, 21):
        seen = b * size
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ratio = track_stream_shift(ratio, size, seen, n_params, "X")
        harmonic = sum(1.0 / j for j in range(2, b + 1))
        assert ratio == pytest.approx(harmonic)
        index = n_params * harmonic / math.sqrt(seen)
        assert bool(caught) == (index > SHIFT_INDEX_LIMIT), (b, index)
        assert all(issubclass(w.category, StreamShiftWarning) for w in caught)


@pytest.mark.parametrize("make", ESTIMATORS)
def test_small_batches_warn_and_a_large_first_batch_does_not(make):
    X, y = _rows(2000, 2, n_features=8)  # 9 parameters: I = 0.54 after 7 batches of 100
    small = make()
    with pytest.warns(StreamShiftWarning, match="rows"):
        for rows in np.array_split(np.arange(2000), 20):
            small.partial_fit(X[rows], y[rows], classes=[0, 1])
    fitted = make().fit(X[:1800], y[:1800])
    with warnings.catch_warnings():
        warnings.simplefilter("error", StreamShiftWarning)
        fitted.partial_fit(X[1800:1900], y[1800:1900])
        fitted.partial_fit(X[1900:], y[1900:])
        make().fit(X, y)
