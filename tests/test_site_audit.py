"""Black-box audits of a private site against a server that deviates (issue #20, 1-2).

Each audit runs a deviating server's script many times against one site
holding a data set D or its neighbour D' (one row replaced), reduces what
the server received to one number (the likelihood-ratio direction of the
replaced row, computed from noise-free sums outside the site's code) and
bounds ε from below with Clopper–Pearson intervals on threshold tests
(``_reference.audit_epsilon``). The bound must stay at or below the
site's claimed ε: before the sites fixed their batches and class count
themselves, both scripts broke the claim (numbers in each test).
"""

import logging

import numpy as np
import pytest

from skfedpriv.federated import (
    ContinualSitePrivacy,
    DWDSite,
    LearnerPrivacy,
    LocalTransport,
    LogisticSite,
    SitePrivacy,
)
from skfedpriv.federated._learner import LOGISTIC_PARAMS
from skfedpriv.federated._site import PROTOCOL_VERSION
from _ledgers import new_ledger
from _reference import audit_epsilon

EPSILON, DELTA = 1.0, 1e-5


@pytest.fixture(autouse=True)
def _quiet_site_log(caplog):
    """Thousands of refusals: keep the sites' warnings out of the captured log."""
    caplog.set_level(logging.ERROR, logger="skfedpriv.federated")


def _received(transport, request):
    """The site's reply to ``request``, or None when it refuses."""
    try:
        return transport(request)[0]
    except Exception:  # noqa: BLE001 - a refusal is part of what the server sees
        return None


def _lower_bound(statistic_d, statistic_d_prime):
    grid = np.quantile(np.r_[statistic_d, statistic_d_prime], np.linspace(0.5, 0.999, 60))
    return audit_epsilon(np.asarray(statistic_d), np.asarray(statistic_d_prime), DELTA, grid)


# -- 1. a replayed logistic round --------------------------------------------

R_REPLAY, RUNS_REPLAY = 50, 500


def _learner_privacy(path):
    return LearnerPrivacy("independent", EPSILON, DELTA, n_rounds=R_REPLAY, local_steps=1,
                          learning_rate=0.5, clip_norm=1.0, random_state=None,
                          classes=[0, 1], ledger_path=path)


def _round_request(privacy, r):
    """Round ``r`` on batch 0: the replay (an honest server asks batch ``r``)."""
    params = {f"param-{k}": v for k, v in privacy.settings.as_dict().items()
              if k in LOGISTIC_PARAMS and v is not None}
    return {"protocol": PROTOCOL_VERSION, "op": "round", "batch": 0, "round": r,
            "theta": np.zeros((1, 3)), "classes": [0, 1], **params}


def test_a_replayed_round_releases_a_row_once(ledger_dir):
    """Issue #20, 1: rounds 0..R-1 all asked on batch 0 put the learner's
    row into R messages. The learner now reads batch r in round r and
    refuses the rest: the server gets one message. Before (R = 50, 500 runs
    per side): lower bound 2.54 > ε = 1."""
    rows = {"D": (np.array([[3.0, 0.0]]), np.array([1])),
            "D'": (np.array([[-3.0, 0.0]]), np.array([1]))}
    privacy = _learner_privacy(new_ledger(ledger_dir / "learners.sqlite"))
    requests = [_round_request(privacy, r) for r in range(R_REPLAY)]
    # the noise-free messages, from a learner that trusts the server
    plain = {k: LocalTransport([LogisticSite(lambda b, v=v: v, None, name="plain")])(
        {key: val for key, val in requests[0].items() if key != "param-mechanism"})[0]["message"]
        for k, v in rows.items()}
    direction = plain["D"] - plain["D'"]
    direction /= np.linalg.norm(direction)
    statistic = {}
    for side, (X, y) in rows.items():
        values = []
        for run in range(RUNS_REPLAY):
            site = LogisticSite(lambda b, X=X, y=y: (X, y) if b == 0 else (X[:0], y[:0]),
                                privacy, name=f"{side}{run}")
            transport = LocalTransport([site])
            replies = [_received(transport, request) for request in requests]
            values.append(sum(float(np.ravel(r["message"]) @ direction)
                              for r in replies if r is not None and "message" in r))
        statistic[side] = values
    # the refusal itself: one message per run, each round after the first refused
    assert sum(r is not None for r in replies) == 1
    assert _lower_bound(statistic["D"], statistic["D'"]) <= EPSILON


# -- 2. a class count inflated batch by batch ---------------------------------

#: K asked in turn on one batch: each request fits the release cap the
#: site computed for its K (2 K with online_steps=1) given the count so far.
K_PLAN = (1, 1, 3, 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10240, 20480, 40960)
RUNS_INFLATE = 1500
EPSILON_INFLATE = 3.0


def _classes(k):
    return [0, 1] if k == 1 else list(range(k))


def _noise_free_gradient(X, y, classes):
    """``Σ_i y_ik V_q'(0) x̄_i`` at θ = 0 (``V_q'(0) = -1``), one column per model."""
    Xa = np.hstack([np.ones((len(X), 1)), X])
    if len(classes) == 2:
        targets = np.where(y == classes[1], 1.0, -1.0)[:, None]
    else:
        targets = np.where(y[:, None] == np.asarray(classes)[None, :], 1.0, -1.0)
    return -Xa.T @ targets


