"""DecentralizedLogisticRegression's settings and typed training state (#21, point 5)."""

import dataclasses
import pickle

import numpy as np
import pytest

from skfedpriv._gossip import mixing_matrix
from skfedpriv.linear_model._base import TrainingState
from skfedpriv.linear_model._decentralized import DecentralizedLogisticRegression as DLR
from skfedpriv.linear_model._decentralized_settings import DecentralizedSettings
from skfedpriv.linear_model._decentralized_state import DecentralizedTrainingState

pytestmark = pytest.mark.filterwarnings("ignore::skfedpriv.privacy.SeededNoiseWarning")

_RNG = np.random.default_rng(0)
_X = _RNG.normal(size=(60, 3)) / 3
_Y = (_X[:, 0] > 0).astype(int) + (_X[:, 1] > 0)
_G = np.arange(60) % 3

_STREAM = dict(topology=mixing_matrix("ring", 3), block_size=2, h=1.0, radius=5.0, alpha=0.1,
               n_rounds=20, mechanism="laplace", epsilon=50.0, random_state=0,
               classes=[0, 1, 2])


def _started():
    est = DLR(**_STREAM)
    return est.partial_fit(_X[:30], _Y[:30], sample_group=_G[:30])


def test_settings_are_frozen_typed_and_built_from_the_parameters():
    est = DLR(**dict(_STREAM, block_size=np.int64(2), alpha=np.float32(0.5)))
    settings = est._validate_params()
    assert isinstance(settings, DecentralizedSettings)
    assert type(settings.block_size) is int and type(settings.alpha) is float
    assert settings.topology is not est.topology  # a copy of the user's matrix
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.solver = "ocg"
    # without a mechanism the ε in force is None, whatever epsilon says
    assert DLR(epsilon=3.0)._validate_params().epsilon is None


@pytest.mark.parametrize("name, value", [
    ("solver", "ocg"), ("constraint", "trace"), ("fit_intercept", False),
    ("mechanism", None), ("epsilon", 40.0), ("radius", 4.0), ("clip_norm", 2.0),
    ("alpha", 0.0), ("h", 2.0), ("block_size", 3), ("n_rounds", 30),
    ("topology", mixing_matrix("complete", 3)), ("topology", "ring"),
])
def test_every_setting_is_bound_to_the_stream(name, value):
    est = _started()
    before = pickle.dumps(est.coef_), est.n_rounds_seen_
    started_with = est.get_params()[name]
    est.set_params(**{name: value})
    with pytest.raises(ValueError, match="changed in the middle of a stream"):
        est.partial_fit(_X[30:], _Y[30:], sample_group=_G[30:])
    assert (pickle.dumps(est.coef_), est.n_rounds_seen_) == before
    est.set_params(**{name: started_with})
    est.partial_fit(_X[30:], _Y[30:], sample_group=_G[30:])
    assert est.n_rounds_seen_ == 20


def test_an_equal_matrix_continues_the_stream():
    est = _started()
    est.set_params(topology=[list(row) for row in mixing_matrix("ring", 3)])
    est.partial_fit(_X[30:], _Y[30:], sample_group=_G[30:])
    assert est.n_rounds_seen_ == 20


def test_the_training_state_is_one_typed_secret_object():
    est = _started()
    state = est._training_state
    assert isinstance(state, DecentralizedTrainingState)
    assert state.settings.stream_key() == est._validate_params().stream_key()
    assert state.decisions.shape == (3, 3, 4) and state.n_parameters == 12
    # released attributes are the state's public fields
    np.testing.assert_array_equal(est.mixing_matrix_, state.mixing_matrix)
    assert (est.theta_, est.h_, est.block_size_, est.radius_, est.n_rounds_) == (
        state.gossip_momentum, state.regularization, state.design.block_size,
        state.design.radius, state.design.horizon)
    assert "secret" in repr(state) and "decisions" in repr(state)
    assert str(state.decisions[0, 0, 0]) not in repr(state)


def test_an_untyped_training_state_is_refused_before_any_change():
    """A training estimator pickled before the typed state holds an untyped one."""
    est = _started()
    est._training_state = TrainingState(params={"solver": "ftgl"}, W=np.zeros((3, 3, 4)))
    before = pickle.dumps(vars(est))
    with pytest.raises(ValueError, match="older version"):
        est.partial_fit(_X[30:], _Y[30:], sample_group=_G[30:])
    assert pickle.dumps(vars(est)) == before
