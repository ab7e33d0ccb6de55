"""Per-site work on a Dask cluster through joblib gives the in-process model.

Skipped when ``distributed`` is not installed (``pip install
"skfedpriv[dask]"``). The cluster is a ``LocalCluster`` of two thread
workers in this process: it exercises the Dask scheduler, serialization of
the per-site tasks and the joblib backend without starting processes.

Besides the models, the tests check what crosses to the cluster: each
site's rows are scattered once per batch (one ``fit`` or ``partial_fit``
call), every round's task refers to its site's future and carries only the
parameters, and the scheduler holds no new site data after the first round.
"""

import time

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import joblib  # noqa: E402

from skfedpriv import DWDClassifier  # noqa: E402
from skfedpriv._sites import dask_client, runs_in_process  # noqa: E402
from skfedpriv.linear_model._dwd_solver import SiteData  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False,
        dashboard_address=None, silence_logs="error",
    ) as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(2)
        yield client


def _data(n=400, p=5, n_sites=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = (X @ rng.normal(size=p) + 0.5 * rng.normal(size=n) > 0).astype(int)
    return X, y, rng.integers(n_sites, size=n)


@pytest.mark.parametrize("mechanism", [None, "local-gaussian"])
def test_dask_backend_gives_in_process_model(client, mechanism):
    X, y, g = _data()
    params = dict(mechanism=mechanism, clip_norm=4.0, random_state=0, classes=[0, 1]) if mechanism else {}
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


PRIVATE = dict(mechanism="local-gaussian", clip_norm=4.0, classes=[0, 1])


def test_dask_backend_private_partial_fit_stream(client):
    X, y, g = _data(seed=2)
    batches = np.array_split(np.arange(len(y)), 3)
    reference = DWDClassifier(online_steps=3, random_state=5, **PRIVATE)
    clf = DWDClassifier(online_steps=3, random_state=5, n_jobs=2, **PRIVATE)
    for b in batches:
        reference.partial_fit(X[b], y[b], sample_group=g[b], classes=[0, 1])
    with joblib.parallel_config(backend="dask"):
        for b in batches:
            clf.partial_fit(X[b], y[b], sample_group=g[b], classes=[0, 1])
    np.testing.assert_allclose(clf.coef_, reference.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(clf.intercept_, reference.intercept_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(clf._training_state.curvature, reference._training_state.curvature,
                               rtol=1e-10, atol=1e-12)
    assert clf.privacy_spent_ == reference.privacy_spent_


class _ClusterTraffic:
    """What the client sends to the cluster, recorded batch by batch.

    Wraps the client's ``scatter``, ``submit`` and ``gather`` (joblib's Dask
    backend uses the same client, so its own transfers would be recorded
    too) and, at every round's ``gather``, asks the scheduler which data
    keys (scattered, not computed: no ``run_spec``) it holds.
    """

    def __init__(self, client, monkeypatch):
        self.client = client
        self.take()
        scatter, submit, gather = client.scatter, client.submit, client.gather

        def recording_scatter(data, *args, **kwargs):
            futures = scatter(data, *args, **kwargs)
            self.scatters.append((data, futures))
            return futures

        def recording_submit(func, *args, **kwargs):
            self.submits.append((func, args))
            return submit(func, *args, **kwargs)

        def recording_gather(futures, *args, **kwargs):
            self.rounds.append(self.data_keys())
            return gather(futures, *args, **kwargs)

        monkeypatch.setattr(client, "scatter", recording_scatter)
        monkeypatch.setattr(client, "submit", recording_submit)
        monkeypatch.setattr(client, "gather", recording_gather)

    def data_keys(self):
        return self.client.run_on_scheduler(lambda dask_scheduler: {
            key: ts.nbytes for key, ts in dask_scheduler.tasks.items() if ts.run_spec is None
        })

    def take(self):
        """Return the records so far and start a new batch."""
        records = getattr(self, "scatters", None), getattr(self, "submits", None), getattr(self, "rounds", None)
        self.scatters, self.submits, self.rounds = [], [], []
        self.before = set(self.data_keys()) if hasattr(self, "client") else set()
        return records


def _assert_sent_once(traffic, X_batch, n_sites, theta_size, clipped=False):
    before = traffic.before
    scatters, submits, rounds = traffic.take()
    # one scatter per batch, carrying every site's rows (and nothing else)
    assert len(scatters) == 1, "site data must be sent once per batch"
    data, futures = scatters[0]
    assert len(data) == len(futures) == n_sites
    sent_rows = np.concatenate([part[0] for part in data])
    assert sent_rows.shape == X_batch.shape
    if not clipped:  # private runs send the clipped rows
        np.testing.assert_array_equal(sent_rows[np.lexsort(sent_rows.T)], X_batch[np.lexsort(X_batch.T)])
    site_keys = {f.key for f in futures}
    # several rounds, each one task per site that refers to a site's future
    # and carries no array larger than the parameters
    assert len(rounds) >= 2
    assert len(submits) == n_sites * len(rounds)
    for func, args in submits:
        sent = [a for a in args if isinstance(a, distributed.Future)]
        assert len(sent) == 1 and sent[0].key in site_keys
        assert all(a.size <= theta_size for a in args if isinstance(a, np.ndarray))
    for r in range(0, len(submits), n_sites):  # every round covers every site
        assert {a.key for _, args in submits[r:r + n_sites] for a in args
                if isinstance(a, distributed.Future)} == site_keys
    # on the scheduler: the sites' data is there at every round, and no
    # other data arrived during the batch (older keys may await release)
    rows_nbytes = sum(sum(a.nbytes for a in part) for part in data)
    for held in rounds:
        assert site_keys <= set(held)
        assert set(held) - site_keys <= before
        assert sum(held[k] for k in site_keys) >= rows_nbytes


@pytest.mark.parametrize("private", [False, True])
def test_site_data_crosses_to_the_cluster_once_per_batch(client, monkeypatch, private):
    X, y, g = _data(seed=3)
    n_sites = len(np.unique(g))
    params = dict(PRIVATE, random_state=0) if private else {}
    traffic = _ClusterTraffic(client, monkeypatch)
    with joblib.parallel_config(backend="dask"):
        clf = DWDClassifier(n_jobs=2, online_steps=3, **params).fit(X, y, sample_group=g)
        _assert_sent_once(traffic, X, n_sites, clf._training_state.theta.size, private)
        batches = np.array_split(np.arange(len(y)), 3)
        stream = DWDClassifier(n_jobs=2, online_steps=3, **params)
        for b in batches:
            stream.partial_fit(X[b], y[b], sample_group=g[b], classes=[0, 1])
            _assert_sent_once(traffic, X[b], n_sites, stream._training_state.theta.size, private)
    # nothing stays on the cluster once the batches are done
    deadline = time.monotonic() + 10
    while traffic.data_keys() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert traffic.data_keys() == {}


def test_backend_submit_options_reach_the_site_tasks(client):
    X, y, g = _data(seed=4)
    # asked of the scheduler now (the client's cached identity can predate
    # the workers on a loaded host)
    first = sorted(client.run(lambda: None))[0]
    with joblib.parallel_config(backend="dask", workers=[first]), \
            distributed.get_task_stream(client) as ts:
        DWDClassifier().fit(X, y, sample_group=g)
    assert len(ts.data) >= 4 and {t["worker"] for t in ts.data} == {first}


def test_scatter_only_under_dask_and_outside_tasks(client):
    X, y, g = _data()
    rows = [np.flatnonzero(g == s) for s in np.unique(g)]
    Y, w = np.where(y == 1, 1.0, -1.0)[:, None], np.ones(len(y))
    assert dask_client() is None
    with joblib.parallel_config(backend="threading", n_jobs=2):
        assert dask_client() is None
        assert not SiteData(X, Y, w, rows, None, True).scattered
    with joblib.parallel_config(backend="dask"):
        assert dask_client() is client
        assert SiteData(X, Y, w, rows, None, True).scattered
        assert not SiteData(X, Y, w, rows[:1], None, True).scattered  # one site: in process

    def inside_a_task():
        with joblib.parallel_config(backend="dask"):
            return dask_client() is None

    # an estimator fitted inside a Dask task keeps joblib's path (no scatter
    # from a worker thread that would then block on further tasks)
    assert client.submit(inside_a_task, pure=False).result()


def test_the_default_stream_correction_on_the_cluster(client):
    """inference=True's default second-order correction reads the sites'
    moments on the cluster (rows scattered): the in-process stream."""
    X, y, g = _data(n=600)
    b = np.arange(len(y)) % 3
    reference = DWDClassifier(inference=True)
    with joblib.parallel_config(backend="dask"), distributed.get_task_stream(client) as ts:
        clf = DWDClassifier(inference=True, n_jobs=2)
        for k in range(3):
            rows = b == k
            for est in (reference, clf):
                est.partial_fit(X[rows], y[rows], sample_group=g[rows], classes=[0, 1])
    assert clf._training_state.shift_correction is not None
    assert any("_moments_task" in t["key"] for t in ts.data)  # on the workers
    np.testing.assert_allclose(clf.coef_, reference.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(clf.coef_cov_, reference.coef_cov_, rtol=1e-8, atol=1e-14)
