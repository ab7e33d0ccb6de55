"""'local-tree' / 'local-blt' over remote sites (issue #22): each site holds its own stream.

The server's update on the sites' releases is the in-process update
(:func:`~skfedpriv.linear_model._dwd_private.continual_update`) on the same
noise; a scripted malicious server gets refusals (fixed texts, the same on
neighbouring data sets) for every replay, skip, and change of σ, clip,
horizon or K, across restarts of the site; nothing is released twice.
"""

import logging
import warnings

import numpy as np
import pytest

from skfedpriv import DWDClassifier
from skfedpriv.federated import (
    ContinualSitePrivacy,
    DWDSite,
    LocalTransport,
    SiteRefusal,
    federated_fit,
    federated_partial_fit,
)
from skfedpriv.federated._refusal import EXHAUSTED, MISMATCH, NOT_IN_ORDER, RAW_SUMS
from skfedpriv.linear_model._dwd_private import continual_update
from skfedpriv.linear_model._dwd_settings import CONTINUAL
from skfedpriv.linear_model._dwd_solver import SiteData
from skfedpriv.privacy import PrivacyBudget, make_factorization
from skfedpriv.privacy._continual_summaries import (
    NoiseDominatesWarning,
    SiteNoiseStreams,
    continual_sensitivities,
    continual_sigma,
)
from _ledgers import new_ledger
from _transport import RecordingTransport
from test_malicious_server import _check_script, _last, _neighbours, _outcome, _run_script

CLASSES = [0, 1, 2]
SEEDS = (11, 12)


@pytest.fixture(autouse=True)
def _quiet(caplog):
    caplog.set_level(logging.ERROR, logger="skfedpriv.federated")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoiseDominatesWarning)
        yield


