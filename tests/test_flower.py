"""Federated DWD over Flower: sites as ClientApps in their own processes.

The protocol tests run the site and server code in one process through
``LocalTransport`` (exact, fast) and need no Flower install; what needs
Flower (its message types, the apps, a SuperLink and SuperNodes on
127.0.0.1) is in ``test_flower_e2e.py``.
"""

import math
import warnings

import numpy as np
import pytest

from skfedpriv import DWDClassifier, LogisticRegression, PrivacyBudgetError
from skfedpriv.federated import (
    DWDSite,
    LearnerPrivacy,
    LogisticSite,
    SitePrivacy,
    SiteRefusal,
    federated_fit,
    federated_partial_fit,
)
from skfedpriv.federated._refusal import EXHAUSTED, MISMATCH, NOT_IN_ORDER, RAW_SUMS
from skfedpriv.federated._server import RemoteSites
from skfedpriv.federated._site import PROTOCOL_VERSION
from skfedpriv.privacy._objective_perturbation import (
    clip_augmented_rows,
    gradient_sensitivity,
    local_gaussian_releases,
    local_gaussian_sigma,
)
from skfedpriv.linear_model._base import ReleasedModelError
from skfedpriv.linear_model._dwd_solver import site_summary
from skfedpriv.linear_model._local_steps import local_round
from skfedpriv.privacy import clip_rows, gaussian_sigma
from skfedpriv.privacy import make_factorization
from _ledgers import new_ledger
from _streams import stream_from_source
from _transport import RecordingTransport

N_SITES = 3


def make_data(n=240, p=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = (X[:, 0] - X[:, 1] + 0.8 * rng.normal(size=n) > 0).astype(int)
    sites = np.arange(n) % N_SITES
    batch = (np.arange(n) >= n // 2).astype(int)
    return X, y, sites, batch


def local_sites(X, y, g, b, privacy=None):
    return [
        DWDSite(lambda k, s=s: (X[(g == s) & (b == k)], y[(g == s) & (b == k)]),
                None if privacy is None else privacy(s), name=f"s{s}")
        for s in range(N_SITES)
    ]


@pytest.mark.parametrize("params", [dict(), dict(q=0.5, alpha=1e-2), dict(q=2.0, fit_intercept=False)])
def test_protocol_matches_in_process_fit_and_stream(params):
    X, y, g, b = make_data()
    transport = RecordingTransport(local_sites(X, y, g, b))
    remote = federated_fit(DWDClassifier(**params), transport)
    local = DWDClassifier(**params).fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-8, rtol=0)
    np.testing.assert_allclose(remote.intercept_, local.intercept_, atol=1e-8, rtol=0)
    federated_partial_fit(remote, transport, 1)
    local.partial_fit(X[b == 1], y[b == 1], sample_group=g[b == 1])
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-8, rtol=0)
    np.testing.assert_allclose(remote.curvature_, local.curvature_, rtol=1e-10, atol=1e-9)
    assert remote.n_samples_seen_ == local.n_samples_seen_
    assert remote.n_batches_ == 2
    np.testing.assert_array_equal(remote.predict(X), local.predict(X))


@pytest.mark.parametrize("params", [dict(), dict(q=0.5, alpha=1e-2, online_steps=1),
                                    dict(q=2.0, fit_intercept=False, max_iter=3)])
def test_remote_fit_takes_the_rounds_of_an_in_process_fit(params):
    """Curvature products and line losses are protocol ops: one round each,
    as in process, so a remote fit and stream take the same rounds (fewer
    with the curvature cache) and reach the same model."""
    from skfedpriv.linear_model._dwd_solver import SiteData

    X, y, g, b = make_data()
    transport = RecordingTransport(local_sites(X, y, g, b))
    local, remote, cached = (DWDClassifier(**params) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter=3 stops early, on every side alike
        for batch in (0, 1):
            m = b == batch
            rows = [np.flatnonzero(g[m] == s) for s in range(N_SITES)]
            in_process = SiteData.from_rows(X[m], y[m], np.ones(m.sum()), rows)
            by_transport = RemoteSites(transport, batch, cache=False)
            with_cache = RemoteSites(transport, batch)
            local.partial_fit_sites(in_process, classes=[0, 1])
            remote.partial_fit_sites(by_transport, classes=[0, 1])
            cached.partial_fit_sites(with_cache, classes=[0, 1])
            assert by_transport.rounds == in_process.rounds >= 1
            assert with_cache.rounds <= in_process.rounds
            np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-10, rtol=0)
            np.testing.assert_allclose(cached.coef_, local.coef_, atol=1e-10, rtol=0)
    ops = {request["op"] for request, _ in transport.log}
    assert {"curvature_product", "line_losses"} & ops


