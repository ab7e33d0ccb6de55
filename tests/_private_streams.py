"""A private DWD stream run the way a user resumes one, for the mechanism tests."""

import pickle

import numpy as np
import pytest

from skfedpriv import DWDClassifier, StreamReplayError
from skfedpriv.privacy import HorizonExceededError


def resumed_stream(params, budget, X, y, g, b):
    """Run the batches ``b`` with ``budget``, pickled and resumed at batch 2,
    beside a never-pickled twin on the same seed (same models after every
    batch); the original copy may not continue too; one more batch past the
    horizon raises and changes nothing. Returns the fitted estimator."""
    reference = DWDClassifier(**params)
    clf = DWDClassifier(**params, budget=budget)
    for k in range(int(b.max()) + 1):
        m = b == k
        if k == 2:
            original, clf = clf, pickle.loads(pickle.dumps(clf))
        clf.partial_fit(X[m], y[m], sample_group=g[m])
        reference.partial_fit(X[m], y[m], sample_group=g[m])
        np.testing.assert_array_equal(clf.coef_, reference.coef_)
    with pytest.raises(StreamReplayError):
        original.partial_fit(X[b == 2], y[b == 2], sample_group=g[b == 2])
    before = pickle.dumps(clf.__dict__)
    with pytest.raises(HorizonExceededError):
        clf.partial_fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
    assert pickle.dumps(clf.__dict__) == before
    return clf
