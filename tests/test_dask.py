"""Per-site work on a Dask cluster through joblib gives the in-process model.

Skipped when ``distributed`` is not installed (``pip install
"skfedpriv[dask]"``). The cluster is a ``LocalCluster`` of two thread
workers in this process: it exercises the Dask scheduler, serialization of
the per-site tasks and the joblib backend without starting processes.
"""

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import joblib  # noqa: E402

from skfedpriv import DWDClassifier  # noqa: E402
from skfedpriv._sites import runs_in_process  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False,
        dashboard_address=None, silence_logs="error",
    ) as cluster, distributed.Client(cluster) as client:
        yield client


def _data(n=400, p=5, n_sites=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = (X @ rng.normal(size=p) + 0.5 * rng.normal(size=n) > 0).astype(int)
    return X, y, rng.integers(n_sites, size=n)


@pytest.mark.parametrize("mechanism", [None, "local-gaussian"])
def test_dask_backend_gives_in_process_model(client, mechanism):
    X, y, g = _data()
    params = dict(mechanism=mechanism, clip_norm=4.0, random_state=0) if mechanism else {}
    reference = DWDClassifier(**params).fit(X, y, sample_group=g)

    with joblib.parallel_config(backend="dask"), distributed.get_task_stream(client) as ts:
        assert not runs_in_process(2)
        clf = DWDClassifier(n_jobs=2, **params).fit(X, y, sample_group=g)
    # the per-site summaries really ran on the cluster's workers
    assert len(ts.data) >= 4
    assert {t["worker"] for t in ts.data} <= set(client.scheduler_info()["workers"])
    np.testing.assert_allclose(clf.coef_, reference.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(clf.intercept_, reference.intercept_, rtol=1e-10, atol=1e-12)
    assert clf.n_iter_ == reference.n_iter_


def test_dask_backend_partial_fit_stream(client):
    X, y, g = _data(seed=1)
    batches = np.array_split(np.arange(len(y)), 3)
    reference, clf = DWDClassifier(online_steps=3), DWDClassifier(online_steps=3, n_jobs=2)
    for b in batches:
        reference.partial_fit(X[b], y[b], sample_group=g[b], classes=[0, 1])
    with joblib.parallel_config(backend="dask"), distributed.get_task_stream(client) as ts:
        for b in batches:
            clf.partial_fit(X[b], y[b], sample_group=g[b], classes=[0, 1])
    assert len(ts.data) >= 3 * 4
    np.testing.assert_allclose(clf.coef_, reference.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(clf.curvature_, reference.curvature_, rtol=1e-10, atol=1e-12)
