"""Site labels: encoding of ``sample_group`` and refusal of ambiguous labels."""

import numpy as np
import pytest

from skfedpriv import DecentralizedLogisticRegression, DWDClassifier, LogisticRegression
from skfedpriv._sites import check_sample_group


@pytest.mark.parametrize("groups", [
    [3, "3", 1],
    np.array([3, "3", 1], dtype=object),
    ["a", 2.5, "a"],
])
def test_mixed_string_and_number_site_labels_are_refused(groups):
    # np.asarray([3, "3", 1]) silently turns 3 into "3" (one site); an object
    # array keeps two sites: both are refused with one clear message
    with pytest.raises(ValueError, match="mixes string and number"):
        check_sample_group(groups, 3)


@pytest.mark.parametrize("groups, n_sites", [
    ([3, 3, 1], 2),
    (["3", "3", "1"], 2),
    (np.array(["a", "b", "a"], dtype=object), 2),
    ([1.0, 2.5, 1.0], 2),
])
def test_homogeneous_site_labels_encode_as_before(groups, n_sites):
    labels, codes = check_sample_group(groups, 3)
    assert len(labels) == n_sites
    assert [labels[c] for c in codes] == list(groups)


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint8, np.uint64])
@pytest.mark.parametrize("where", ["zero", "low end", "high end", "wide"])
def test_integer_site_labels_encode_as_numpy_unique(dtype, where):
    # integer labels in a narrow range are encoded by counting: the result is
    # np.unique's, at either end of the type's range too
    info = np.iinfo(dtype)
    low = {"zero": 0, "low end": info.min, "high end": info.max - 40,
           "wide": info.min}[where]
    high = info.max if where == "wide" else low + 40
    rng = np.random.default_rng(0)
    groups = rng.integers(low, high, 300, endpoint=True, dtype=dtype)
    groups[:2] = low, high
    labels, codes = check_sample_group(groups, len(groups))
    expected_labels, expected_codes = np.unique(groups, return_inverse=True)
    assert labels.dtype == expected_labels.dtype
    np.testing.assert_array_equal(labels, expected_labels)
    np.testing.assert_array_equal(codes, expected_codes.ravel())


@pytest.mark.parametrize("make", [
    lambda: DWDClassifier(),
    lambda: LogisticRegression(n_rounds=5),
    lambda: DecentralizedLogisticRegression(),
])
def test_estimators_refuse_mixed_site_labels_before_any_state(make):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 3))
    y = np.arange(12) % 2
    est = make()
    with pytest.raises(ValueError, match="mixes string and number"):
        est.fit(X, y, sample_group=[3, "3"] * 6)
    assert not [k for k in vars(est) if k.endswith("_")]


def test_tuples_and_strings_are_distinct_hashable_labels():
    labels, codes = check_sample_group(np.array([("a", 1), "a", "b"], dtype=object), 3)
    assert len(labels) == 3
