"""Site-aware splitters: GroupKFold's splits, with the sites passed once."""

import numpy as np
import pytest
import sklearn
from sklearn.datasets import make_classification
from sklearn.model_selection import (
    GridSearchCV,
    GroupKFold,
    LeaveOneGroupOut,
    cross_validate,
)
from sklearn.pipeline import make_pipeline

from skfedpriv import BoundedScaler, DWDClassifier
from skfedpriv.model_selection import LeaveOneSiteOut, SiteKFold

PAIRS = [(SiteKFold(3), GroupKFold(3)),
         (SiteKFold(4, shuffle=True, random_state=1), GroupKFold(4, shuffle=True, random_state=1)),
         (LeaveOneSiteOut(), LeaveOneGroupOut())]


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=150, n_features=4, random_state=0)
    sites = np.random.default_rng(0).choice(["h1", "h2", "h3", "h4", "h5"], size=150)
    return X, y, sites


def _splits(splits):
    return [(train.tolist(), test.tolist()) for train, test in splits]


@pytest.mark.parametrize("ours, theirs", PAIRS, ids=lambda s: type(s).__name__)
def test_splits_are_the_group_splitters_on_the_sites(data, ours, theirs):
    X, y, sites = data
    expected = _splits(theirs.split(X, y, groups=sites))
    assert _splits(ours.split(X, y, sample_group=sites)) == expected
    assert _splits(ours.split(X, y, groups=sites)) == expected
    assert _splits(ours.split(X, y, groups=sites, sample_group=sites)) == expected
    assert ours.get_n_splits(X, y, sample_group=sites) == theirs.get_n_splits(X, y, sites)


def test_sites_must_be_given_once_and_agree(data):
    X, y, sites = data
    with pytest.raises(ValueError, match="sample_group=sites"):
        next(SiteKFold(3).split(X, y))
    with pytest.raises(ValueError, match="different sites"):
        next(SiteKFold(3).split(X, y, groups=sites, sample_group=sites[::-1]))


def _search(cv):
    pipe = make_pipeline(BoundedScaler(lower=-5.0, upper=5.0), DWDClassifier())
    return GridSearchCV(pipe, {"dwdclassifier__alpha": [1e-2, 1.0]}, cv=cv)


def test_routed_search_takes_the_sites_once(data):
    X, y, sites = data
    expected = _search(GroupKFold(3)).fit(X, y, groups=sites, dwdclassifier__sample_group=sites)
    with sklearn.config_context(enable_metadata_routing=True):
        routed = _search(SiteKFold(3)).fit(X, y, sample_group=sites)
        scores = cross_validate(DWDClassifier(), X, y, cv=LeaveOneSiteOut(),
                                params={"sample_group": sites})["test_score"]
    np.testing.assert_allclose(routed.cv_results_["mean_test_score"],
                               expected.cv_results_["mean_test_score"])
    # one fold per site, each fit on the other sites' rows through sample_group
    for score, site in zip(scores, np.unique(sites)):
        held_out = sites == site
        clf = DWDClassifier().fit(X[~held_out], y[~held_out], sample_group=sites[~held_out])
        assert score == pytest.approx(clf.score(X[held_out], y[held_out]))


def test_without_routing_the_splitter_reads_groups(data):
    X, y, sites = data
    plain = _search(SiteKFold(3)).fit(X, y, groups=sites, dwdclassifier__sample_group=sites)
    expected = _search(GroupKFold(3)).fit(X, y, groups=sites, dwdclassifier__sample_group=sites)
    np.testing.assert_allclose(plain.cv_results_["mean_test_score"],
                               expected.cv_results_["mean_test_score"])
