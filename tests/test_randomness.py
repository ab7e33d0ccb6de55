"""Noise is never drawn twice from one generator state (#20, points 4-6).

* a generator object as ``random_state`` under a mechanism is refused (clone
  would copy it into every candidate, fold and refit);
* a private stream continues from a given position once: a pickled or
  deep-copied training estimator and its original cannot both continue (in
  this process always; across processes through a budget file);
* a release carries no seed.
"""

import copy
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.model_selection import KFold, cross_validate

from skfedpriv import (
    DecentralizedLogisticRegression,
    DWDClassifier,
    InvalidParameterError,
    LogisticRegression,
    PrivacyBudget,
)
from skfedpriv.linear_model._stream_position import StreamReplayError

pytestmark = pytest.mark.filterwarnings("ignore::skfedpriv.privacy.SeededNoiseWarning")

PRIVATE = {
    DWDClassifier: dict(mechanism="laplace", clip_norm=3.0, classes=[0, 1]),
    LogisticRegression: dict(mechanism="tree", feature_clip_norm=3.0, n_rounds=4,
                             classes=[0, 1]),
    DecentralizedLogisticRegression: dict(mechanism="laplace", n_rounds=80, classes=[0, 1]),
}
ESTIMATORS = tuple(PRIVATE)


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=120, n_features=4, random_state=0)
    return X, y, np.tile(["a", "b", "c"], 40)


# -- 4. a generator object under a mechanism ------------------------------------


@pytest.mark.parametrize("Estimator", ESTIMATORS)
@pytest.mark.parametrize("kind", [np.random.default_rng, np.random.RandomState])
def test_generator_random_state_is_refused_under_a_mechanism(Estimator, kind, data):
    """Fails on the code before #20: the generator was accepted, and clone()
    copied it into every candidate, fold and refit."""
    X, y, g = data
    est = Estimator(random_state=kind(0), **PRIVATE[Estimator])
    before = pickle.dumps(est.__dict__)
    with pytest.raises(InvalidParameterError, match="random_state=None"):
        est.fit(X, y, sample_group=g)
    with pytest.raises(InvalidParameterError, match="clone"):
        est.partial_fit(X[:60], y[:60], sample_group=g[:60])
    assert pickle.dumps(est.__dict__) == before
    # a fitted stream whose random_state is set to a generator later refuses too
    est.set_params(random_state=None).partial_fit(X[:60], y[:60], sample_group=g[:60])
    state = pickle.dumps(est.__dict__)
    with pytest.raises(InvalidParameterError):
        est.set_params(random_state=kind(0)).partial_fit(X[60:], y[60:], sample_group=g[60:])
    est.set_params(random_state=None)
    assert pickle.dumps(est.__dict__) == state
    # without a mechanism a generator is an ordinary source of randomness
    public = {k: v for k, v in PRIVATE[Estimator].items() if k != "mechanism"}
    Estimator(random_state=kind(0), **public).fit(X, y, sample_group=g)


def test_fold_models_do_not_share_noise():
    """The attack of #20 (4): two fold models of a one-round private
    LogisticRegression; with one noise for both, their noise difference is 0
    and a row's label falls out of the model difference. Fresh entropy per
    clone: the noises differ (each fold's noise is recovered exactly from its
    model and the noise-free model of the same fold)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 2))
    y = (X[:, 0] > 0).astype(int)
    kw = dict(n_rounds=1, local_steps=1, learning_rate=0.5, epsilon=1.0, delta=1e-5,
              feature_clip_norm=1.0, classes=[0, 1])
    step = 0.5  # eta_g * eta * tau

    def noises(est):
        folds = cross_validate(est, X, y, cv=KFold(2), return_estimator=True)["estimator"]
        out = []
        for model, (train, _) in zip(folds, KFold(2).split(X)):
            clean = LogisticRegression(solver="local-steps", **kw).fit(X[train], y[train])
            out.append((np.r_[model.intercept_, model.coef_.ravel()]
                        - np.r_[clean.intercept_, clean.coef_.ravel()]) / -step)
        return out

    first, second = noises(LogisticRegression(mechanism="independent", **kw))
    assert np.all(np.abs(first - second) > 1e-6)
    # an integer seed does make clones share the noise: that is why it warns
    with pytest.warns(Warning):
        first, second = noises(LogisticRegression(mechanism="independent", random_state=3,
                                                  **kw))
    np.testing.assert_allclose(first, second, atol=1e-9)


# -- 5. a training estimator continued twice --------------------------------------


def _halves(data):
    X, y, g = data
    return (X[:60], y[:60], g[:60]), (X[60:], y[60:], g[60:])


@pytest.mark.parametrize("Estimator", ESTIMATORS)
@pytest.mark.parametrize("duplicate", [copy.deepcopy, lambda e: pickle.loads(pickle.dumps(e))])
def test_a_copied_training_estimator_continues_once(Estimator, duplicate, data):
    """Fails on the code before #20: both copies continued, publishing two
    models with the same noise."""
    (X1, y1, g1), (X2, y2, g2) = _halves(data)
    est = Estimator(**PRIVATE[Estimator]).partial_fit(X1, y1, sample_group=g1)
    twin = duplicate(est)
    twin.partial_fit(X2, y2, sample_group=g2)  # the first continuation is fine
    before = pickle.dumps(est.__dict__)
    with pytest.raises(StreamReplayError, match="same noise"):
        est.partial_fit(X2[::-1], y2[::-1], sample_group=g2[::-1])
    assert pickle.dumps(est.__dict__) == before
    # the twin goes on; the original may start a new stream
    twin.partial_fit(X1, y1, sample_group=g1)
    est.fit(*data[:2], sample_group=data[2])


@pytest.mark.parametrize("Estimator", ESTIMATORS)
def test_without_a_mechanism_copies_continue_freely(Estimator, data):
    (X1, y1, g1), (X2, y2, g2) = _halves(data)
    public = {k: v for k, v in PRIVATE[Estimator].items() if k != "mechanism"}
    est = Estimator(**public).partial_fit(X1, y1, sample_group=g1)
    twin = copy.deepcopy(est)
    for model in (twin, est):
        model.partial_fit(X2, y2, sample_group=g2)
    np.testing.assert_array_equal(est.coef_, twin.coef_)


def test_label_attack_on_two_continuations_is_refused():
    """#20 (5): continue two copies on the same row with either label; the
    model difference is the noise-free gradient difference, whose sign is the
    label. The second continuation is refused, so there is nothing to
    subtract."""
    x = np.array([[0.4, -0.1]])
    est = LogisticRegression(n_rounds=2, local_steps=1, learning_rate=0.5, epsilon=1.0,
                             delta=1e-5, feature_clip_norm=1.0, mechanism="independent",
                             classes=[0, 1]).partial_fit(x, [1])
    copies = [pickle.loads(pickle.dumps(est)) for _ in range(2)]
    copies[0].partial_fit(x, [0])
    with pytest.raises(StreamReplayError):
        copies[1].partial_fit(x, [1])
    assert copies[1].n_rounds_seen_ == 1


def test_concurrent_continuations_of_copies_admit_one():
    X, y = make_classification(n_samples=40, n_features=3, n_informative=2, n_redundant=0,
                               random_state=1)
    est = LogisticRegression(mechanism="independent", n_rounds=3, feature_clip_norm=1.0,
                             classes=[0, 1]).partial_fit(X[:20], y[:20])
    copies = [copy.deepcopy(est) for _ in range(6)]
    outcomes = []

    def run(model):
        try:
            model.partial_fit(X[20:], y[20:])
            outcomes.append("ok")
        except StreamReplayError:
            outcomes.append("refused")

    threads = [threading.Thread(target=run, args=(c,)) for c in copies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok"] + ["refused"] * 5


_CONTINUE_IN_A_NEW_PROCESS = textwrap.dedent("""
    import pickle, sys
    import numpy as np
    est, X, y = pickle.load(open(sys.argv[1], "rb"))
    try:
        est.partial_fit(X, y)
        print("continued")
    except Exception as exc:
        print(type(exc).__name__)
