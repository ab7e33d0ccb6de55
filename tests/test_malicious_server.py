"""A scripted malicious server against private DWD sites and logistic learners (issue #20).

The server runs an honest stream for a while, then sends each deviation of
its script mid-stream: replays, rounds out of order, another K, loss or q, clip,
``fit_intercept``, horizon or protocol version, class weights, raw sums under
a mechanism. The script runs twice, against a site holding D and against the
same site holding D' (one row replaced, its label one the site declares but
D does not carry). Every deviation must be refused with one of the fixed
refusal texts, the same text on D and D', and the honest replies the server
got must not tell D from D' either (counts only).
"""

import logging

import numpy as np
import pytest

from skfedpriv import DWDClassifier, LogisticRegression
from skfedpriv.federated import (
    REFUSAL_TEXTS,
    DWDSite,
    LearnerPrivacy,
    LogisticSite,
    SitePrivacy,
    SiteRefusal,
    federated_fit,
    federated_partial_fit,
)
from skfedpriv.federated._refusal import EXHAUSTED, MISMATCH, NOT_IN_ORDER, RAW_SUMS, REFUSED
from _ledgers import new_ledger
from _transport import RecordingTransport

CLASSES = [0, 1, 2]


def _neighbours(n=40, seed=0):
    """Rows of two batches (D) and D' = D with row 0 replaced by a row of label 2."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] > 0).astype(int)  # labels 0 and 1 only: class 2 is declared, absent
    X2, y2 = X.copy(), y.copy()
    X2[0], y2[0] = [2.5, -2.5], 2
    batch = np.arange(n) % 2
    return {"D": (X, y, batch), "D'": (X2, y2, batch)}


def _outcome(transport, request):
    """What the server sees: the reply, or the refusal's text."""
    try:
        return transport(dict(request))[0]
    except SiteRefusal as exc:
        assert exc.__cause__ is None and exc.__context__ is None  # nothing chained
        return str(exc)


def _run_script(side, make_transport, honest, script):
    """Run the honest part, then every deviation; return the outcomes in order."""
    transport = make_transport(side)
    honest(transport)
    log = list(transport.log)
    return transport, log, [(name, _outcome(transport, request(log)))
                            for name, request in script]


def _check_script(results, expected):
    (log_d, out_d), (log_n, out_n) = results
    # the honest stream: the same requests, and replies that are counts or noised values
    assert [q["op"] for q, _ in log_d] == [q["op"] for q, _ in log_n]
    for (_, replies_d), (_, replies_n) in zip(log_d, log_n):
        for key in ("n_rows", "n_features", "weight_sum", "std", "present"):
            assert replies_d[0].get(key) == replies_n[0].get(key)
        assert "labels" not in replies_d[0] and "has_positive" not in replies_d[0]
    # every deviation refused, with a fixed text, the same on D and D'
    assert [name for name, _ in out_d] == list(expected)
    for (name, got_d), (_, got_n) in zip(out_d, out_n):
        assert isinstance(got_d, str) and isinstance(got_n, str), name  # refused
        assert got_d == got_n, name
        assert got_d in REFUSAL_TEXTS, (name, got_d)
        assert got_d == expected[name], name


# -- DWD sites ------------------------------------------------------------------


def _dwd_estimator():
    return DWDClassifier(mechanism="local-gaussian", epsilon=2.0, clip_norm=3.0, online_steps=2,
                         random_state=0, classes=CLASSES)


def _last(log, op, **match):
    return dict(next(q for q, _ in reversed(log)
                     if q["op"] == op and all(q.get(k) == v for k, v in match.items())))


def _noised(log, **change):
    return {**_last(log, "noised", kind="gradient"), "batch": 1, **change}