def test_protocol_multiclass_and_class_weight():
    X, _, g, b = make_data()
    y = np.digitize(X[:, 0], [-0.5, 0.5])
    cw = {0: 2.0, 2: 0.5}
    transport = RecordingTransport(local_sites(X, y, g, np.zeros_like(b)))
    remote = federated_fit(DWDClassifier(class_weight=cw), transport)
    local = DWDClassifier(class_weight=cw).fit(X, y, sample_group=g)
    np.testing.assert_array_equal(remote.classes_, local.classes_)
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-8, rtol=0)


def test_server_only_receives_sums():
    """Every reply is a fixed-size sum: nothing grows with the site's rows."""
    X, y, g, b = make_data()
    transport = RecordingTransport(local_sites(X, y, g, b))
    federated_fit(DWDClassifier(), transport)
    p1 = X.shape[1] + 1
    for request, replies in transport.log:
        # line losses (protocol 2): one number per step asked for
        bound = len(request["steps"]) if request["op"] == "line_losses" else p1 * p1
        for reply in replies:
            for value in reply.values():
                assert np.size(value) <= bound


def site_privacy(est, seed, ledger, **kw):
    """The SitePrivacy of site ``seed`` matching ``est``, its ledger file under ``ledger``."""
    return SitePrivacy.from_estimator(est, random_state=seed,
                                      ledger_path=new_ledger(ledger / "sites.sqlite"), **kw)


def private_estimator(**kw):
    params = dict(mechanism="local-gaussian", epsilon=2.0, clip_norm=3.0, online_steps=2,
                  random_state=0, classes=[0, 1])
    return DWDClassifier(**{**params, **kw})


def test_private_dwd_server_needs_a_declared_label_set_and_sites_hide_theirs(ledger_dir):
    X, y, g, b = make_data()
    est = private_estimator(random_state=None, classes=None)
    transport = RecordingTransport(local_sites(
        X, y, g, b, lambda s: site_privacy(est, s, ledger_dir, classes=[0, 1])))
    with pytest.raises(ValueError, match="label set must be declared"):
        federated_fit(est, transport)
    with pytest.raises(ValueError, match="label set must be declared"):
        federated_partial_fit(est, transport, 0)
    assert not [k for k in vars(est) if k.endswith("_")]
    describes = [replies for request, replies in transport.log if request["op"] == "describe"]
    assert describes and all("labels" not in r for replies in describes for r in replies)
    # declared: the remote fit runs; its release predicts and cannot continue
    federated_fit(est.set_params(classes=[0, 1]), transport)
    assert est.classes_.tolist() == [0, 1] and not hasattr(est, "curvature_")
    # nor which sides of the models their rows are on (single labels flip it)
    prepares = [replies for request, replies in transport.log if request["op"] == "prepare"]
    assert prepares and all(set(r) == {"site", "weight_sum"}
                            for replies in prepares for r in replies)
    released = est.release()
    np.testing.assert_array_equal(released.predict(X), est.predict(X))
    with pytest.raises(ReleasedModelError):
        federated_partial_fit(released, transport, 1)
    assert not hasattr(released, "_training_state")
    # the remote stream refuses changed privacy settings, as partial_fit does
    est.set_params(epsilon=1.0)
    with pytest.raises(ValueError, match="changed in the middle of a stream"):
        federated_partial_fit(est, transport, 1)


