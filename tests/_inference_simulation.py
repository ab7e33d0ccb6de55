"""The simulation the inference tests share: estimates, variances and 95 %
intervals of LogisticRegression(inference=True) over many simulated data
sets, offline and as a stream, and the two checks run on them."""

import warnings

import numpy as np

from skfedpriv import LogisticRegression


def simulate(make_rows, classes, *, reps, n, batches, alpha=1e-6):
    """``{'offline' | 'stream': (estimates, variances, intervals)}`` over
    ``make_rows(n, seed)`` for ``seed`` in ``100 + range(reps)``; parameters
    class-major (``np.column_stack([intercept_, coef_]).ravel()``)."""
    out = {key: ([], [], []) for key in ("offline", "stream")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(reps):
            X, y = make_rows(n, 100 + seed)
            offline = LogisticRegression(alpha=alpha, inference=True).fit(X, y)
            stream = LogisticRegression(alpha=alpha, inference=True)
            for rows in np.array_split(np.arange(n), batches):
                stream.partial_fit(X[rows], y[rows], classes=classes)
            for key, clf in (("offline", offline), ("stream", stream)):
                out[key][0].append(np.column_stack([clf.intercept_, clf.coef_]).ravel())
                out[key][1].append(np.diag(clf.coef_cov_[0]))
                out[key][2].append(clf.confint().reshape(-1, 2))
    return {key: tuple(np.array(v) for v in values) for key, values in out.items()}


def assert_spread_matches(estimates, variances):
    """Mean standard error over the estimates' spread, within 15 % per
    parameter (200 replications: the spread itself is within ~5 %)."""
    ratio = np.sqrt(variances.mean(axis=0)) / estimates.std(axis=0, ddof=1)
    assert np.all((ratio > 0.85) & (ratio < 1.15)), ratio


def assert_covers(intervals, target):
    """Pooled coverage of ``target`` in [0.90, 0.99]."""
    covered = (intervals[..., 0] <= target) & (target <= intervals[..., 1])
    assert 0.90 <= covered.mean() <= 0.99, covered.mean(axis=0)
    return covered