DWD_SCRIPT = [
    ("replay batch 0 gradient", lambda log: _last(log, "noised", kind="gradient")),
    ("replay batch 0 gram", lambda log: _last(log, "noised", kind="gram")),
    ("K = 1", lambda log: _noised(log, classes=[0, 1], theta=np.zeros((3, 1)))),
    ("K = 4", lambda log: _noised(log, classes=[0, 1, 2, 3], theta=np.zeros((3, 4)))),
    ("q", lambda log: _noised(log, **{"loss-q": 0.5})),
    ("another loss", lambda log: {**{k: v for k, v in _noised(log).items() if k != "loss-q"},
                                  "loss": "logistic"}),
    ("another loss with genDWD's q", lambda log: _noised(log, loss="squared_hinge")),
    ("an unknown loss", lambda log: _noised(log, loss="hinge")),
    ("no loss", lambda log: {k: v for k, v in _noised(log).items() if k != "loss"}),
    ("a parameter genDWD does not take", lambda log: _noised(log, **{"loss-p": 2.0})),
    ("q of a protocol 4 request", lambda log: {
        **{k: v for k, v in _noised(log).items() if not k.startswith("loss")}, "q": 1.0,
        "protocol": 4}),
    ("prepare naming another loss", lambda log: {**_last(log, "prepare"), "loss": "logistic"}),
    ("clip", lambda log: _noised(log, clip_norm=30.0)),
    ("no clip", lambda log: {k: v for k, v in _noised(log).items() if k != "clip_norm"}),
    ("fit_intercept", lambda log: _noised(log, fit_intercept=False)),
    ("protocol 3", lambda log: _noised(log, protocol=3)),
    ("protocol 4", lambda log: _noised(log, protocol=4)),
    ("protocol 5", lambda log: _noised(log, protocol=5)),
    ("protocol 6", lambda log: _noised(log, protocol=6)),
    ("protocol 8", lambda log: _noised(log, protocol=8)),
    ("class_weight of K", lambda log: _noised(log, class_weight=[1.0, 1.0, 2.0])),
    ("class_weight of 2", lambda log: _noised(log, class_weight=[1.0, 2.0])),
    ("prepare with class_weight", lambda log: {**_last(log, "prepare"), "class_weight": [1.0, 1.0, 5.0]}),
    ("theta of another shape", lambda log: _noised(log, theta=np.zeros((2, 3)))),
    ("unknown kind", lambda log: _noised(log, kind="loss")),
    ("gram in batch 1", lambda log: _noised(log, kind="gram")),
    ("negative batch", lambda log: _noised(log, batch=-1)),
    ("raw summary", lambda log: _noised(log, op="summary", with_curvature=True)),
    ("raw gram", lambda log: _noised(log, op="gram")),
    ("raw line losses", lambda log: _noised(log, op="line_losses", s=np.ones((3, 3)), steps=[1.0])),
    ("raw curvature product", lambda log: _noised(log, op="curvature_product", v=np.ones((3, 3)))),
    ("raw second-order moments", lambda log: _noised(log, op="second_order_summary",
                                                     widths=np.ones(3))),
]

DWD_EXPECTED = {
    **{name: MISMATCH for name, _ in DWD_SCRIPT},
    "replay batch 0 gradient": EXHAUSTED, "replay batch 0 gram": EXHAUSTED,
    "gram in batch 1": EXHAUSTED,
    **{name: RAW_SUMS for name, _ in DWD_SCRIPT if name.startswith("raw")},
}


def test_a_malicious_server_gets_refusals_from_a_dwd_site(ledger_dir, caplog):
    caplog.set_level(logging.WARNING, logger="skfedpriv.federated")
    data = _neighbours()

    def make_transport(side):
        X, y, b = data[side]
        privacy = SitePrivacy.from_estimator(_dwd_estimator(), random_state=1,
                                             ledger_path=new_ledger(ledger_dir / f"{side}.sqlite"))
        return RecordingTransport([DWDSite(lambda k: (X[b == k], y[b == k]), privacy, name="s")])

    results = [_run_script(side, make_transport, lambda t: federated_fit(_dwd_estimator(), t),
                           DWD_SCRIPT) for side in data]
    _check_script([r[1:] for r in results], DWD_EXPECTED)
    # the horizon: the releases batch 1 may make are taken, then refused
    transport = results[0][0]
    for i in range(3):  # two gradients and one curvature (K = 3 models each)
        assert "value" in transport(_noised(transport.log, kind="curvature" if i == 2 else "gradient"))[0]
    assert _outcome(transport, _noised(transport.log)) == EXHAUSTED
    # the site's own log says why it refused; the server was told none of it
    assert any("class_weight" in record.getMessage() for record in caplog.records)


