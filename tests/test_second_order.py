"""shift_correction='second-order': the summed third derivative against
brute force and against the curvature's own derivative, the aggregated
correction against its formula, the default stream untouched, the refusals
before any state change, and the shift it removes on a simulated stream."""

import re
import warnings

import numpy as np
import pytest

from skfedpriv import DWDClassifier
from skfedpriv._loss import GenDWDLoss, LogisticLoss
from skfedpriv._param_validation import InvalidParameterError
from skfedpriv.datasets import gaussian_gendwd_target, make_federated_gaussians
from skfedpriv.federated import RemoteSites, federated_fit, federated_partial_fit
from skfedpriv.linear_model import StreamShiftWarning
from skfedpriv.linear_model._dwd_solver import augmented_gram
from skfedpriv.linear_model._inference_sites import site_inference_summary
from skfedpriv.linear_model._inference_stream import track_stream_shift
from skfedpriv.linear_model import _second_order as second_order
from skfedpriv.linear_model._second_order import (
    MAX_THIRD_NUMBERS, ShiftCorrection, batch_moments, corrected_theta, delta_covariance, second_order_step,
    site_fourth_moment, site_outer_derivative, site_third_moment, smoothed_third_derivative)
from _transport import RecordingTransport
from test_flower import local_sites, make_data