def test_private_sites_send_noise_of_the_calibrated_scale(ledger_dir):
    """What the server receives minus the raw site sums is Gaussian noise of
    the std the site's own calibration gives (checked over many sites)."""
    n_sites = 60
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20 * n_sites, 3))
    y = (X[:, 0] > 0).astype(int)
    g = np.arange(len(y)) % n_sites
    est = private_estimator()
    sites = [DWDSite(lambda k, s=s: (X[g == s], y[g == s]),
                     site_privacy(est, 100 + s, ledger_dir), name=f"{s:03d}")
             for s in range(n_sites)]
    transport = RecordingTransport(sites)
    federated_fit(est, transport)
    sigma = local_gaussian_sigma(2.0, 1e-5, local_gaussian_releases(1, 2, True), "analytic")
    expected = sigma * gradient_sensitivity(3.0)
    residuals = []
    for request, replies in transport.log:
        assert request["op"] in ("describe", "prepare", "noised")  # never raw sums
        if request["op"] != "noised" or request["kind"] != "gradient":
            continue
        for site, reply in zip(sorted(range(n_sites), key=lambda s: f"{s:03d}"), replies):
            assert reply["std"] == pytest.approx(expected, rel=1e-12)
            Xs = clip_augmented_rows(X[g == site], 3.0, True)
            Ys = np.where(y[g == site] == 1, 1.0, -1.0)[:, None]
            _, raw, _ = site_summary(Xs, Ys, np.ones(len(Ys)), request["theta"], 1.0, True, False)
            residuals.append((reply["value"] - raw).ravel())
    residuals = np.concatenate(residuals)
    n = residuals.size  # 2 gradient releases x 60 sites x 4 coordinates
    assert n == 2 * n_sites * 4
    ratio = np.mean(residuals**2) / expected**2
    assert abs(ratio - 1) < 5 * math.sqrt(2 / n)  # chi-square: sd of the ratio is sqrt(2/n)
    assert abs(np.mean(residuals)) < 5 * expected / math.sqrt(n)


def test_private_protocol_is_reproducible_and_runs_the_estimators_update(ledger_dir):
    """With fixed site seeds the remote private fit is reproducible, and equals the
    estimator's own local-gaussian update fed with the same noised sums."""
    X, y, g, b = make_data()

    def run(ledger):
        est = private_estimator()
        transport = RecordingTransport(local_sites(
            X, y, g, b, lambda s: site_privacy(est, 10 + s, ledger)))
        federated_fit(est, transport)
        federated_partial_fit(est, transport, 1)
        return est, transport

    (ledger_dir / "a").mkdir()
    (ledger_dir / "b").mkdir()
    a, transport = run(ledger_dir / "a")
    b2, _ = run(ledger_dir / "b")
    np.testing.assert_array_equal(a.coef_, b2.coef_)
    local = private_estimator().fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
    local.partial_fit(X[b == 1], y[b == 1], sample_group=g[b == 1])
    assert a.noise_scale_ == local.noise_scale_
    assert a.privacy_spent_ == local.privacy_spent_
    assert np.all(np.isfinite(a.coef_))
    # the site refuses releases past its calibration, and raw sums always
    with pytest.raises(SiteRefusal, match=f"^{EXHAUSTED}$"):
        federated_partial_fit(a, transport, 1)
    site = transport.sites[0]
    with pytest.raises(SiteRefusal, match=f"^{RAW_SUMS}$"):
        site.handle({"protocol": PROTOCOL_VERSION, "op": "summary", "batch": 0, "classes": [0, 1],
                     "fit_intercept": True, "theta": np.zeros((4, 1)), "loss": "gendwd", "loss-q": 1.0,
                     "with_curvature": False})


def test_site_noise_scale_mismatch_is_refused(ledger_dir):
    X, y, g, b = make_data()
    est = private_estimator()
    # the sites are calibrated for epsilon=1, the server assumes epsilon=2
    transport = RecordingTransport(local_sites(
        X, y, g, b, lambda s: SitePrivacy(1.0, 1e-5, 3.0, online_steps=2, random_state=s,
                                          classes=[0, 1], ledger_path=new_ledger(ledger_dir / "s.sqlite"))))
    with pytest.raises(RuntimeError, match="privacy parameters differ"):
        federated_fit(est, transport)


# -- the logistic protocol (one process) ----------------------------------------

R_LOG = 6


def logistic_stream_data(n=260, p=3, n_learners=4, n_classes=2, seed=0):
    """Rows with a learner (0..n_learners-1) and a round (0..R_LOG-1) each.

    Learner 3 joins in round 2 (late: its own stream starts then) and
    learner 1 is absent from round 3 (its noise increment of round 3 is
    sent with its message of round 4).
    """
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    score = X[:, 0] - X[:, 1] + 0.5 * rng.normal(size=n)
    y = (score > 0).astype(int) if n_classes == 2 else np.digitize(score, [-0.7, 0.7])
    g = rng.integers(0, n_learners, n)
    rnd = rng.integers(0, R_LOG, n)
    rnd[(g == 3) & (rnd < 2)] += 2
    rnd[(g == 1) & (rnd == 3)] = 4
    return X, y, g, rnd


