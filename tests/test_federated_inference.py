"""inference=True over remote sites (issue #24): the inference summary as a site request.

Non-private ``DWDClassifier`` and binary ``LogisticRegression(solver='newton')``
fitted through a transport carry the same covariance as the in-process fit
on the same rows and sites; a private site refuses the raw summary.
"""

import logging

import numpy as np
import pytest

from skfedpriv import DWDClassifier, LogisticRegression
from skfedpriv._loss import GenDWDLoss, LogisticLoss
from skfedpriv.federated import (
    DWDSite,
    LocalTransport,
    RemoteSites,
    SitePrivacy,
    SiteRefusal,
    federated_fit,
    federated_partial_fit,
)
from skfedpriv.federated._refusal import RAW_SUMS
from skfedpriv.federated._site import PROTOCOL_VERSION
from skfedpriv.linear_model._inference_sites import site_inference_summary
from _ledgers import new_ledger
from _transport import RecordingTransport
from test_flower import local_sites, make_data


def _in_process_stream(estimator, X, y, g, b):
    estimator.fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
    yield estimator
    estimator.partial_fit(X[b == 1], y[b == 1], sample_group=g[b == 1])
    yield estimator


def _remote_stream(estimator, transport):
    federated_fit(estimator, transport, 0)
    yield estimator
    federated_partial_fit(estimator, transport, 1)
    yield estimator


@pytest.mark.parametrize("make", [
    lambda: DWDClassifier(inference=True),
    lambda: DWDClassifier(inference=True, q=0.5, alpha=1e-2, online_steps=1),
    lambda: DWDClassifier(inference=True, q=2.0, fit_intercept=False),
    lambda: LogisticRegression(solver="newton", inference=True),
    lambda: LogisticRegression(solver="newton", inference=True, alpha=0.05, fit_intercept=False),
], ids=["dwd", "dwd-one-step", "dwd-no-intercept", "logistic", "logistic-ridge"])
def test_remote_inference_matches_in_process(make):
    """After ``fit`` and after a ``partial_fit`` batch: the same estimate,
    covariance and standard errors as in process."""
    X, y, g, b = make_data()
    transport = RecordingTransport(local_sites(X, y, g, b))
    for remote, local in zip(_remote_stream(make(), transport),
                             _in_process_stream(make(), X, y, g, b)):
        np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(remote.coef_cov_, local.coef_cov_, rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(remote.coef_se_, local.coef_se_, rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(remote.intercept_se_, local.intercept_se_, rtol=1e-7,
                                   atol=1e-12)
    assert sum(q["op"] == "inference_summary" for q, _ in transport.log) == 2  # one per batch


def test_a_site_sends_the_inference_summary_of_its_own_rows():
    """A site's reply is the summary of its rows at the request's θ, of the
    loss the request names."""
    X, y, g, b = make_data()
    transport = RecordingTransport(local_sites(X, y, g, b))
    federated_fit(LogisticRegression(solver="newton", inference=True), transport)
    request, replies = next((q, r) for q, r in transport.log if q["op"] == "inference_summary")
    assert request["loss"] == "logistic"
    loss = LogisticLoss()
    for s, reply in enumerate(replies):
        rows = (g == s) & (b == 0)
        Y = np.where(y[rows] == 1, 1.0, -1.0)[:, None]
        expected = site_inference_summary(X[rows], Y, np.ones(rows.sum()), request["theta"],
                                          True, loss.derivative, loss.curvature)
        np.testing.assert_allclose(reply["score_outer"], expected.score_outer, rtol=1e-12)
        np.testing.assert_allclose(reply["curvature"], expected.curvature, rtol=1e-12)
        np.testing.assert_allclose(reply["score_sum"], expected.score_sum, rtol=1e-12)
        assert reply["weight_sq_sum"] == rows.sum()


def test_private_sites_refuse_the_inference_summary(ledger_dir, caplog):
    """A raw sum: a private site refuses it with a fixed text, and remote
    sites with a private site offer no inference (the server refuses first)."""
    caplog.set_level(logging.ERROR, logger="skfedpriv.federated")
    X, y, g, b = make_data()
    privacy = SitePrivacy(1.0, 1e-5, 3.0, classes=[0, 1],
                          ledger_path=new_ledger(ledger_dir / "s.sqlite"))
    sites = local_sites(X, y, g, b, privacy=lambda s: privacy)
    transport = RecordingTransport(sites)
    remote = RemoteSites(transport, 0)
    assert not remote.offers_inference
    with pytest.raises(SiteRefusal, match=RAW_SUMS):
        sites[0].handle({"protocol": PROTOCOL_VERSION, "op": "inference_summary", "batch": 0,
                         "classes": [0, 1], "fit_intercept": True, "clip_norm": 3.0,
                         "loss": "gendwd", "loss-q": 1.0, "theta": np.zeros((4, 1))})
    remote.prepare(np.array([0, 1]), fit_intercept=True, clip_norm=3.0)
    loss = GenDWDLoss(1.0)
    with pytest.raises(NotImplementedError, match="private"):
        remote.inference_summary(np.zeros((4, 1)), loss.derivative, loss.curvature)
    assert all(q["op"] != "inference_summary" for q, _ in transport.log)


def test_remote_inference_names_a_registry_loss():
    X, y, g, b = make_data()
    remote = RemoteSites(RecordingTransport(local_sites(X, y, g, b)), 0)
    assert remote.offers_inference
    with pytest.raises(ValueError, match="registry loss"):
        remote.inference_summary(np.zeros((4, 1)), np.tanh, np.cosh)


def test_local_gaussian_on_sites_that_cannot_noise_is_refused_before_any_charge():
    """Remote sites without a SitePrivacy cannot run 'local-gaussian', and its
    private inference runs in this process only: both refused before the
    budget is charged or any state changes."""
    from skfedpriv.privacy import PrivacyBudget

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] > 0).astype(int)
    g = np.arange(120) % 3
    plain = [DWDSite(lambda b, s=s: (X[g == s], y[g == s]), name=f"s{s}") for s in range(3)]
    for inference in (False, True):
        budget = PrivacyBudget(epsilon=5.0, delta=1e-4)
        clf = DWDClassifier(mechanism="local-gaussian", inference=inference, epsilon=1.0,
                            clip_norm=3.0, classes=[0, 1], budget=budget)
        with pytest.raises((ValueError, NotImplementedError)):
            federated_fit(clf, LocalTransport(plain))
        assert budget.ledger.entries == ()
        assert not hasattr(clf, "coef_")