def _site(n=60, p=3, n_models=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    Y = np.where(rng.random((n, n_models)) < 0.6, 1.0, -1.0)
    return X, Y, rng.uniform(0.5, 2.0, size=n), rng.normal(scale=0.5, size=(p + 1, n_models))


@pytest.mark.parametrize("loss", [GenDWDLoss(1.0), GenDWDLoss(4.0), LogisticLoss()])
@pytest.mark.parametrize("block", [None, 7 * 16])
def test_third_moment_is_the_per_row_sum(loss, block, monkeypatch):
    if block is not None:  # 7 rows at a time
        monkeypatch.setattr(second_order, "_BLOCK_NUMBERS", block)
    X, Y, w, Theta = _site()
    widths = np.array([0.3, 0.05])
    got = site_third_moment(X, Y, w, Theta, True, loss.curvature, widths)
    for k in range(2):
        want = np.zeros((4, 4, 4))
        for i in range(len(X)):
            x = np.r_[1.0, X[i]]
            u = Y[i, k] * x @ Theta[:, k]
            third = (loss.curvature(u + widths[k]) - loss.curvature(u - widths[k])) / (
                2 * widths[k])
            want += w[i] * Y[i, k] * third * np.multiply.outer(np.multiply.outer(x, x), x)
        np.testing.assert_allclose(got[k], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("block", [None, 7 * 16])
def test_fourth_moment_is_the_per_row_sum(block, monkeypatch):
    if block is not None:  # 7 rows at a time
        monkeypatch.setattr(second_order, "_BLOCK_NUMBERS", block)
    loss, widths = GenDWDLoss(1.0), np.array([0.3, 0.05])
    X, Y, w, Theta = _site()
    got = site_fourth_moment(X, Y, w, Theta, True, loss.curvature, widths)
    for k in range(2):
        want = np.zeros((16, 16))
        for i in range(len(X)):
            x = np.r_[1.0, X[i]]
            u, h = Y[i, k] * x @ Theta[:, k], widths[k]
            fourth = (loss.curvature(u + h) - 2 * loss.curvature(u) + loss.curvature(u - h)) / h**2
            want += w[i] * fourth * np.outer(np.outer(x, x), np.outer(x, x))
        np.testing.assert_allclose(got[k], want, rtol=1e-12, atol=1e-12)


def test_third_moment_is_the_derivative_of_the_curvature():
    """For a smooth loss, ``S[v]`` is the directional derivative of the
    curvature sum ``Σ w ℓ'' x̄ x̄ᵀ`` (its finite difference along ``v``)."""
    loss = LogisticLoss()
    X, Y, w, Theta = _site(seed=1)
    v = np.random.default_rng(2).normal(size=Theta.shape)
    eps = 1e-5

    def curvature(theta):
        return site_inference_summary(X, Y, w, theta, True, loss.derivative,
                                      loss.curvature).curvature

    numeric = (curvature(Theta + eps * v) - curvature(Theta - eps * v)) / (2 * eps)
    third = site_third_moment(X, Y, w, Theta, True, loss.curvature, np.full(2, 1e-4))
    np.testing.assert_allclose(np.einsum("kabc,ck->kab", third, v), numeric, rtol=1e-5,
                               atol=1e-7)


@pytest.mark.parametrize("loss", [GenDWDLoss(1.0), LogisticLoss()])
def test_outer_derivative_is_the_derivative_of_the_score_outer_products(loss):
    """``∂B[..., a]`` is the derivative of ``Σ w² ℓ'² x̄ x̄ᵀ`` along ``θ_a``
    (central differences of the inference summary's ``score_outer``)."""
    X, Y, w, Theta = _site(seed=5)
    eps = 1e-6

    def outer(theta):
        return site_inference_summary(X, Y, w, theta, True, loss.derivative,
                                      loss.curvature).score_outer

    got = site_outer_derivative(X, Y, w, Theta, True, loss.derivative, loss.curvature)
    for a in range(Theta.shape[0]):
        step = np.zeros_like(Theta)
        step[a] = eps
        numeric = (outer(Theta + step) - outer(Theta - step)) / (2 * eps)
        np.testing.assert_allclose(got[..., a], numeric, rtol=1e-5, atol=1e-6)


def test_delta_covariance_is_the_corrected_maps_jacobian():
    """``A V Aᵀ`` with ``A`` the central-difference Jacobian of
    ``θ ↦ θ - C(θ)⁻¹ ½ r S(θ) : C(θ)⁻¹ B(θ) C(θ)⁻¹`` (``C``, ``B``, ``S`` the
    rows' curvature, score outer products and third moment at ``θ``), for a
    smooth loss, whose smoothed third and fourth moments are the
    derivatives of ``C`` and ``S``."""
    loss, h = LogisticLoss(), np.full(2, 1e-3)
    X, Y, w, Theta = _site(n=200, seed=6)
    ridge = np.diag(np.r_[0.0, np.full(3, 0.5)])
    seen = float(w.sum())

    def at(theta):
        got = site_inference_summary(X, Y, w, theta, True, loss.derivative, loss.curvature)
        C = got.curvature + ridge
        V = np.linalg.solve(C, np.linalg.solve(C, got.score_outer).transpose(0, 2, 1))
        S = site_third_moment(X, Y, w, theta, True, loss.curvature, h)
        return C, V, ShiftCorrection(S, None, None, ratio_sum=1.7, seen=seen)

    C, V, _ = at(Theta)
    state = ShiftCorrection(
        site_third_moment(X, Y, w, Theta, True, loss.curvature, h),
        site_outer_derivative(X, Y, w, Theta, True, loss.derivative, loss.curvature),
        site_fourth_moment(X, Y, w, Theta, True, loss.curvature, h), ratio_sum=1.7, seen=seen)

    def corrected(theta):
        C_t, V_t, state_t = at(theta)
        return corrected_theta(theta, state_t, V_t, C_t)

    eps = 1e-5
    for k in range(2):
        A = np.zeros((4, 4))
        for a in range(4):
            step = np.zeros_like(Theta)
            step[a, k] = eps
            A[:, a] = (corrected(Theta + step) - corrected(Theta - step))[:, k] / (2 * eps)
        want = A @ V[k] @ A.T
        np.testing.assert_allclose(delta_covariance(state, V, C)[k], want, rtol=1e-4,
                                   atol=1e-6 * np.abs(want).max())
        assert not np.allclose(want, V[k], rtol=1e-3)  # the correction moves it


def test_a_quadratic_loss_has_no_third_derivative():
    u = np.linspace(-3, 3, 13)
    assert np.all(smoothed_third_derivative(lambda m: np.full_like(m, 2.0), u, 0.1) == 0.0)


def test_gendwd_kink_enters_as_the_jump_over_the_window():
    """Left of the kink ``V_q'' = 0``; within ``h`` of it the smoothed third
    derivative is ``V_q''(u + h) / 2h``, its jump over the window."""
    loss = GenDWDLoss(1.0)
    h = 0.05
    assert smoothed_third_derivative(loss.curvature, np.array([0.3]), h)[0] == 0.0
    near = smoothed_third_derivative(loss.curvature, np.array([0.5]), h)[0]
    assert near == pytest.approx(loss.curvature(0.55) / (2 * h))


def test_aggregated_correction_matches_the_batchwise_formula():
    """``S = Σ_j T_j`` and ``r = Σ_{j≥2} W_j / N_j`` over three batches, and
    ``θ - C⁻¹ ½ r S : V`` written out entry by entry."""
    rng = np.random.default_rng(3)
    loss, state, thirds, ratio, seen = GenDWDLoss(1.0), ShiftCorrection.start(2, 4), 0, 0, 0
    for j in range(3):
        X, Y, w, Theta = _site(n=40 + 10 * j, seed=10 + j)
        A = rng.normal(size=(2, 4, 4))
        cov = A @ A.transpose(0, 2, 1) / 50
        sites = _Sites([(X[:20], Y[:20], w[:20]), (X[20:], Y[20:], w[20:])])
        state = state.advance(batch_moments(sites, Theta, cov, loss), w.sum())
        Xa = np.column_stack([np.ones(len(X)), X])
        widths = np.sqrt(np.einsum("kab,ab->k", cov, Xa.T @ (w[:, None] * Xa)) / w.sum())
        thirds = thirds + site_third_moment(X, Y, w, Theta, True, loss.curvature, widths)
        seen += w.sum()
        ratio += w.sum() / seen if j > 0 else 0.0
    np.testing.assert_allclose(state.third, thirds, rtol=1e-10, atol=1e-10)
    assert state.ratio_sum == pytest.approx(ratio, rel=1e-14) and state.seen == seen
    C = np.stack([np.eye(4) * 30 + 1.0, np.eye(4) * 20])
    theta = rng.normal(size=(4, 2))
    got = corrected_theta(theta, state, cov, C)
    for k in range(2):
        bias = [0.5 * ratio * sum(thirds[k, a, b, c] * cov[k, b, c] for b in range(4)
                                  for c in range(4)) for a in range(4)]
        np.testing.assert_allclose(got[:, k], theta[:, k] - np.linalg.solve(C[k], bias),
                                   rtol=1e-10)


class _Sites:
    """In-process sites as :func:`batch_moments` reads them."""

    fit_intercept = True

    def __init__(self, parts):
        self.parts, self.weight_sum = parts, sum(w.sum() for _, _, w in parts)
        self.task_parts = parts

    def gram(self):
        return sum(augmented_gram(X, w, self.fit_intercept) for X, _, w in self.parts)


def _stream(clf, X, y, g, b):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in np.unique(b):
            rows = b == k
            clf.partial_fit(X[rows], y[rows], sample_group=g[rows], classes=[-1, 1])
    return clf


def test_the_chain_and_its_covariance_are_the_default_streams():
    """Only the published estimate moves: the state the next batch starts
    from, the covariance and the curvature are the default stream's, and a
    one-batch fit is the default fit bit for bit."""
    X, y, g, b = make_federated_gaussians(n_sites=3, n_batches=4, n_per_batch=40,
                                          n_features=3, ratio=4.0, random_state=0)
    plain = DWDClassifier(inference=True, shift_correction=None).fit(X, y, sample_group=g)
    fitted = DWDClassifier(inference=True, shift_correction="second-order").fit(
        X, y, sample_group=g)
    np.testing.assert_array_equal(fitted.coef_, plain.coef_)
    np.testing.assert_array_equal(fitted.intercept_, plain.intercept_)
    plain = _stream(DWDClassifier(inference=True, shift_correction=None), X, y, g, b)
    corrected = _stream(DWDClassifier(inference=True, shift_correction="second-order"),
                        X, y, g, b)
    np.testing.assert_array_equal(corrected._training_state.theta, plain._training_state.theta)
    np.testing.assert_array_equal(corrected._training_state.coef_cov, plain.coef_cov_)
    np.testing.assert_array_equal(corrected.curvature_, plain.curvature_)
    assert not np.allclose(corrected.coef_, plain.coef_, rtol=0, atol=1e-12)
    assert not np.allclose(corrected.coef_cov_, plain.coef_cov_, rtol=0, atol=1e-12)
    assert not np.shares_memory(corrected.coef_cov_, corrected._training_state.coef_cov)
    assert "shift_correction" in repr(corrected._training_state)


@pytest.mark.parametrize("params", [dict(shift_correction="second-order"),
                                    dict(shift_correction="second-order", inference=True,
                                         mechanism="local-gaussian", clip_norm=3.0)])
def test_refused_without_inference_or_under_a_mechanism(params):
    X, y, _, _ = make_data()
    with pytest.raises(InvalidParameterError, match="inference=True and mechanism=None"):
        DWDClassifier(**params).fit(X, y)


def _remote_and_local(make, n_batches=3, start="partial_fit"):
    """The same stream through the scripted transport and in process
    (``start='fit'``: its first batch by ``fit``)."""
    X, y, g, b = make_federated_gaussians(n_sites=3, n_batches=n_batches, n_per_batch=30,
                                          n_features=3, ratio=4.0, random_state=1)
    transport = RecordingTransport(local_sites(X, y, g, b))
    remote, local = make(), make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StreamShiftWarning)
        for k in range(n_batches):
            rows = b == k
            if k == 0 and start == "fit":
                federated_fit(remote, transport, k, classes=[-1, 1])
                local.fit(X[rows], y[rows], sample_group=g[rows])
            else:
                federated_partial_fit(remote, transport, k, classes=[-1, 1])
                local.partial_fit(X[rows], y[rows], sample_group=g[rows], classes=[-1, 1])
            yield remote, local, transport


@pytest.mark.parametrize("option, start", [("second-order", "partial_fit"),
                                           ("auto", "partial_fit"), ("auto", "fit")])
def test_remote_sites_publish_the_in_process_correction(option, start):
    """Through the transport (``gram`` and ``second_order_summary`` per
    batch) the corrected estimate and its delta-method covariance are the
    in-process ones, to rounding, after every batch (the default 'auto'
    too: its decision does not depend on the transport; started by ``fit``,
    no moments asked for the fit batch, imputed alike on both sides)."""
    make = lambda: DWDClassifier(inference=True, shift_correction=option)  # noqa: E731
    for remote, local, transport in _remote_and_local(make, start=start):
        np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-8, atol=1e-11)
        np.testing.assert_allclose(remote.intercept_, local.intercept_, rtol=1e-8, atol=1e-11)
        np.testing.assert_allclose(remote.coef_cov_, local.coef_cov_, rtol=1e-7, atol=1e-13)
    asked = [q["batch"] for q, _ in transport.log if q["op"] == "second_order_summary"]
    assert asked == ([1, 2] if start == "fit" else [0, 1, 2])
    *_, (first, _, _) = _remote_and_local(lambda: DWDClassifier(inference=True,
                                                                 shift_correction=None))
    assert not np.allclose(first.coef_, remote.coef_, rtol=0, atol=1e-10)  # it corrects