def logistic_sites(X, y, g, rounds, privacy=None):
    """One LogisticSite per learner; batch r = its rows of round r."""
    def loader(s):
        def load(batch):
            rows = (g == s) & (rounds == batch)
            return X[rows], y[rows]
        return load

    return [LogisticSite(loader(s), None if privacy is None else privacy(s), name=f"s{s}")
            for s in np.unique(g)]


def fit_rounds(g, n_rounds):
    """Round of each row as ``LogisticRegression.fit`` assigns it (blocks per learner)."""
    rounds = np.empty(len(g), dtype=int)
    for s in np.unique(g):
        idx = np.flatnonzero(g == s)
        for r, block in enumerate(np.array_split(idx, n_rounds)):
            rounds[block] = r
    return rounds


def in_process_stream(est, X, y, g, rnd, classes):
    for r in range(R_LOG):
        rows = rnd == r
        est.partial_fit(X[rows], y[rows], sample_group=g[rows], classes=classes)
    return est


LOGISTIC_PARAMS = [
    dict(),
    dict(alpha=0.05, fit_intercept=False, local_steps=2),
    dict(feature_clip_norm=1.5, clip_norm=0.5, server_learning_rate=0.7),
]


@pytest.mark.parametrize("params", LOGISTIC_PARAMS)
@pytest.mark.parametrize("n_classes", [2, 3])
def test_logistic_protocol_matches_in_process_fit(params, n_classes):
    X, y, g, _ = logistic_stream_data(n_classes=n_classes)
    g[g == 3] = 2  # fit: every learner has rows in round 0
    g[:5] = 3      # ... but learner 3 only 5 rows: absent from rounds 5, 6
    kw = {"n_rounds": R_LOG, "local_steps": 3, "learning_rate": 0.5, "solver": "local-steps",
          **params}
    transport = RecordingTransport(logistic_sites(X, y, g, fit_rounds(g, R_LOG)))
    remote = federated_fit(LogisticRegression(**kw), transport)
    local = LogisticRegression(**kw).fit(X, y, sample_group=g)
    np.testing.assert_array_equal(remote.classes_, local.classes_)
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-10, rtol=0)
    np.testing.assert_allclose(remote.intercept_, local.intercept_, atol=1e-10, rtol=0)
    assert remote.n_rounds_seen_ == local.n_rounds_seen_ == R_LOG
    assert list(remote.learner_labels_) == [f"s{s}" for s in local.learner_labels_]
    assert len(transport.log) == 1 + R_LOG  # one describe, one request per round
    np.testing.assert_array_equal(remote.predict(X), local.predict(X))


def test_auto_solver_on_learners_runs_the_local_steps_without_newtons_ridge():
    """``solver='auto'`` with ``alpha=None`` on learners runs the local steps
    with their default ridge 0, the same model as ``solver='local-steps'``
    in process (it ran them with Newton's default ridge 1e-4)."""
    X, y, g, _ = logistic_stream_data(n_classes=2)
    g[g == 3] = 2
    kw = {"n_rounds": R_LOG, "local_steps": 3, "learning_rate": 0.5}
    transport = RecordingTransport(logistic_sites(X, y, g, fit_rounds(g, R_LOG)))
    remote = federated_fit(LogisticRegression(**kw), transport)
    local = LogisticRegression(solver="local-steps", **kw).fit(X, y, sample_group=g)
    assert remote.solver_ == local.solver_ == "local-steps"
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-10, rtol=0)
    np.testing.assert_allclose(remote.intercept_, local.intercept_, atol=1e-10, rtol=0)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_logistic_protocol_matches_in_process_stream(n_classes):
    """partial_fit round by round, with a late learner and an absence."""
    X, y, g, rnd = logistic_stream_data(n_classes=n_classes)
    classes = np.unique(y)
    kw = dict(n_rounds=R_LOG, local_steps=4, learning_rate=0.3, alpha=0.01, solver="local-steps")
    transport = RecordingTransport(logistic_sites(X, y, g, rnd))
    remote = LogisticRegression(**kw)
    for r in range(R_LOG):
        federated_partial_fit(remote, transport, r, classes=classes if r == 0 else None)
    local = in_process_stream(LogisticRegression(**kw), X, y, g, rnd, classes)
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-10, rtol=0)
    np.testing.assert_allclose(remote.intercept_, local.intercept_, atol=1e-10, rtol=0)
    assert list(remote.learner_labels_) == ["s0", "s1", "s2", "s3"]
    # the non-private learner sends its raw g_i^r: only one array per reply
    for request, replies in transport.log:
        if request["op"] == "round":
            for reply in replies:
                assert set(reply) <= {"site", "present", "message"}


