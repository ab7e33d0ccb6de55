"""sample_group through Pipeline, GridSearchCV and metadata routing."""

import numpy as np
import pytest
import sklearn
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skfedpriv import DWDClassifier
from skfedpriv.datasets import load_breast_cancer_sites


class _RecordingDWD(DWDClassifier):
    """Records the sites each fit received (to check slicing)."""

    seen = []

    def fit(self, X, y, sample_group=None, sample_weight=None):
        type(self).seen.append((len(y), None if sample_group is None else np.asarray(sample_group)))
        return super().fit(X, y, sample_group=sample_group, sample_weight=sample_weight)


@pytest.fixture
def cancer():
    return load_breast_cancer_sites(n_sites=4, random_state=0)


def test_pipeline_passes_sample_group(cancer):
    X, y, sites = cancer
    pipe = make_pipeline(StandardScaler(), DWDClassifier())
    pipe.fit(X, y, dwdclassifier__sample_group=sites)
    direct = DWDClassifier().fit(StandardScaler().fit_transform(X), y, sample_group=sites)
    np.testing.assert_allclose(pipe[-1].coef_, direct.coef_)
    # partial_fit through the pipeline's last step works on streaming batches
    step = DWDClassifier()
    scaled = StandardScaler().fit_transform(X)
    for rows in np.array_split(np.arange(len(y)), 5):
        step.partial_fit(scaled[rows], y[rows], sample_group=sites[rows], classes=[0, 1])
    assert step.score(scaled, y) > 0.95


def test_grid_search_slices_sample_group_per_split(cancer):
    X, y, sites = cancer
    _RecordingDWD.seen = []
    search = GridSearchCV(
        make_pipeline(StandardScaler(), _RecordingDWD()),
        {"_recordingdwd__alpha": [1e-3, 1e-1]},
        cv=GroupKFold(n_splits=4),
    )
    search.fit(X, y, groups=sites, _recordingdwd__sample_group=sites)
    assert search.best_score_ > 0.9
    for n_rows, received in _RecordingDWD.seen:
        assert received is not None and len(received) == n_rows
    # GroupKFold over the sites: each split's training fit sees 3 of the 4 sites
    split_sites = [set(received) for n, received in _RecordingDWD.seen if n < len(y)]
    assert all(len(s) == 3 for s in split_sites)


def test_metadata_routing_requests_sample_group_by_default(cancer):
    X, y, sites = cancer
    _RecordingDWD.seen = []
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(StandardScaler(), _RecordingDWD())
        search = GridSearchCV(pipe, {"_recordingdwd__q": [1.0, 2.0]}, cv=GroupKFold(3))
        search.fit(X, y, groups=sites, sample_group=sites)
        result = cross_validate(
            DWDClassifier(), X, y, cv=GroupKFold(2),
            params={"sample_group": sites, "groups": sites},
        )
    assert len(result["test_score"]) == 2
    assert _RecordingDWD.seen and all(
        received is not None and len(received) == n for n, received in _RecordingDWD.seen
    )