def test_a_site_sends_the_moments_of_its_own_rows():
    """A site's reply is :func:`site_second_order_moments` of its rows at
    the request's θ and widths."""
    from skfedpriv.linear_model._second_order import site_second_order_moments

    make = lambda: DWDClassifier(inference=True, shift_correction="second-order")  # noqa: E731
    *_, (_, _, transport) = _remote_and_local(make, n_batches=2)
    X, y, g, b = make_federated_gaussians(n_sites=3, n_batches=2, n_per_batch=30,
                                          n_features=3, ratio=4.0, random_state=1)
    request, replies = [(q, r) for q, r in transport.log if q["op"] == "second_order_summary"][-1]
    assert request["widths"].shape == (1,) and np.all(request["widths"] > 0)
    for s, reply in enumerate(replies):
        rows = (g == s) & (b == request["batch"])
        Y = np.where(y[rows] == 1, 1.0, -1.0)[:, None]
        want = site_second_order_moments(X[rows], Y, np.ones(rows.sum()), request["theta"],
                                         True, GenDWDLoss(1.0), request["widths"])
        for key, value in zip(("third", "outer_derivative", "fourth"), want):
            np.testing.assert_allclose(reply[key], value, rtol=1e-12, atol=1e-12)


def test_sites_check_the_moments_request(ledger_dir, caplog, monkeypatch):
    """A non-private site refuses widths and parameters of other shapes and
    moments beyond its own size limit; a private site refuses the raw moments with a fixed text, and remote
    sites with a private site do not offer them (refused before any
    request)."""
    import logging

    from skfedpriv.federated import RemoteSites, SitePrivacy, SiteRefusal
    from skfedpriv.federated._refusal import RAW_SUMS
    from skfedpriv.federated._site import PROTOCOL_VERSION
    from _ledgers import new_ledger

    caplog.set_level(logging.ERROR, logger="skfedpriv.federated")
    X, y, g, b = make_data()
    base = {"protocol": PROTOCOL_VERSION, "op": "second_order_summary", "batch": 0,
            "classes": [0, 1], "fit_intercept": True, "loss": "gendwd", "loss-q": 1.0,
            "theta": np.zeros((4, 1)), "widths": np.array([0.1])}
    site = local_sites(X, y, g, b)[0]
    assert site.handle(dict(base))["fourth"].shape == (1, 16, 16)
    with monkeypatch.context() as patch:  # the site's own limit: 1 x (2 x 4^3 + 4^4) = 384
        patch.setattr("skfedpriv.federated._site.MAX_THIRD_NUMBERS", 383)
        with pytest.raises(ValueError, match="exceed 383 numbers"):
            site.handle(dict(base))
    for bad in (dict(widths=np.array([0.1, 0.2])), dict(widths=np.array([-0.1])),
                dict(widths=np.array([np.nan])), dict(theta=np.zeros((3, 1)))):
        with pytest.raises(Exception, match="widths|shape"):
            site.handle({**base, **bad})
    privacy = SitePrivacy(1.0, 1e-5, 3.0, classes=[0, 1],
                          ledger_path=new_ledger(ledger_dir / "s.sqlite"))
    private = local_sites(X, y, g, b, privacy=lambda s: privacy)
    with pytest.raises(SiteRefusal, match=RAW_SUMS):
        private[0].handle({**base, "clip_norm": 3.0})
    transport = RecordingTransport(private)
    remote = RemoteSites(transport, 0)
    assert not remote.offers_second_order
    with pytest.raises(NotImplementedError, match="private"):
        remote.second_order_summary(np.zeros((4, 1)), np.eye(4)[None], GenDWDLoss(1.0))
    assert all(q["op"] != "second_order_summary" for q, _ in transport.log)


