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


# -- many sites: grouped into worker tasks ---------------------------------------

from skfedpriv._sites import (  # noqa: E402
    group_site_rows,
    grouped_row_indices,
    map_sites,
    site_groups,
    site_row_indices,
)


@pytest.mark.parametrize("n_jobs", [2, 3])
@pytest.mark.parametrize("n_sites", [1, 5, 6, 7, 1000])
def test_site_groups_are_runs_of_whole_sites(n_sites, n_jobs):
    rng = np.random.default_rng(n_sites)
    sizes = rng.integers(0, 50, n_sites)
    group_of_site, n_groups = site_groups(sizes, n_jobs)
    assert 1 <= n_groups <= min(n_sites, 2 * n_jobs)
    if n_sites == 1000:
        assert n_groups == 2 * n_jobs
    assert np.all(np.diff(group_of_site) >= 0)  # runs of sites, in order
    assert set(group_of_site.tolist()) == set(range(n_groups))  # no empty group
    if n_sites == 1000:  # rows spread about evenly
        rows = np.bincount(group_of_site, weights=sizes)
        assert rows.max() - rows.min() <= 2 * sizes.max()


def test_grouped_rows_are_the_sites_rows_gathered():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 500, 3000)
    per_site = site_row_indices(codes, 500)
    groups = grouped_row_indices(codes, 500, n_jobs=2)
    assert len(groups) == 4
    assert ([sorted(g.tolist()) for g in groups]
            == [sorted(g.tolist()) for g in group_site_rows(per_site, 2)])
    assert sorted(np.concatenate(groups).tolist()) == list(range(3000))
    for rows in groups:  # each site wholly in one group
        sites = np.unique(codes[rows])
        assert np.isin(np.flatnonzero(np.isin(codes, sites)), rows).all()


@pytest.mark.parametrize("n_rows, n_jobs, expected", [(10**6, 2, True), (10**5, 2, False),
                                                      (10**6, None, False)])
def test_small_batches_stay_one_pass_under_local_backends(n_rows, n_jobs, expected):
    from skfedpriv._sites import splits_sites

    assert splits_sites(50, n_rows, n_jobs) is expected
    assert splits_sites(1, n_rows, n_jobs) is False


def test_map_sites_keeps_the_order_of_the_sites_on_threads():
    out = map_sites(lambda a, b: a * b, [(i, 2) for i in range(50)], n_jobs=2)
    assert out == [2 * i for i in range(50)]


def test_many_sites_on_two_jobs_fit_the_in_process_model(monkeypatch):
    monkeypatch.setattr("skfedpriv._sites._MIN_ROWS_PER_JOB", 0)  # split even small batches
    rng = np.random.default_rng(1)
    X = rng.standard_normal((3000, 4))
    y = (X[:, 0] + rng.standard_normal(3000) > 0).astype(int)
    g = rng.integers(0, 2000, 3000)
    pooled = DWDClassifier().fit(X, y, sample_group=g)
    grouped = DWDClassifier(n_jobs=2).fit(X, y, sample_group=g)
    np.testing.assert_allclose(grouped.coef_, pooled.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(grouped.intercept_, pooled.intercept_, rtol=1e-9, atol=1e-12)