def learner_privacy(est, seed, ledger, classes=(0, 1)):
    """The LearnerPrivacy of learner ``seed`` matching ``est``, its ledger file under ``ledger``."""
    return LearnerPrivacy.from_estimator(est, random_state=seed, classes=classes,
                                         ledger_path=new_ledger(ledger / "learners.sqlite"))


def private_logistic(mechanism="toeplitz", **kw):
    return LogisticRegression(n_rounds=R_LOG, local_steps=3, learning_rate=0.4,
                              mechanism=mechanism, epsilon=4.0, delta=1e-4, clip_norm=1.0,
                              feature_clip_norm=2.0, random_state=0, **kw)


def _per_learner_streams(monkeypatch, mechanism, seeds):
    """Make the in-process estimator draw learner i's noise from ``default_rng(seeds[i])``.

    The estimator draws the noise of the learners that join in one round from
    one stream of shape ``(n_new, d)``; its draws here stack one
    generator per learner, seeded as the learner seeds its own stream
    (learners in order of joining). Every stream is linear in its draws and
    draws ``(k,) + shape`` at a time, so slice ``i`` of the joint stream is
    the stream the learner draws alone.
    """
    queue = list(seeds)
    cls = type(make_factorization(mechanism, R_LOG))

    def noise_stream(self, rng=None, sigma=1.0, shape=()):
        gens = [np.random.default_rng(queue.pop(0)) for _ in range(shape[0])]

        def source(size):
            return np.stack([gen.standard_normal((size[0],) + tuple(size[2:])) for gen in gens], 1)

        return stream_from_source(self, source, sigma, shape)

    monkeypatch.setattr(cls, "noise_stream", noise_stream)


@pytest.mark.parametrize("mechanism", ["independent", "tree", "honaker", "toeplitz", "optimal", "blt"])
def test_logistic_private_matches_in_process_with_the_learners_streams(monkeypatch, mechanism,
                                                                       ledger_dir):
    """Each learner draws its own stream; the model equals the in-process
    estimator whose learner i draws the same stream (same seed), through a
    late join and an absence (the missed increment is sent later)."""
    X, y, g, rnd = logistic_stream_data(n_classes=3)
    classes = np.unique(y)
    seed = {s: 100 + s for s in range(4)}
    est = private_logistic(mechanism)
    transport = RecordingTransport(logistic_sites(
        X, y, g, rnd, lambda s: learner_privacy(est, seed[s], ledger_dir, classes)))
    for r in range(R_LOG):
        federated_partial_fit(est, transport, r, classes=classes if r == 0 else None)
    _per_learner_streams(monkeypatch, mechanism, [seed[s] for s in (0, 1, 2, 3)])  # join order
    local = in_process_stream(private_logistic(mechanism), X, y, g, rnd, classes)
    assert est.noise_scale_ == local.noise_scale_ > 0
    np.testing.assert_allclose(est.coef_, local.coef_, atol=1e-10, rtol=0)
    np.testing.assert_allclose(est.intercept_, local.intercept_, atol=1e-10, rtol=0)
    # and the noise matters: without it the model differs
    plain = in_process_stream(private_logistic(None), X, y, g, rnd, classes)
    assert np.abs(plain.coef_ - est.coef_).max() > 1e-3
    # the server holds no noise: its training state has no stream
    assert est._training_state.noise is None