def test_sites_without_the_moments_are_refused_before_anything_changes():
    """A DWDSites that does not send the moments: refused before any request."""
    X, y, g, b = make_data()
    transport = RecordingTransport(local_sites(X, y, g, b))

    sites = RemoteSites(transport, 0)
    sites.offers_second_order = False
    clf = DWDClassifier(inference=True, shift_correction="second-order")
    with pytest.raises(NotImplementedError, match="shift_correction=None"):
        clf.fit_sites(sites)
    assert not hasattr(clf, "coef_")
    assert not any(q["op"] in ("summary", "inference_summary") for q, _ in transport.log)
    # 'auto' started by fit: the fit asks no moments, the next batch is refused
    auto = DWDClassifier(inference=True).fit_sites(sites)
    coef, asked = auto.coef_.copy(), len(transport.log)
    later = RemoteSites(transport, 1)
    later.offers_second_order = False
    with pytest.raises(NotImplementedError, match="shift_correction=None"):
        auto.partial_fit_sites(later)
    np.testing.assert_array_equal(auto.coef_, coef)
    assert not any(q["op"] in ("summary", "inference_summary", "second_order_summary")
                   for q, _ in transport.log[asked:])


def test_too_many_parameters_are_refused_before_anything_changes():
    p = int(round(MAX_THIRD_NUMBERS ** (1 / 3)))  # p1 = p + 1 passes the limit
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(2 * p, p)), np.r_[np.zeros(p), np.ones(p)]
    clf = DWDClassifier(inference=True, shift_correction="second-order")
    with pytest.raises(ValueError, match="use shift_correction=None"):
        clf.fit(X, y)
    assert not hasattr(clf, "coef_")