def test_a_private_site_with_rows_outside_its_domain_refuses_every_request_alike(ledger_dir, caplog):
    """A label the site does not declare is the site's own data error: its
    log names it, the server gets the constant text (no label, no count)."""
    caplog.set_level(logging.WARNING, logger="skfedpriv.federated")
    X, y, b = _neighbours()["D'"]
    privacy = SitePrivacy(2.0, 1e-5, 3.0, online_steps=2, classes=[0, 1],
                          ledger_path=new_ledger(ledger_dir / "s.sqlite"))
    transport = RecordingTransport([DWDSite(lambda k: (X[b == k], y[b == k]), privacy, name="s")])
    est = DWDClassifier(mechanism="local-gaussian", epsilon=2.0, clip_norm=3.0, online_steps=2,
                        classes=[0, 1])
    with pytest.raises(SiteRefusal) as refusal:
        federated_fit(est, transport)
    assert str(refusal.value) == REFUSED
    assert "labels" in caplog.text and "not in classes" in caplog.text


# -- logistic learners -------------------------------------------------------------

R_STREAM = 5


def _logistic_estimator():
    return LogisticRegression(mechanism="tree", epsilon=2.0, delta=1e-5, n_rounds=R_STREAM,
                              local_steps=2, learning_rate=0.3, classes=CLASSES)


def _round(log, **change):
    return {**_last(log, "round"), **change}


def _next(log, **change):
    """The next honest round with ``change``."""
    r = _last(log, "round")["round"] + 1
    return _round(log, **{"round": r, "batch": r, **change})


LOGISTIC_SCRIPT = [
    ("replay the last round", lambda log: _round(log)),
    ("replay round 0", lambda log: _round(log, round=0, batch=0)),
    ("skip a round", lambda log: _round(log, round=_last(log, "round")["round"] + 2,
                                        batch=_last(log, "round")["round"] + 2)),
    ("next round on an old batch", lambda log: _next(log, batch=0)),
    ("next round on the last batch", lambda log: _next(log, batch=_last(log, "round")["batch"])),
    ("K = 1", lambda log: _next(log, classes=[0, 1], theta=np.zeros((1, 3)))),
    ("K = 4", lambda log: _next(log, classes=[0, 1, 2, 3], theta=np.zeros((4, 3)))),
    ("epsilon", lambda log: _next(log, **{"param-epsilon": 8.0})),
    ("clip", lambda log: _next(log, **{"param-clip_norm": 10.0})),
    ("fit_intercept", lambda log: _next(log, **{"param-fit_intercept": False})),
    ("horizon", lambda log: _next(log, **{"param-n_rounds": 50})),
    ("raw message (no mechanism)", lambda log: {k: v for k, v in _next(log).items()
                                                if k != "param-mechanism"}),
    ("protocol 4", lambda log: _next(log, protocol=4)),
    ("theta of another shape", lambda log: _next(log, theta=np.zeros((3, 2)))),
    ("unknown op", lambda log: _next(log, op="summary")),
    ("past the horizon", lambda log: _round(log, round=R_STREAM, batch=R_STREAM)),
]

LOGISTIC_EXPECTED = {
    **{name: MISMATCH for name, _ in LOGISTIC_SCRIPT},
    "replay the last round": NOT_IN_ORDER, "replay round 0": NOT_IN_ORDER,
    "skip a round": NOT_IN_ORDER, "past the horizon": EXHAUSTED,
}


def test_a_malicious_server_gets_refusals_from_a_logistic_learner(ledger_dir):
    data = _neighbours(n=60)

    def make_transport(side):
        X, y, _ = data[side]
        rnd = np.arange(len(y)) % R_STREAM
        privacy = LearnerPrivacy.from_estimator(_logistic_estimator(), random_state=1,
                                                ledger_path=new_ledger(ledger_dir / f"{side}.sqlite"))
        return RecordingTransport([LogisticSite(lambda k: (X[rnd == k], y[rnd == k]), privacy,
                                            name="s")])

    def honest(transport):
        est = _logistic_estimator()
        for r in range(2):
            federated_partial_fit(est, transport, r)

    results = [_run_script(side, make_transport, honest, LOGISTIC_SCRIPT) for side in data]
    _check_script([r[1:] for r in results], LOGISTIC_EXPECTED)
    # after all that the honest next round is still answered
    transport = results[0][0]
    assert "message" in transport(_next(transport.log))[0]
