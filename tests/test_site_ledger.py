"""A private Flower site's ledger file: required, and held across runs and processes.

One-process protocol (as in ``test_flower.py``): a new ``LocalTransport`` with
new site objects is what a new Flower run gives the sites.
"""

import multiprocessing

import numpy as np
import pytest

from skfedpriv import DWDClassifier, LogisticRegression
from skfedpriv._param_validation import InvalidParameterError
from skfedpriv.federated import (
    DWDSite,
    LearnerPrivacy,
    LogisticSite,
    SiteLedgerFile,
    SitePrivacy,
    SiteRefusal,
    federated_partial_fit,
)
from skfedpriv.federated._refusal import EXHAUSTED, MISMATCH, NOT_IN_ORDER, REFUSED
from _ledgers import new_ledger
from _transport import RecordingTransport


def _site_data(n=180, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] - X[:, 1] > 0).astype(int)
    return X, y, np.arange(n) % 3, (np.arange(n) >= n // 2).astype(int)


def _dwd_run(X, y, g, b, ledger_path, batches=(0, 1), epsilon=2.0):
    est = DWDClassifier(mechanism="local-gaussian", epsilon=epsilon, clip_norm=3.0,
                        online_steps=2, random_state=0, classes=[0, 1])
    sites = [DWDSite(lambda k, s=s: (X[(g == s) & (b == k)], y[(g == s) & (b == k)]),
                     SitePrivacy.from_estimator(est, random_state=10 + s, ledger_path=ledger_path),
                     name=f"s{s}") for s in range(3)]
    transport = RecordingTransport(sites)
    for batch in batches:
        federated_partial_fit(est, transport, batch)
    return est, transport


def test_private_sites_refuse_to_run_without_a_ledger_file_or_declared_classes(ledger_dir):
    path = ledger_dir / "a.sqlite"
    for missing in (None, path):  # no path, or no file there: refused, nothing created
        with pytest.raises(InvalidParameterError, match="ledger"):
            SitePrivacy(1.0, 1e-5, 3.0, classes=[0, 1], ledger_path=missing)
        with pytest.raises(InvalidParameterError, match="ledger"):
            LearnerPrivacy("tree", 1.0, 1e-5, classes=[0, 1], ledger_path=missing)
    assert not path.exists()
    SiteLedgerFile.create(path)
    with pytest.raises(FileExistsError):  # a ledger is never replaced
        SiteLedgerFile.create(path)
    with pytest.raises(InvalidParameterError, match="classes"):
        SitePrivacy(1.0, 1e-5, 3.0, ledger_path=path)
    with pytest.raises(InvalidParameterError, match="classes"):
        LearnerPrivacy("tree", 1.0, 1e-5, ledger_path=path, classes=[1])
    # K, σ and the caps are computed once, from the site's own declaration
    privacy = SitePrivacy(1.0, 1e-5, 3.0, online_steps=2, classes=[2, 0, 1], ledger_path=path)
    assert privacy.classes.tolist() == [0, 1, 2] and privacy.n_models == 3
    assert privacy.release_caps == {True: 3 * 3 + 1, False: 3 * 3}


def test_a_deleted_site_ledger_is_refused_not_recreated(ledger_dir):
    """A ledger deleted between runs (or a process started before) does not
    start the counts again from zero: every release is refused."""
    X, y, g, b = _site_data()
    path = new_ledger(ledger_dir / "sites.sqlite")
    est = DWDClassifier(mechanism="local-gaussian", epsilon=2.0, clip_norm=3.0,
                        online_steps=2, classes=[0, 1])
    sites = [DWDSite(lambda k, s=s: (X[(g == s) & (b == k)], y[(g == s) & (b == k)]),
                     SitePrivacy.from_estimator(est, ledger_path=path), name=f"s{s}")
             for s in range(3)]
    path.unlink()
    with pytest.raises(SiteRefusal, match=f"^{REFUSED}$"):
        federated_partial_fit(est, RecordingTransport(sites), 0)
    assert not path.exists() and SiteLedgerFile(path).counts("s0") == {}


def test_flower_site_ledger_file_holds_across_runs(ledger_dir):
    X, y, g, b = _site_data()
    path = new_ledger(ledger_dir / "sites.sqlite")
    _dwd_run(X, y, g, b, path)
    # every release is counted: K (s + 1) per batch, and the Gram matrix in batch 0
    ledger = SiteLedgerFile(path)
    expected = {"releases-0": 2 + 1 + 1, "releases-1": 2 + 1}
    assert all(ledger.counts(f"s{s}") == expected for s in range(3))
    # a new run on the same rows (new site objects, a new Flower run): refused,
    # nothing more counted
    with pytest.raises(SiteRefusal, match=f"^{EXHAUSTED}$"):
        _dwd_run(X, y, g, b, path)
    assert all(ledger.counts(f"s{s}") == expected for s in range(3))
    # another calibration on the same file is refused before anything is counted
    with pytest.raises(SiteRefusal, match=f"^{MISMATCH}$"):
        _dwd_run(X, y, g, b, path, batches=(0,), epsilon=1.0)
    assert all(ledger.counts(f"s{s}") == expected for s in range(3))


def _charge_site(path, k, cap, queue):
    ledger, ok = SiteLedgerFile(path), 0
    for _ in range(k):
        try:
            ledger.charge("s0", "cal", "releases-0", 1, cap)
            ok += 1
        except PermissionError:
            pass
    queue.put(ok)


def test_flower_site_ledger_file_serializes_processes(tmp_path):
    path = str(new_ledger(tmp_path / "site.sqlite"))
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_charge_site, args=(path, 10, 25, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    total = sum(queue.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(120)
    assert total == 25
    assert SiteLedgerFile(path).counts("s0") == {"releases-0": 25}


def _logistic_sites(X, y, g, rnd, est, ledger_path):
    def loader(s):
        return lambda batch: (X[(g == s) & (rnd == batch)], y[(g == s) & (rnd == batch)])
    return [LogisticSite(loader(s), LearnerPrivacy.from_estimator(
        est, random_state=100 + s, ledger_path=ledger_path, classes=[0, 1]), name=f"s{s}")
        for s in range(3)]


def test_flower_learner_stream_in_a_file_holds_across_runs(ledger_dir):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(150, 3))
    y = (X[:, 0] > 0).astype(int)
    g, rnd = np.arange(150) % 3, rng.integers(0, 4, 150)

    def estimator():
        return LogisticRegression(mechanism="toeplitz", epsilon=2.0, delta=1e-5, n_rounds=4,
                                  random_state=0)

    # one run
    one = estimator()
    transport = RecordingTransport(_logistic_sites(X, y, g, rnd, one, new_ledger(ledger_dir / "one.sqlite")))
    for r in range(4):
        federated_partial_fit(one, transport, r, classes=[0, 1] if r == 0 else None)
    # the stream split over two runs on another file: the learners continue it exactly
    path = new_ledger(ledger_dir / "two.sqlite")
    two = estimator()
    for rounds in ([0, 1], [2, 3]):
        transport = RecordingTransport(_logistic_sites(X, y, g, rnd, two, path))
        for r in rounds:
            federated_partial_fit(two, transport, r, classes=[0, 1] if r == 0 else None)
    np.testing.assert_array_equal(one.coef_, two.coef_)
    # a later run cannot restart the stream at round 0
    site = _logistic_sites(X, y, g, rnd, two, path)[0]
    request = dict(transport.log[-1][0], round=0, batch=0)
    with pytest.raises(SiteRefusal, match=f"^{NOT_IN_ORDER}$"):
        site.handle(request)