def test_the_shift_shrinks_and_the_intervals_cover():
    """p = 5, 4:1 classes, 20 batches of 200 rows over 5 sites, 40 data sets:
    the first-order stream sits off the offline fit by about 0.3 of the
    estimate's spread (one parameter); the corrected one by less than half
    that. The corrected intervals cover (pooled) and their standard errors
    match the corrected estimates' spread."""
    p, reps = 5, 40
    intercept, coef = gaussian_gendwd_target(p, 0.2, 1.0, 4.0, q=1.0)
    target = np.r_[intercept, coef]
    offline, first, second, se = [], [], [], []
    for seed in range(reps):
        X, y, g, b = make_federated_gaussians(n_sites=5, n_batches=20, n_per_batch=40,
                                              n_features=p, ratio=4.0, random_state=seed)
        fit = DWDClassifier().fit(X, y, sample_group=g)
        offline.append(np.r_[fit.intercept_, fit.coef_[0]])
        clf = _stream(DWDClassifier(inference=True, shift_correction=None), X, y, g, b)
        first.append(np.r_[clf.intercept_, clf.coef_[0]])
        clf = _stream(DWDClassifier(inference=True, shift_correction="second-order"), X, y, g, b)
        second.append(np.r_[clf.intercept_, clf.coef_[0]])
        se.append(np.r_[clf.intercept_se_, clf.coef_se_[0]])
    offline, first, second, se = map(np.array, (offline, first, second, se))

    def shift(stream):
        return np.abs((stream - offline).mean(axis=0) / stream.std(axis=0, ddof=1)).max()

    assert shift(first) > 0.2
    assert shift(second) < 0.5 * shift(first)
    covered = np.abs(second - target) <= 1.959964 * se
    assert 0.90 <= covered.mean() <= 0.99
    ratio = se.mean(axis=0) / second.std(axis=0, ddof=1)
    assert np.all((0.75 < ratio) & (ratio < 1.3))


def test_the_covariance_matches_the_corrected_estimates_spread():
    """p = 5, 4:1 classes, 20 batches of 50 rows over 5 sites, 40 data sets:
    the corrected estimates vary more than the chain's covariance says (it
    misses the correction's own variance); the published delta-method
    covariance includes it (total variance within [0.9, 1.4] of the
    empirical one, conservative as measured in benchmarks/README.md)."""
    published, chain, estimates = [], [], []
    for seed in range(40):
        X, y, g, b = make_federated_gaussians(n_sites=5, n_batches=20, n_per_batch=10,
                                              n_features=5, ratio=4.0, random_state=seed)
        clf = _stream(DWDClassifier(inference=True, shift_correction="second-order"), X, y, g, b)
        estimates.append(np.r_[clf.intercept_, clf.coef_[0]])
        published.append(clf.coef_cov_[0])
        chain.append(clf._training_state.coef_cov[0])
    empirical = np.trace(np.cov(np.array(estimates).T))
    assert np.trace(np.mean(chain, axis=0)) / empirical < 0.85
    assert 0.9 < np.trace(np.mean(published, axis=0)) / empirical < 1.4


