"""Remote summary sites serve every margin loss of the registry (issue #21).

A non-private :class:`DWDSite` rebuilds the loss a request names from the
registry; the server's solvers run unchanged over :class:`RemoteSites`:
``LogisticRegression(solver='newton')`` matches its in-process fit, and the
squared hinge (one class and one registry line in ``_loss.py``) matches
scipy's L-BFGS-B on the same objective.
"""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from skfedpriv import LogisticRegression
from skfedpriv._loss import make_loss
from skfedpriv.federated import (
    PROTOCOL_VERSION,
    DWDSite,
    LocalTransport,
    RemoteSites,
    federated_fit,
    federated_partial_fit,
)
from skfedpriv.linear_model._newton import solve_batch
from _transport import RecordingTransport
from test_squared_hinge import _problem as squared_hinge_problem


def _rows(n=240, p=6):
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X[:n, :p])
    return X, y[:n], np.arange(n) % 3, np.arange(n) // (n // 2)  # three sites, two batches


def _sites(X, y, g, b):
    return [DWDSite(lambda k, s=s: (X[(g == s) & (b == k)], y[(g == s) & (b == k)]), name=f"s{s}")
            for s in range(3)]


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_remote_newton_logistic_regression_matches_the_in_process_fit(fit_intercept):
    X, y, g, b = _rows()
    transport = RecordingTransport(_sites(X, y, g, b))
    params = dict(solver="newton", fit_intercept=fit_intercept, alpha=1e-3)
    remote = federated_fit(LogisticRegression(**params), transport, 0)
    federated_partial_fit(remote, transport, 1)
    local = LogisticRegression(**params).fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
    local.partial_fit(X[b == 1], y[b == 1], sample_group=g[b == 1])
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(remote.intercept_, local.intercept_, rtol=1e-9, atol=1e-10)
    assert remote.n_samples_seen_ == local.n_samples_seen_ and remote.solver_ == "newton"
    # every request for sums named the logistic loss by its spec, none a q
    sums = [r for r, _ in transport.log if r["op"] not in ("describe", "prepare", "gram")]
    assert sums and all(r["protocol"] == PROTOCOL_VERSION and r["loss"] == "logistic"
                        and "q" not in r and not any(k.startswith("loss-") for k in r)
                        for r in sums)


def test_squared_hinge_through_the_remote_protocol_matches_lbfgsb():
    """The in-process test's problem and L-BFGS-B minimizer
    (``test_squared_hinge.py``), now solved over the protocol."""
    X, y, _, _, _, alpha, best = squared_hinge_problem()
    n = len(y)
    transport = RecordingTransport(_sites(X, y, np.arange(n) % 3, np.zeros(n, dtype=int)))
    sites = RemoteSites(transport, 0)
    sites.prepare(np.array([0, 1]), fit_intercept=True)
    theta, _, _ = solve_batch(sites, np.zeros((X.shape[1] + 1, 1)),
                              loss=make_loss("squared_hinge"), alpha=alpha,
                              fit_intercept=True, tol=1e-14)
    np.testing.assert_allclose(theta[:, 0], best, atol=1e-6 * np.abs(best).max())
    assert {r["loss"] for r, _ in transport.log if "loss" in r} == {"squared_hinge"}


def test_a_site_rebuilds_only_registered_margin_losses():
    X, y, g, b = _rows(n=60)
    site = _sites(X, y, g, b)[0]
    request = {"protocol": PROTOCOL_VERSION, "op": "summary", "batch": 0, "classes": [0, 1],
               "fit_intercept": True, "theta": np.zeros((X.shape[1] + 1, 1)),
               "with_curvature": False}
    ys = y[(g == 0) & (b == 0)]
    # genDWD at theta = 0: every margin is 0, V_q(0) = 1, so the loss sum is the row count
    reply = site.handle({**request, "loss": "gendwd", "loss-q": 2.0})
    np.testing.assert_allclose(reply["loss"], [len(ys)])
    reply = site.handle({**request, "loss": "logistic"})
    np.testing.assert_allclose(reply["loss"], [len(ys) * np.log(2.0)])
    for bad in ({"loss": "hinge"}, {"loss": "logistic", "loss-q": 1.0}, {"loss": "multinomial"},
                {}):
        with pytest.raises(ValueError):
            site.handle({**request, **bad})


class _FlowerRecords(LocalTransport):
    """Every request and reply through Flower's records (``encode`` /
    ``decode`` of the ClientApp and the ServerApp), in this process."""

    def __call__(self, request):
        from skfedpriv.flower._apps import decode, encode

        replies = super().__call__(decode(encode(request)))
        return [decode(encode(reply)) for reply in replies]


def test_the_loss_spec_survives_flower_records():
    pytest.importorskip("flwr")
    X, y, g, b = _rows(n=120)
    remote = federated_fit(LogisticRegression(solver="newton"),
                           _FlowerRecords(_sites(X, y, g, np.zeros(len(y), dtype=int))))
    local = LogisticRegression(solver="newton").fit(X, y, sample_group=g)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9, atol=1e-10)