""")


def test_budget_file_refuses_a_continuation_in_another_process(tmp_path):
    """Across processes the budget file records each stream's position: the
    copy pickled before the original continued is refused in a new process.
    Without a budget file the new process cannot know (the publisher's duty,
    see docs/privacy.md)."""
    X, y = make_classification(n_samples=40, n_features=3, n_informative=2, n_redundant=0,
                               random_state=2)
    outputs = {}
    for name, path in (("file", tmp_path / "budget.sqlite"), ("memory", None)):
        budget = PrivacyBudget(5.0, 1e-3, path=path) if path else None
        est = LogisticRegression(mechanism="independent", n_rounds=3, feature_clip_norm=1.0,
                                 classes=[0, 1], delta=1e-5, budget=budget)
        est.partial_fit(X[:20], y[:20])
        with open(tmp_path / f"{name}.pkl", "wb") as f:
            pickle.dump((est if path else copy.deepcopy(est), X[20:], y[20:]), f)
        est.partial_fit(X[20:], y[20:])  # the original continues first
        run = subprocess.run([sys.executable, "-c", _CONTINUE_IN_A_NEW_PROCESS,
                              str(tmp_path / f"{name}.pkl")], capture_output=True,
                             text=True, cwd=os.getcwd(), timeout=120)
        outputs[name] = run.stdout.strip() or run.stderr
    assert outputs == {"file": "StreamReplayError", "memory": "continued"}


# -- 6. a release carries no seed -------------------------------------------------


@pytest.mark.parametrize("Estimator", ESTIMATORS)
def test_release_carries_no_seed(Estimator, data):
    """Fails on the code before #20: the release kept random_state=7, so
    refitting with release.get_params() reproduced coef_ exactly."""
    X, y, g = data
    est = Estimator(random_state=7, **PRIVATE[Estimator]).fit(X, y, sample_group=g)
    released = est.release()
    assert released.random_state is None and released.get_params()["random_state"] is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        refit = clone(released).fit(X, y, sample_group=g)
    assert not np.array_equal(refit.coef_, released.coef_)
    # the training estimator's own seed is untouched
    assert est.random_state == 7


def test_budget_file_refuses_before_the_charge(tmp_path):
    """Algorithm 2 charges every batch: a copy refused by the budget file
    (here: this process forgets the stream, as another process would not
    know it) is refused before it charges."""
    from skfedpriv.linear_model import _stream_position

    X, y = make_classification(n_samples=60, n_features=3, n_informative=2, n_redundant=0,
                               random_state=3)
    budget = PrivacyBudget(10.0, path=tmp_path / "budget.sqlite")
    est = DWDClassifier(mechanism="laplace", clip_norm=3.0, classes=[0, 1], budget=budget)
    est.partial_fit(X[:30], y[:30])
    twin = pickle.loads(pickle.dumps(est))
    est.partial_fit(X[30:], y[30:])
    _stream_position._NEXT.pop(est._training_state.stream_id)
    charges = len(budget.ledger)
    with pytest.raises(StreamReplayError):
        twin.partial_fit(X[30:], y[30:])
    assert len(budget.ledger) == charges == 2