def test_a_class_count_changed_mid_stream_is_refused(ledger_dir):
    """Issue #20, 2: asking K = 1, 1, 3, 5, ..., 40960 gradients of one batch
    made the site recompute σ and the cap per request while counting the
    batch's releases under one key. The site now fixes K from its declared
    classes and refuses every other K. Before (ε = 3, 1500 runs per side):
    lower bound 3.75 > 3; the σ the site reported give μ = 1.98 against
    0.68 for the two releases the declared K allows (shift over spread)."""
    clip = 3.0
    # row 0 replaced by its mirror image, ‖(1, x)‖ = clip: every column moves by 2‖x‖
    rows = {"D": (np.array([[2.0, 2.0], [0.5, -1.0]]), np.array([1, 0])),
            "D'": (np.array([[-2.0, -2.0], [0.5, -1.0]]), np.array([1, 0]))}
    privacy = SitePrivacy(EPSILON_INFLATE, DELTA, clip, online_steps=1, classes=[0, 1],
                          ledger_path=new_ledger(ledger_dir / "sites.sqlite"))
    requests = [{"protocol": PROTOCOL_VERSION, "op": "noised", "kind": "gradient", "batch": 1,
                 "classes": _classes(k), "fit_intercept": True, "clip_norm": clip, "loss": "gendwd", "loss-q": 1.0,
                 "theta": np.zeros((3, 1 if k == 1 else k))} for k in K_PLAN]
    shifts = [_noise_free_gradient(*rows["D"], _classes(k))
              - _noise_free_gradient(*rows["D'"], _classes(k)) for k in K_PLAN]
    statistic = {}
    for side, (X, y) in rows.items():
        values = []
        for run in range(RUNS_INFLATE):
            transport = LocalTransport([DWDSite(lambda b, X=X, y=y: (X, y), privacy,
                                                name=f"{side}{run}")])
            replies = [_received(transport, request) for request in requests]
            values.append(sum(float(np.sum(r["value"] * shift)) / r["std"] ** 2
                              for r, shift in zip(replies, shifts) if r is not None))
        statistic[side] = values
    # the refusal itself: the declared K's two gradients, every other K refused
    assert [r is not None for r in replies] == [True, True] + [False] * (len(K_PLAN) - 2)
    assert _lower_bound(statistic["D"], statistic["D'"]) <= EPSILON_INFLATE


# -- 3. a replayed 'local-tree' batch, the site restarted between replays --------

R_CONTINUAL, RUNS_CONTINUAL = 10, 300


def _continual_privacy(path):
    # ‖x‖ = clip for both rows below (no intercept): a moves by its sensitivity 2 C2
    return ContinualSitePrivacy("local-tree", EPSILON, DELTA, 1.0, n_batches=2, classes=[0, 1],
                                fit_intercept=False, ledger_path=path)


def _continual_request(privacy):
    return {"protocol": PROTOCOL_VERSION, "op": "continual", "batch": 0, "classes": [0, 1],
            "fit_intercept": False, "clip_norm": privacy.clip_norm, "loss": "gendwd",
            "loss-q": 1.0, "theta": np.zeros((2, 1)), "n_batches": privacy.n_batches,
            "factorization": repr(privacy.factorization), "sigma": privacy.sigma}


def _continual_statistic(rows, privacy, name_of):
    """Per run: the released ``a`` of every answered replay, projected on the
    replaced row's direction. ``name_of(run, i)`` names the site of the i-th
    request (one name: one site restarted; a new name each time: a site
    whose stream starts afresh at every request)."""
    # noise-free a at θ = 0: c = y V_q'(0) = -1 for a row of class 1, so a = -x
    plain = {k: -X[0] for k, (X, _) in rows.items()}
    direction = (plain["D"] - plain["D'"]) / np.linalg.norm(plain["D"] - plain["D'"])
    request = _continual_request(privacy)
    statistic = {}
    for side, (X, y) in rows.items():
        values = []
        for run in range(RUNS_CONTINUAL):
            answered = []
            for i in range(R_CONTINUAL):  # a new site object (a new process) every request
                site = DWDSite(lambda b, X=X, y=y: (X, y) if b == 0 else (X[:0], y[:0]), privacy,
                               name=name_of(f"{side}{run}", i))
                answered.append(_received(LocalTransport([site]), request))
            values.append(sum(float(r["linear"][:, 0] @ direction)
                              for r in answered if r is not None))
        statistic[side] = values
    return statistic, answered


def test_a_replayed_continual_batch_releases_a_row_once(ledger_dir):
    """Issue #22 over remote sites: the server asks batch 0 of a
    'local-tree' site R = 10 times, the site restarted (new objects on its
    ledger file) before every request. The site answers once, and the bound
    stays at or below ε. The power is measured outside the suite (sizes):
    against a site whose stream starts afresh at every request (a new name
    in the ledger each time, as a site without its ledger would be), the
    same script with R = 30 and 500 runs per side gave a bound of 2.37 > ε
    (this site: 0.0, one answer per run)."""
    rows = {"D": (np.array([[1.0, 0.0]]), np.array([1])),
            "D'": (np.array([[-1.0, 0.0]]), np.array([1]))}
    privacy = _continual_privacy(new_ledger(ledger_dir / "continual.sqlite"))
    statistic, answered = _continual_statistic(rows, privacy, lambda run, i: run)
    assert sum(r is not None for r in answered) == 1
    assert _lower_bound(statistic["D"], statistic["D'"]) <= EPSILON