def test_logistic_private_fit_matches_in_process_fit(monkeypatch, ledger_dir):
    X, y, g, _ = logistic_stream_data()
    g[g == 3] = 2
    est = private_logistic("tree")
    transport = RecordingTransport(logistic_sites(
        X, y, g, fit_rounds(g, R_LOG), lambda s: learner_privacy(est, 7 * s, ledger_dir)))
    federated_fit(est, transport, classes=[0, 1])
    _per_learner_streams(monkeypatch, "tree", [0, 7, 14])
    local = private_logistic("tree", classes=[0, 1]).fit(X, y, sample_group=g)
    np.testing.assert_allclose(est.coef_, local.coef_, atol=1e-10, rtol=0)
    assert est.privacy_spent_ == local.privacy_spent_ == (4.0, 1e-4)


def _raw_g(theta, X, y, classes, est):
    """g_i^r recomputed here from the rows, independently of the site code."""
    Xa = clip_rows(X, est.feature_clip_norm)
    Xa = np.hstack([np.ones((len(Xa), 1)), Xa])  # x_bar = (1, x): intercept first
    targets = np.where(y == classes[1], 1.0, -1.0)[:, None]
    _, g = local_round(theta, Xa, targets, np.zeros(len(y), dtype=int), local_steps=est.local_steps,
                       learning_rate=est.learning_rate, clip_norm=est.clip_norm,
                       penalize=np.r_[0.0, np.ones(X.shape[1])])
    return g[0].ravel()


@pytest.mark.parametrize("mechanism", ["toeplitz", "independent"])
def test_logistic_private_messages_are_g_plus_the_factorization_noise(mechanism, ledger_dir):
    """What the server receives from learner i, summed over rounds 0..r, is
    ``Σ g_i + (B z_i)_r`` with ``B`` the factorization's matrix and ``z_i``
    the learner's own N(0, σ²) draws, σ the analytic Gaussian calibration of
    (ε, δ) for ``sensitivity(C) * 2 B_g / τ`` (Lemma IV.8, eq. 15): the
    learner sends exactly its prefix sums ``A G_i + B ξ_i``, nothing raw."""
    X, y, g, rnd = logistic_stream_data()
    g[g == 3] = 2
    rnd = np.arange(len(y)) % R_LOG  # no absence: prefix sums line up with rounds
    classes = np.array([0, 1])
    est = private_logistic(mechanism)
    transport = RecordingTransport(logistic_sites(
        X, y, g, rnd, lambda s: learner_privacy(est, 50 + s, ledger_dir)))
    for r in range(R_LOG):
        federated_partial_fit(est, transport, r, classes=classes if r == 0 else None)
    fact = make_factorization(mechanism, R_LOG)
    sigma = gaussian_sigma(4.0, 1e-4, fact.sensitivity * 2 * 1.0 / 3)
    assert est.noise_scale_ == pytest.approx(sigma, rel=1e-12)
    d = X.shape[1] + 1
    residuals = {s: [] for s in range(3)}
    for request, replies in transport.log:
        if request["op"] != "round":
            assert "labels" not in replies[0]  # private learners keep their labels
            continue
        for s, reply in zip(range(3), replies):
            assert reply["present"] and reply["std"] == pytest.approx(sigma, rel=1e-12)
            assert set(reply) == {"site", "present", "message", "std"}
            rows = (g == s) & (rnd == request["batch"])
            raw = _raw_g(request["theta"], X[rows], y[rows], classes, est)
            residuals[s].append(reply["message"] - raw)
    for s in range(3):
        prefix = np.cumsum(residuals[s], axis=0)  # (R, d)
        # one draw per round, in order (these factorizations have n_noise = R)
        z = sigma * np.random.default_rng(50 + s).standard_normal((fact.n_noise, d))
        np.testing.assert_allclose(prefix, fact.B @ z, atol=1e-10, rtol=0)