def _small_batches(p, n_batches=2, rows=30, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_batches * rows, p))
    y = np.where(X[:, 0] + rng.normal(size=len(X)) > 0, 1, -1)
    return X, y, np.repeat(np.arange(n_batches), rows)


@pytest.mark.parametrize("option, p, text, corrected", [
    ("auto", 3, "The second-order correction is on (shift_correction='auto')", True),
    ("second-order", 3, "The second-order correction is on (shift_correction='second-order')",
     True),
    (None, 3, "No second-order correction (shift_correction=None): 'auto' (the default)", False),
    ("auto", 55, "1 x (2 x 56^3 + 56^4) = 10185728 numbers, more than 10000000", False),
    ("fit", 3, "The second-order correction is on (shift_correction='auto'; this stream "
     "started with fit, whose batch's moments are imputed", True)])
def test_the_shift_warning_says_whether_and_why_the_stream_is_corrected(option, p, text,
                                                                       corrected):
    """A small-batch DWD stream warns with what the correction does: on, off
    by choice, off under 'auto' because its state is too large (p = 55,
    one model: 2 p1³ + p1⁴ > 10⁷, decided from the parameter count alone),
    or on with the fit batch's moments imputed where fit started the stream;
    the stream carries the correction's state exactly when it is on."""
    X, y, b = _small_batches(p)
    if option == "fit":  # 'auto', the stream started by fit
        clf = DWDClassifier(inference=True).fit(X[b == 0], y[b == 0])
    else:
        clf = DWDClassifier(inference=True, shift_correction=option)
        clf.partial_fit(X[b == 0], y[b == 0], classes=[-1, 1])
    with pytest.warns(StreamShiftWarning, match=re.escape(text)):
        clf.partial_fit(X[b == 1], y[b == 1])
    assert (clf._training_state.shift_correction is not None) == corrected


def test_a_logistic_streams_warning_names_no_correction():
    with pytest.warns(StreamShiftWarning, match="Batches of at least") as caught:
        track_stream_shift(1.0, 100.0, 200.0, 21, "LogisticRegression")
    assert "shift_correction" not in str(caught[0].message)


def test_auto_decides_from_the_parameter_layout_only():
    """The limit ``n_models (2 p1³ + p1⁴) <= 10⁷``: p <= 54 for one model,
    p1 <= 42 for three (one-vs-rest)."""
    assert second_order.uses_second_order("auto", 55, 1)
    assert not second_order.uses_second_order("auto", 56, 1)
    assert second_order.uses_second_order("auto", 42, 3)
    assert not second_order.uses_second_order("auto", 43, 3)
    assert second_order.uses_second_order("second-order", 56, 1)
    assert not second_order.uses_second_order(None, 3, 1)


@pytest.mark.parametrize("start_limit, later_limit", [(MAX_THIRD_NUMBERS, 0),
                                                      (0, MAX_THIRD_NUMBERS)])
def test_auto_is_fixed_at_the_first_batch(start_limit, later_limit, monkeypatch):
    """Whatever 'auto' decided at the stream's first batch holds for its
    later batches (the training state carries the correction or not), and
    the published estimate is the corresponding explicit option's, bit for
    bit."""
    X, y, b = _small_batches(3, n_batches=3)
    auto = DWDClassifier(inference=True)
    explicit = DWDClassifier(inference=True,
                             shift_correction="second-order" if start_limit else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StreamShiftWarning)
        for k in range(3):
            explicit.partial_fit(X[b == k], y[b == k], classes=[-1, 1])
        for k in range(3):
            monkeypatch.setattr(second_order, "MAX_THIRD_NUMBERS",
                                start_limit if k == 0 else later_limit)
            auto.partial_fit(X[b == k], y[b == k], classes=[-1, 1])
    assert (auto._training_state.shift_correction is not None) == bool(start_limit)
    np.testing.assert_array_equal(auto.coef_, explicit.coef_)
    np.testing.assert_array_equal(auto.coef_cov_, explicit.coef_cov_)


def test_a_stream_cannot_switch_its_correction():
    """Changing ``shift_correction`` in a stream with inference is refused
    before any state changes; without inference it does not bind it."""
    X, y, b = _small_batches(3)
    started = (DWDClassifier(inference=True).partial_fit(X[b == 0], y[b == 0], classes=[-1, 1]),
               DWDClassifier(inference=True).fit(X[b == 0], y[b == 0]))
    for clf in started:
        coef = clf.coef_.copy()
        clf.set_params(shift_correction=None)
        with pytest.raises(ValueError):
            clf.partial_fit(X[b == 1], y[b == 1])
        np.testing.assert_array_equal(clf.coef_, coef)
    plain = DWDClassifier().partial_fit(X[b == 0], y[b == 0], classes=[-1, 1])
    plain.set_params(shift_correction=None).partial_fit(X[b == 1], y[b == 1])


