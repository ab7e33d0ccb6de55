"""The validated settings of a :class:`~skfedpriv.DWDClassifier` stream."""

from dataclasses import dataclass

from .._loss import GenDWDLoss
from .._param_validation import InvalidParameterError
from ..privacy._objective_perturbation import check_augmented_clip_norm
from ._base import StreamSettings

#: The settings a private stream's guarantee and accumulated state depend on.
_PRIVATE_STREAM_FIELDS = ("mechanism", "epsilon", "delta", "clip_norm", "rho", "step_radius",
                          "calibration", "online_steps", "q", "alpha", "fit_intercept",
                          "n_batches", "honest_sites", "inference")

#: The mechanisms whose fit offers ``inference=True`` (noise-aware intervals).
INFERENCE_MECHANISMS = ("local-gaussian",)

#: The prefix-sum mechanisms: name -> factorization of every site's stream.
CONTINUAL = {"local-tree": "honaker", "local-blt": "blt"}
#: The secure-aggregation mechanisms: name -> factorization of the tree.
SECAGG = {"secagg-tree": "honaker"}


@dataclass(frozen=True)
class DWDSettings(StreamSettings):
    """The hyperparameters of :class:`~skfedpriv.DWDClassifier` after the
    cross-parameter rules (data-independent): ``q``, ``alpha`` as floats,
    ``loss`` the genDWD loss object, and under a mechanism ``delta`` (0 for
    Laplace), ``clip_norm`` and the resolved ``step_radius``."""

    q: float
    alpha: float
    fit_intercept: bool
    class_weight: object
    max_iter: int
    tol: float
    online_steps: int
    n_jobs: object
    random_state: object
    mechanism: object
    epsilon: float
    delta: float
    clip_norm: object
    rho: object
    step_radius: object
    calibration: str
    budget: object
    classes: object
    n_batches: object
    inference: bool
    honest_sites: object
    shift_correction: object
    loss: GenDWDLoss

    def stream_key(self):
        """Without a mechanism only the parameter layout (``fit_intercept``)
        and whether the stream carries a covariance (``inference``) bind it;
        with one, everything its guarantee and noise use."""
        if self.mechanism is None:
            key = (None, self.fit_intercept, self.inference)
            # with inference, whether the stream carries the second-order
            # correction's state binds it too
            return key + (self.shift_correction,) if self.inference else key
        return tuple(getattr(self, name) for name in _PRIVATE_STREAM_FIELDS)


def dwd_settings(params):
    """The :class:`DWDSettings` of validated ``params`` (cross-parameter rules:
    raises :class:`~skfedpriv._param_validation.InvalidParameterError`)."""
    values = dict(params)  # every hyperparameter is a field
    values.update(q=float(params["q"]), alpha=float(params["alpha"]),
                  fit_intercept=bool(params["fit_intercept"]), inference=bool(params["inference"]),
                  loss=GenDWDLoss(float(params["q"])))
    mechanism = params["mechanism"]
    if params["shift_correction"] == "second-order" and (mechanism is not None
                                                         or not params["inference"]):
        raise InvalidParameterError(
            "shift_correction='second-order' corrects a non-private stream's estimate "
            "by its covariance: it needs inference=True and mechanism=None.")
    if mechanism is None:
        return DWDSettings(**values)
    if params["inference"] and mechanism not in INFERENCE_MECHANISMS:
        raise InvalidParameterError(
            f"inference=True is offered with mechanism='local-gaussian' only (its "
            f"intervals account for the sites' noise and charge the extra summary); "
            f"mechanism={mechanism!r} releases no summary a variance could be formed "
            "from. Use inference=False, or mechanism='local-gaussian'."
        )
    if params["clip_norm"] is None:
        raise InvalidParameterError(
            "clip_norm must be set with a privacy mechanism: it bounds the norm "
            "of the augmented row (1, x) and is never read from the data."
        )
    check_augmented_clip_norm(params["clip_norm"], params["fit_intercept"])
    if params["class_weight"] is not None:
        raise InvalidParameterError(
            "class_weight must be None with a privacy mechanism: the "
            "sensitivity bounds assume every row weighs one."
        )
    values.update(epsilon=float(params["epsilon"]),
                  delta=0.0 if mechanism == "laplace" else float(params["delta"]),
                  clip_norm=float(params["clip_norm"]))
    if (mechanism in CONTINUAL or mechanism in SECAGG) and params["n_batches"] is None:
        raise InvalidParameterError(
            f"mechanism={mechanism!r} needs n_batches, the stream's horizon: its "
            "noise is calibrated for that many batches."
        )
    if params["step_radius"] is None:
        # R = q / ((q+1)² C2): the curvature part of T1 (eq. 61) equals
        # its gradient part
        values["step_radius"] = 1.0 / (values["loss"].curvature_bound * values["clip_norm"])
    else:
        values["step_radius"] = float(params["step_radius"])
    return DWDSettings(**values)