def test_logistic_unseeded_learners_send_noise_of_the_calibrated_std(ledger_dir):
    """With OS-entropy streams (random_state=None) the residual ĝ - g of
    independent noise is N(0, σ²) per coordinate (chi-square check)."""
    n_learners, rounds = 40, 3
    rng = np.random.default_rng(3)
    X = rng.normal(size=(10 * n_learners * rounds, 3))
    y = (X[:, 0] > 0).astype(int)
    g = np.arange(len(y)) % n_learners
    rnd = (np.arange(len(y)) // n_learners) % rounds
    est = LogisticRegression(n_rounds=rounds, local_steps=2, learning_rate=0.4,
                             mechanism="independent", epsilon=1.0, delta=1e-5,
                             feature_clip_norm=2.0)
    sites = [LogisticSite(lambda b, s=s: (X[(g == s) & (rnd == b)], y[(g == s) & (rnd == b)]),
                          learner_privacy(est, None, ledger_dir), name=f"{s:03d}")
             for s in range(n_learners)]
    transport = RecordingTransport(sites)
    federated_fit(est, transport, classes=[0, 1])
    residuals = []
    for request, replies in transport.log[1:]:
        for s, reply in enumerate(replies):
            rows = (g == s) & (rnd == request["batch"])
            residuals.append(reply["message"] - _raw_g(request["theta"], X[rows], y[rows], [0, 1], est))
    residuals = np.concatenate(residuals)
    n = residuals.size
    assert n == rounds * n_learners * 4
    ratio = np.mean(residuals**2) / est.noise_scale_**2
    assert abs(ratio - 1) < 5 * math.sqrt(2 / n)
    assert abs(np.mean(residuals)) < 5 * est.noise_scale_ / math.sqrt(n)


def test_logistic_learner_guards(ledger_dir):
    X, y, g, rnd = logistic_stream_data()
    classes = [0, 1]
    est = private_logistic()
    transport = RecordingTransport(logistic_sites(
        X, y, g, rnd, lambda s: learner_privacy(est, s, ledger_dir)))
    # private learners do not report labels: classes are needed
    with pytest.raises(ValueError, match="pass classes"):
        federated_fit(private_logistic(), transport)
    federated_partial_fit(est, transport, 0, classes=classes)
    site = transport.sites[0]
    request = dict(transport.log[-1][0])
    # a round is answered once, in order
    with pytest.raises(SiteRefusal, match=f"^{NOT_IN_ORDER}$"):
        site.handle(request)
    # the learner's calibration is its own: other parameters are refused
    for changed in ({"param-epsilon": 8.0}, {"param-learning_rate": 0.1}, {"classes": [0, 1, 2]},
                    {"batch": 0}):
        with pytest.raises(SiteRefusal, match=f"^{MISMATCH}$"):
            site.handle({**request, "round": 1, **changed})
    # a private learner cannot be asked for its raw g (mechanism=None request)
    raw = {k: v for k, v in request.items() if k != "param-mechanism"}
    with pytest.raises(SiteRefusal, match=f"^{MISMATCH}$"):
        site.handle({**raw, "round": 1, "batch": 1})
    # a non-private learner cannot draw noise
    plain = logistic_sites(X, y, g, rnd)[0]
    with pytest.raises(ValueError, match="no LearnerPrivacy"):
        plain.handle(request)
    # the stream continues only where its noise is
    with pytest.raises(ValueError, match="held by the learners"):
        est.partial_fit(X[:10], y[:10], sample_group=g[:10])
    in_process = private_logistic().partial_fit(X[:10], y[:10], sample_group=g[:10], classes=classes)
    with pytest.raises(ValueError, match="held by this estimator"):
        federated_partial_fit(in_process, transport, 1)
    # past the horizon: the server stops, and so does every learner's stream
    for r in range(1, R_LOG):
        federated_partial_fit(est, transport, r)
    with pytest.raises(PrivacyBudgetError):
        federated_partial_fit(est, transport, R_LOG)
    late = dict(transport.log[-1][0], round=R_LOG, batch=R_LOG)
    with pytest.raises(SiteRefusal, match=f"^{EXHAUSTED}$"):
        site.handle(late)


def test_logistic_declared_classes_release_and_budget_through_the_learners(ledger_dir):
    """Issue 10 on the Flower path: the classes hyperparameter declares the
    label set (no classes argument needed, a different one refused before any
    round), the budget is charged once as the stream's Gaussian mechanism, the
    server (which draws no noise) does not warn about its seed, and the
    release cannot continue the stream."""
    from skfedpriv import PrivacyBudget
    from skfedpriv.linear_model._base import ReleasedModelError

    X, y, g, rnd = logistic_stream_data()
    budget = PrivacyBudget(20.0, 1e-2)
    est = private_logistic(classes=[0, 1], budget=budget)
    transport = RecordingTransport(logistic_sites(
        X, y, g, rnd, lambda s: learner_privacy(est, s, ledger_dir)))
    with pytest.raises(ValueError, match="differs from the classes hyperparameter"):
        federated_partial_fit(est, transport, 0, classes=[0, 1, 2])
    assert not [q for q, _ in transport.log if q["op"] == "round"] and len(budget.ledger) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no SeededNoiseWarning: the learners draw the noise
        federated_partial_fit(est, transport, 0)
        federated_partial_fit(est, transport, 1)
    assert est.classes_.tolist() == [0, 1]
    (entry,) = budget.ledger.entries
    assert entry.mechanism == "gaussian"
    assert (entry.sigma, entry.sensitivity) == (est.noise_scale_, est.sensitivity_)
    released = est.release()
    np.testing.assert_array_equal(released.predict(X), est.predict(X))
    assert not hasattr(released, "_training_state")
    n_requests = len(transport.log)
    with pytest.raises(ReleasedModelError):
        federated_partial_fit(released, transport, 2)
    assert len(transport.log) == n_requests
    federated_partial_fit(est, transport, 2)  # the training object continues


def test_logistic_default_learning_rate_through_the_learners(ledger_dir):
    """learning_rate='auto' with a large feature_clip_norm: the server sends
    the step it resolved and the learner resolves the same from its own
    LearnerPrivacy (else it would refuse the round)."""
    X, y, g, rnd = logistic_stream_data()
    kw = dict(n_rounds=R_LOG, local_steps=3, mechanism="tree", epsilon=4.0, delta=1e-4,
              feature_clip_norm=6.0, classes=[0, 1])
    est = LogisticRegression(**kw)
    transport = RecordingTransport(logistic_sites(
        X, y, g, rnd, lambda s: learner_privacy(est, s, ledger_dir)))
    for r in range(R_LOG):
        federated_partial_fit(est, transport, r)
    assert est.learning_rate_ == 2.0 / ((36.0 + 1.0) / 4.0) < 0.5
    assert transport.log[-1][0]["param-learning_rate"] == est.learning_rate_
    assert transport.sites[0].privacy.settings.learning_rate == est.learning_rate_


def test_logistic_server_refuses_a_learner_with_another_calibration(ledger_dir):
    """A learner running the server's parameters but another std (tampered) is refused."""
    X, y, g, rnd = logistic_stream_data()
    est = private_logistic()
    privacy = learner_privacy(est, 1, ledger_dir)
    privacy.noise_scale *= 0.5
    sites = logistic_sites(X, y, g, rnd, lambda s: privacy)
    with pytest.raises(RuntimeError, match="privacy parameters differ"):
        federated_partial_fit(est, RecordingTransport(sites), 0, classes=[0, 1])


@pytest.mark.parametrize("bad", [dict(random_state=1.5), dict(random_state=True),
                                 dict(random_state=np.random.default_rng(0)),
                                 dict(ledger_path=3)])
def test_site_and_learner_privacy_refuse_what_cannot_cross_processes_alike(bad):
    from skfedpriv._param_validation import InvalidParameterError

    name = next(iter(bad))
    with pytest.raises(InvalidParameterError, match=f"'{name}' parameter of SitePrivacy"):
        SitePrivacy(1.0, 1e-5, 3.0, **bad)
    with pytest.raises(InvalidParameterError, match=f"'{name}' parameter of LearnerPrivacy"):
        LearnerPrivacy("tree", 1.0, 1e-5, **bad)


def test_flower_re_exports_the_protocol():
    """``skfedpriv.flower`` is the Flower adapter; the protocol's public names
    live in ``skfedpriv.federated`` and stay importable from it (no flwr needed)."""
    from skfedpriv import federated, flower

    for name in set(federated.__all__) - {"PROTOCOL_VERSION"}:
        assert getattr(flower, name) is getattr(federated, name)


def test_curvature_cache_answers_every_product_of_a_fit():
    # with the cache each summary carries the smoothed and the V_q''
    # matrices, so the server forms the products of both phases itself: no
    # curvature_product round trip, and the in-process fit's model
    X, y, g, b = make_data()
    transport = RecordingTransport(local_sites(X, y, g, b))
    cached = DWDClassifier(q=1.0)
    sites = RemoteSites(transport, 0)
    cached.partial_fit_sites(sites, classes=[0, 1])
    local = DWDClassifier(q=1.0).fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
    assert "curvature_product" not in {request["op"] for request, _ in transport.log}
    assert sites.rounds < cached.n_iter_ * 3
    np.testing.assert_allclose(cached.coef_, local.coef_, atol=1e-10, rtol=0)
