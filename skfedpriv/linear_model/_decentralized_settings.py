"""The validated settings of a ``DecentralizedLogisticRegression`` stream."""

from dataclasses import dataclass, fields

import numpy as np

from ._base import StreamSettings


@dataclass(frozen=True, eq=False)
class DecentralizedSettings(StreamSettings):
    """The hyperparameters a decentralized stream is sized by, after
    validation (data-independent; they may not change mid-stream).

    Numbers are Python ``float`` / ``int`` (``None`` where the default is
    computed later from declared quantities); ``topology`` is a name or a
    copy of the user's mixing matrix. ``random_state``, ``budget`` and
    ``classes`` are read from the estimator: they do not size the stream
    (the classes are checked against ``classes_`` on every call).

    ``eq=False``: a matrix ``topology`` has no truth value; two settings are
    compared through :meth:`stream_key`.
    """

    topology: object
    solver: str
    constraint: str
    fit_intercept: bool
    #: None without a mechanism (no noise)
    mechanism: object
    #: the ε in force: None without a mechanism
    epsilon: object
    radius: object
    clip_norm: object
    alpha: object
    h: object
    block_size: object
    n_rounds: object

    def stream_key(self):
        """Every field; a matrix ``topology`` as its shape and entries."""
        topology = self.topology
        if isinstance(topology, np.ndarray):
            topology = (topology.shape, tuple(topology.ravel().tolist()))
        return (topology,) + tuple(getattr(self, f.name) for f in fields(self)[1:])


def _float_or_none(value):
    return None if value is None else float(value)


def _int_or_none(value):
    return None if value is None else int(value)


def decentralized_settings(params):
    """The :class:`DecentralizedSettings` of validated ``params`` (the
    ``__init__`` parameters, name -> value)."""
    topology = params["topology"]
    return DecentralizedSettings(
        topology=topology if isinstance(topology, str)
        else np.array(topology, dtype=np.float64, copy=True),
        solver=params["solver"],
        constraint=params["constraint"],
        fit_intercept=bool(params["fit_intercept"]),
        mechanism=params["mechanism"],
        epsilon=None if params["mechanism"] is None else float(params["epsilon"]),
        radius=_float_or_none(params["radius"]),
        clip_norm=_float_or_none(params["clip_norm"]),
        alpha=_float_or_none(params["alpha"]),
        h=_float_or_none(params["h"]),
        block_size=_int_or_none(params["block_size"]),
        n_rounds=_int_or_none(params["n_rounds"]),
    )