def test_with_a_quadratic_loss_the_published_estimate_is_the_chains():
    """A quadratic loss has no linearization remainder (the first-order
    stream is the offline fit): its correction is exactly zero, and so is
    the correction's share of the covariance."""
    X, Y, w, Theta = _site(seed=4)

    sites = _Sites([(X, Y, w)])

    class Quadratic:  # ℓ(u) = (1 - u)²
        derivative = staticmethod(lambda u: 2.0 * (u - 1.0))
        curvature = staticmethod(lambda u: np.full_like(u, 2.0))

    cov = np.stack([np.eye(4) * 0.1] * 2)
    curvature = np.stack([np.eye(4) * 50.0] * 2)
    state = ShiftCorrection.start(2, 4)
    for _ in range(3):
        published, published_cov, state = second_order_step(sites, state, Theta, cov,
                                                             curvature, Quadratic)
        np.testing.assert_array_equal(published, Theta)
        np.testing.assert_allclose(published_cov, cov, rtol=1e-15, atol=0)
    assert state.ratio_sum > 0 and not state.third.any()


def _three_classes(n_batches=3, rows=90, p=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_batches * rows, p))
    y = np.argmax(X[:, :3] + rng.normal(size=(len(X), 3)), axis=1)
    return X, y, np.repeat(np.arange(n_batches), rows), np.arange(len(X)) % 3


@pytest.mark.parametrize("three", [False, True], ids=["binary", "one-vs-rest"])
def test_the_default_is_the_corrected_stream(three):
    """A stream started by ``partial_fit``: the default ('auto', at these
    sizes) publishes the 'second-order' stream bit for bit, every
    one-vs-rest model corrected. A stream started by ``fit``: 'second-order'
    carries the correction from the fit; 'auto' corrects it too (the fit
    batch's moments imputed: another estimate than the carried one), on
    the first-order chain."""
    if three:
        X, y, b, g = _three_classes()
    else:
        X, y, g, b = make_federated_gaussians(n_sites=3, n_batches=3, n_per_batch=30,
                                              n_features=3, ratio=4.0, random_state=2)
    options = {"default": {}, "auto": dict(shift_correction="auto"),
               "second-order": dict(shift_correction="second-order"),
               None: dict(shift_correction=None)}
    streams = {(start, name): DWDClassifier(inference=True, **params)
               for start in ("fit", "partial_fit") for name, params in options.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StreamShiftWarning)
        for (start, _), clf in streams.items():
            if start == "fit":
                clf.fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
            else:
                clf.partial_fit(X[b == 0], y[b == 0], sample_group=g[b == 0],
                                classes=np.unique(y))
        for k in (1, 2):
            for clf in streams.values():
                clf.partial_fit(X[b == k], y[b == k], sample_group=g[b == k])

    def same(a, b):
        for name in ("coef_", "intercept_", "coef_cov_"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))

    same(streams["partial_fit", "default"], streams["partial_fit", "second-order"])
    same(streams["partial_fit", "auto"], streams["partial_fit", "second-order"])
    same(streams["fit", "default"], streams["fit", "auto"])
    same(streams["fit", "second-order"], streams["partial_fit", "second-order"])
    np.testing.assert_array_equal(streams["fit", "default"]._training_state.theta,
                                  streams["fit", None]._training_state.theta)
    for start in ("partial_fit", "fit"):
        moved = np.abs(streams[start, "default"].coef_
                       - streams[start, None].coef_).max(axis=1)
        assert np.all(moved > 1e-8) and len(moved) == (3 if three else 1)
    assert not np.allclose(streams["fit", "default"].coef_,
                           streams["fit", "second-order"].coef_, rtol=0, atol=1e-12)