def _stream(n=240, n_batches=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.digitize(X[:, 0] + 0.3 * rng.normal(size=n), [-0.4, 0.4])  # labels 0, 1, 2
    return X, y, np.arange(n) % 2, (np.arange(n) // 2) % n_batches


def _estimator(mechanism, n_batches=3, **kw):
    return DWDClassifier(mechanism=mechanism, epsilon=2.0, clip_norm=3.0, n_batches=n_batches,
                         classes=CLASSES, alpha=1e-3, **kw)


def _sites(data, estimator, ledger_dir, seeds=SEEDS, tag=""):
    X, y, g, b = data
    sites = []
    for s, seed in enumerate(seeds):
        privacy = ContinualSitePrivacy.from_estimator(
            estimator, random_state=seed, ledger_path=new_ledger(ledger_dir / f"s{s}{tag}.sqlite"))
        sites.append(DWDSite(lambda k, s=s: (X[(g == s) & (b == k)], y[(g == s) & (b == k)]),
                             privacy, name=f"s{s}"))
    return sites


def _remote_stream(estimator, transport, n_batches):
    federated_fit(estimator, transport, 0)
    for k in range(1, n_batches):
        federated_partial_fit(estimator, transport, k)
    return estimator


@pytest.mark.parametrize("mechanism", sorted(CONTINUAL))
def test_remote_stream_is_the_in_process_update_on_the_sites_noise(mechanism, ledger_dir):
    """The server's update equals ``continual_update`` on in-process sites
    whose noise streams are drawn from the remote sites' own seeds."""
    data, n_batches = _stream(), 3
    est = _remote_stream(_estimator(mechanism), LocalTransport(_sites(data, _estimator(
        mechanism), ledger_dir)), n_batches)
    # the in-process update, one stream per site from the site's own generator
    X, y, g, b = data
    factorization = make_factorization(CONTINUAL[mechanism], n_batches)
    sigma = continual_sigma(2.0, 1e-5, factorization)
    noise = SiteNoiseStreams(factorization, 2, 4, 3, sigma, continual_sensitivities(1.0, 3.0),
                             [np.random.default_rng(seed) for seed in SEEDS])
    theta, linear, prior, seen = np.zeros((4, 3)), None, None, 0
    for k in range(n_batches):
        rows = np.flatnonzero(b == k)
        sites = SiteData.from_rows(X[rows], y[rows], np.ones(len(rows)),
                                   [np.flatnonzero(g[rows] == s) for s in range(2)])
        sites.prepare(np.array(CLASSES), fit_intercept=True, clip_norm=3.0)
        seen += len(rows)
        theta, linear, increment = continual_update(
            sites, theta, noise, linear, prior, k, seen, q=1.0, alpha=1e-3, fit_intercept=True)
        prior = increment if prior is None else prior + increment
    np.testing.assert_allclose(est.intercept_, theta[0], rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(est.coef_, theta[1:].T, rtol=1e-9, atol=1e-10)
    assert est.noise_scale_ == pytest.approx(sigma, rel=1e-12)
    assert est.privacy_spent_ == (2.0, 1e-5)


def test_a_restarted_site_continues_its_stream(ledger_dir):
    """A new site object (a new process) on the same ledger continues the
    stream where it stopped: the same releases as a site never restarted, no
    draw repeated."""
    data = _stream(n_batches=2)
    releases = {}
    for tag in ("kept", "restarted"):
        est = _estimator("local-blt", n_batches=2)
        if tag == "kept":
            transport = RecordingTransport(_sites(data, est, ledger_dir, tag=tag))
        else:  # every request to new objects on the same ledger files
            transport = _FreshSites(lambda: _sites(data, est, ledger_dir, tag=tag))
        _remote_stream(est, transport, 2)
        releases[tag] = [r for q, replies in transport.log if q["op"] == "continual"
                         for r in replies]
    assert len(releases["kept"]) == len(releases["restarted"]) == 4
    for kept, restarted in zip(releases["kept"], releases["restarted"]):
        np.testing.assert_array_equal(kept["linear"], restarted["linear"])
    # step 1 of a site is not step 0 drawn again (same rows in neither batch)
    a0, a1 = releases["kept"][0]["linear"], releases["kept"][2]["linear"]
    assert not np.allclose(a0, a1)


class _FreshSites(RecordingTransport):
    """Every request to new site objects (a ClientApp process per message)."""

    def __init__(self, make_sites):
        super().__init__([])
        self.make_sites = make_sites

    def __call__(self, request):
        self.sites = self.make_sites()
        return super().__call__(request)


def test_remote_stream_on_sites_without_their_own_streams_is_refused(ledger_dir):
    """Sites that trust the server hold no stream: refused before any charge."""
    X, y, g, b = _stream(n_batches=1)
    sites = [DWDSite(lambda k, s=s: (X[g == s], y[g == s]), None, name=f"s{s}") for s in range(2)]
    budget = PrivacyBudget(epsilon=5.0, delta=1e-4)
    est = _estimator("local-tree", budget=budget)
    with pytest.raises(NotImplementedError, match="hold their own noise streams"):
        federated_fit(est, LocalTransport(sites), 0)
    assert budget.spent == (0.0, 0.0) and not hasattr(est, "coef_")


# -- a scripted malicious server ------------------------------------------------


def _continual(log, **change):
    return {**_last(log, "continual"), **change}


def _restarted(ledger_dir, side, data, clip_norm=3.0, **change):
    """The site of ``side`` as a new process: new objects, the same ledger
    file (``change``: restarted under another configuration)."""
    X, y, b = data[side]
    params = dict(n_batches=4, classes=CLASSES, random_state=1,
                  ledger_path=ledger_dir / f"{side}.sqlite")
    privacy = ContinualSitePrivacy("local-tree", 2.0, 1e-5, clip_norm, **{**params, **change})
    return LocalTransport([DWDSite(lambda k: (X[b == k], y[b == k]), privacy, name="s")])


CONTINUAL_SCRIPT = [
    ("replay batch 0", lambda log: _continual(log, batch=0)),
    ("replay batch 1", lambda log: _continual(log)),
    ("skip to batch 3", lambda log: _continual(log, batch=3)),
    ("batch past the horizon", lambda log: _continual(log, batch=4)),
    ("sigma", lambda log: _continual(log, batch=2, sigma=_last(log, "continual")["sigma"] / 2)),
    ("no sigma", lambda log: {k: v for k, v in _continual(log, batch=2).items() if k != "sigma"}),
    ("clip", lambda log: _continual(log, batch=2, clip_norm=30.0)),
    ("horizon", lambda log: _continual(log, batch=2, n_batches=100)),
    ("factorization", lambda log: _continual(
        log, batch=2, factorization=repr(make_factorization("honaker", 100)))),
    ("K = 1", lambda log: _continual(log, batch=2, classes=[0, 1], theta=np.zeros((3, 1)))),
    ("K = 4", lambda log: _continual(log, batch=2, classes=[0, 1, 2, 3], theta=np.zeros((3, 4)))),
    ("q", lambda log: _continual(log, batch=2, **{"loss-q": 0.5})),
    ("another loss", lambda log: _continual(log, batch=2, loss="squared_hinge")),
    ("fit_intercept", lambda log: _continual(log, batch=2, fit_intercept=False)),
    ("theta of another shape", lambda log: _continual(log, batch=2, theta=np.zeros((2, 3)))),
    ("class_weight", lambda log: _continual(log, batch=2, class_weight=[1.0, 1.0, 2.0])),
    ("local-gaussian's noised", lambda log: _continual(log, batch=2, op="noised", kind="gradient")),
    ("raw summary", lambda log: _continual(log, batch=2, op="summary", with_curvature=True)),
    ("raw inference summary", lambda log: _continual(log, batch=2, op="inference_summary")),
]

CONTINUAL_EXPECTED = {
    **{name: MISMATCH for name, _ in CONTINUAL_SCRIPT},
    "replay batch 0": NOT_IN_ORDER, "replay batch 1": NOT_IN_ORDER,
    "skip to batch 3": NOT_IN_ORDER, "batch past the horizon": EXHAUSTED,
    "raw summary": RAW_SUMS, "raw inference summary": RAW_SUMS,
}


def test_a_malicious_server_gets_refusals_from_a_continual_site(ledger_dir):
    data = _neighbours()

    def make_transport(side):
        X, y, b = data[side]
        privacy = ContinualSitePrivacy.from_estimator(
            _estimator("local-tree", n_batches=4), random_state=1,
            ledger_path=new_ledger(ledger_dir / f"{side}.sqlite"))
        return RecordingTransport([DWDSite(lambda k: (X[b == k], y[b == k]), privacy, name="s")])

    def honest(transport):
        _remote_stream(_estimator("local-tree", n_batches=4), transport, 2)

    results = [_run_script(side, make_transport, honest, CONTINUAL_SCRIPT) for side in data]
    _check_script([r[1:] for r in results], CONTINUAL_EXPECTED)
    for side, (transport, log, _) in zip(data, results):
        next_request = _continual(log, batch=2)
        # a restarted site (new objects, same ledger) replays nothing
        restarted = _restarted(ledger_dir, side, data)
        assert _outcome(restarted, _continual(log, batch=0)) == NOT_IN_ORDER
        assert _outcome(restarted, _continual(log)) == NOT_IN_ORDER
        # nor does one restarted under another calibration (its ledger refuses it)
        for change in (dict(n_batches=8), dict(clip_norm=1.5), dict(classes=[0, 1])):
            site = _restarted(ledger_dir, side, data, **change)
            assert _outcome(site, _continual(log, batch=2)) == MISMATCH, change
        # batch 2 asked twice: answered once, then refused, restart or not
        assert "linear" in _outcome(restarted, next_request)
        assert _outcome(restarted, next_request) == NOT_IN_ORDER
        assert _outcome(transport, next_request) == NOT_IN_ORDER
    # nothing released twice: each batch's release made once per side
    for _, log, _ in results:
        batches = [q["batch"] for q, _ in log if q["op"] == "continual"]
        assert batches == [0, 1]


def test_a_continual_site_is_configured_by_its_own_parameters_only(ledger_dir):
    """A configuration the guarantee cannot hold for raises when the site is
    set up; a request without the protocol's entries is a fixed refusal."""
    path = new_ledger(ledger_dir / "x.sqlite")
    with pytest.raises(ValueError, match="n_batches"):
        ContinualSitePrivacy("local-tree", 1.0, 1e-5, 3.0, classes=[0, 1], ledger_path=path)
    with pytest.raises(ValueError, match="mechanism"):
        ContinualSitePrivacy("local-gaussian", 1.0, 1e-5, 3.0, n_batches=4, classes=[0, 1],
                             ledger_path=path)
    with pytest.raises(ValueError, match="prefix-sum|local-tree"):
        ContinualSitePrivacy.from_estimator(DWDClassifier(mechanism="local-gaussian",
                                                          clip_norm=3.0), ledger_path=path)
    with pytest.raises(SiteRefusal):  # a site refuses with a fixed text: no ledger row made
        DWDSite(lambda k: (np.zeros((0, 2)), np.zeros(0)), ContinualSitePrivacy(
            "local-tree", 1.0, 1e-5, 3.0, n_batches=4, classes=[0, 1], ledger_path=path),
            name="s").handle({"op": "continual"})


def test_a_stream_does_not_mix_in_process_and_site_held_noise(ledger_dir):
    """A stream started in process cannot continue on sites holding their
    own streams, nor the reverse: refused before anything changes."""
    data = _stream(n_batches=2)
    X, y, g, b = data
    local = _estimator("local-tree", n_batches=2, random_state=0)
    local.fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
    before = local.coef_.copy()
    with pytest.raises(ValueError, match="either all run in this process"):
        federated_partial_fit(local, LocalTransport(_sites(data, local, ledger_dir)), 1)
    np.testing.assert_array_equal(local.coef_, before)
    assert local.n_batches_ == 1
    remote = _estimator("local-tree", n_batches=2)
    federated_fit(remote, LocalTransport(_sites(data, remote, ledger_dir, tag="r")), 0)
    with pytest.raises(ValueError, match="either all run in this process"):
        remote.partial_fit(X[b == 1], y[b == 1], sample_group=g[b == 1])
    assert remote.n_batches_ == 1


def test_a_continual_site_warns_when_its_noise_stream_has_a_fixed_seed(ledger_dir):
    """An integer seed fixes the site's whole noise stream (a fresh ledger on
    the same seed would draw it again): warned, as the estimator does."""
    from skfedpriv.privacy import SeededNoiseWarning

    path = new_ledger(ledger_dir / "seeded.sqlite")
    with pytest.warns(SeededNoiseWarning, match="ContinualSitePrivacy"):
        ContinualSitePrivacy("local-tree", 1.0, 1e-5, 3.0, n_batches=4, classes=[0, 1],
                             ledger_path=path, random_state=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeededNoiseWarning)
        ContinualSitePrivacy("local-tree", 1.0, 1e-5, 3.0, n_batches=4, classes=[0, 1],
                             ledger_path=path)