def test_clone_and_grid_search_keep_the_default():
    """clone keeps 'auto'; a grid search's refit is the offline fit (the
    first-order estimate, no moments computed) and its stream continues
    corrected, as a stream started by an explicit 'auto' fit."""
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV

    X, y, b, _ = _three_classes(n_batches=2, rows=120)
    assert clone(DWDClassifier(inference=True)).shift_correction == "auto"
    search = GridSearchCV(DWDClassifier(inference=True), {"alpha": [1e-3, 1e-2]}, cv=3)
    best = search.fit(X[b == 0], y[b == 0]).best_estimator_
    plain = DWDClassifier(inference=True, alpha=best.alpha, shift_correction=None).fit(
        X[b == 0], y[b == 0])
    np.testing.assert_array_equal(best.coef_, plain.coef_)
    assert best._training_state.shift_correction.imputed == best.n_samples_seen_
    auto = DWDClassifier(inference=True, alpha=best.alpha).fit(X[b == 0], y[b == 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StreamShiftWarning)
        for clf in (best, plain, auto):
            clf.partial_fit(X[b == 1], y[b == 1])
    np.testing.assert_array_equal(best.coef_, auto.coef_)
    assert not np.allclose(best.coef_, plain.coef_, rtol=0, atol=1e-12)


def test_an_imputed_first_batch_is_the_exact_state_where_moments_scale_with_weight():
    """The state arithmetic of a stream started by ``fit`` under 'auto':
    with each batch's moments ``W_j M`` (one expected moment per row, the
    model's assumption), the first batch's share imputed from the later
    batches' gives the exactly carried state; otherwise its imputed share
    is ``N_1 / (N - N_1)`` of the later batches' sums. Only a first batch
    can leave its moments out."""
    rng = np.random.default_rng(7)
    n_models, p1 = 2, 3
    unit = (rng.normal(size=(n_models, p1, p1, p1)), rng.normal(size=(n_models, p1, p1, p1)),
            rng.normal(size=(n_models, p1 * p1, p1 * p1)))
    weights = [120.0, 35.0, 50.0, 41.5]
    exact = imputed = ShiftCorrection.start(n_models, p1)
    for j, w in enumerate(weights):
        moments = tuple(w * m for m in unit)
        exact = exact.advance(moments, w)
        imputed = imputed.advance(None if j == 0 else moments, w)
    full = imputed.completed()
    for name in ("third", "outer_derivative", "fourth"):
        np.testing.assert_allclose(getattr(full, name), getattr(exact, name), rtol=1e-13)
        later = sum(weights[1:]) * unit[("third", "outer_derivative", "fourth").index(name)]
        np.testing.assert_allclose(getattr(imputed, name), later, rtol=1e-13)
    assert (full.ratio_sum, full.seen, full.imputed) == (exact.ratio_sum, exact.seen, 0.0)
    assert imputed.imputed == weights[0] and exact.completed() is exact
    with pytest.raises(ValueError, match="first batch"):
        exact.advance(None, 10.0)


def test_auto_fit_computes_no_moments_and_publishes_the_plain_fit(monkeypatch):
    """``fit`` under 'auto' asks no moments (its cost unchanged) and
    publishes the first-order fit bit for bit; its stream is corrected."""
    X, y, b = _small_batches(3, n_batches=2, rows=40)
    plain = DWDClassifier(inference=True, shift_correction=None).fit(X[b == 0], y[b == 0])

    def refuse(*args, **kwargs):
        raise AssertionError("moments computed in fit")

    monkeypatch.setattr(second_order, "batch_moments", refuse)
    auto = DWDClassifier(inference=True).fit(X[b == 0], y[b == 0])
    for name in ("coef_", "intercept_", "coef_cov_", "curvature_"):
        np.testing.assert_array_equal(getattr(auto, name), getattr(plain, name))
    assert auto._training_state.shift_correction.imputed == 40.0


def test_an_auto_stream_started_by_fit_approaches_the_carried_one():
    """Brute force, p = 3, 4:1 classes, a fit batch then three batches: the
    gap between the imputed ('auto') and the exactly carried
    ('second-order') estimate, relative to the correction itself (the
    carried estimate minus the first-order one), shrinks as the batches
    grow (the imputation's error is of lower order than the correction),
    and so does the gap between their covariances (relative to the
    covariance)."""
    def gaps(rows, seed):
        X, y, g, b = make_federated_gaussians(n_sites=2, n_batches=4, n_per_batch=rows // 2,
                                              n_features=3, ratio=4.0, random_state=seed)
        streams = [DWDClassifier(inference=True, shift_correction=option)
                   for option in ("auto", "second-order", None)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StreamShiftWarning)
            for clf in streams:
                clf.fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
                for k in (1, 2, 3):
                    clf.partial_fit(X[b == k], y[b == k], sample_group=g[b == k])
        estimates = [np.r_[c.intercept_, c.coef_[0]] for c in streams]
        covs = [c.coef_cov_[0] for c in streams]
        return (np.linalg.norm(estimates[0] - estimates[1])
                / np.linalg.norm(estimates[1] - estimates[2]),
                np.linalg.norm(covs[0] - covs[1]) / np.linalg.norm(covs[1]))

    small = np.mean([gaps(40, seed) for seed in range(4)], axis=0)
    large = np.mean([gaps(2560, seed) for seed in range(4)], axis=0)
    assert np.all(large < 0.5 * small) and large[0] < 0.15
