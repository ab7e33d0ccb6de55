"""Loss objects: what a solver, a site and a sensitivity need of a loss.

Each loss declares, in one class, everything the package's protocols use:

``value``, ``derivative``, ``value_and_derivative``, ``curvature``
    The loss and its first two derivatives, elementwise on margins
    ``u = y * (x_bar @ theta)`` (targets ``y`` in {-1, +1}) for a *margin*
    loss; on scores of shape ``(..., K)`` for the multinomial loss.
``smoothed_curvature``
    The curvature model the renewable state and the damped Newton phase use
    (genDWD's eq. 8 ramp; the curvature itself for a twice-differentiable
    loss).
``curvature_bound``
    A data-independent bound of the curvature: the majorization (MM) step
    and the smoothness constant of a sensitivity analysis.
``derivative_bound``
    A bound of ``|loss'(u)|``: a per-row gradient norm is at most this
    times ``‖x_bar‖`` (``inf`` for a loss whose gradient is unbounded: no
    sensitivity without clipping the gradient itself).
``flat_at_zero``
    Whether the curvature vanishes at margin 0 (genDWD, left of its kink):
    an offline Newton fit from ``theta = 0`` then starts with a grid search
    along the gradient.
``is_likelihood``
    Whether the loss is a negative log-likelihood, so ``predict_proba``
    means something (:meth:`probabilities`).

:data:`LOSSES` is the registry (name -> class); :func:`make_loss` builds a
loss from a name, :func:`as_loss` also accepts a bare ``q`` (a float, the
genDWD exponent: what the older site functions carry). A loss names
itself by :meth:`~LossSpec.spec` (``{"loss": name, "params": {...}}``, its
registry name and its dataclass fields), and :func:`make_loss` rebuilds it
from that spec: what a protocol message carries
(:mod:`skfedpriv.federated`). Adding a margin loss is one class here and one
registry line: the federated Newton protocol
(:mod:`skfedpriv.linear_model._newton`), the remote sites and the
local-steps protocol (:mod:`skfedpriv.linear_model._local_steps`) read
nothing else of it.
"""

from collections.abc import Mapping
from dataclasses import dataclass, fields
from numbers import Real

import numpy as np
from scipy.special import expit, log_softmax, softmax

from ._losses import (
    gendwd_curvature,
    gendwd_curvature_bound,
    gendwd_derivative,
    gendwd_loss,
    gendwd_loss_and_derivative,
    gendwd_smoothed_curvature,
    logistic_derivative,
    logistic_loss,
    logistic_probabilities,
    softmax_curvature_bound,
)


class LossSpec:
    """What every loss shares: its spec, the registry's name for it."""

    def spec(self):
        """The loss as a registry spec: ``{"loss": name, "params": {field: value}}``.

        :func:`make_loss` rebuilds an equal loss from it (``make_loss(loss.spec())
        == loss``); the parameters are the loss's dataclass fields.
        """
        return {"loss": self.name, "params": {f.name: getattr(self, f.name) for f in fields(self)}}


class MarginLoss(LossSpec):
    """A loss of the margin ``u = y * score``, ``y`` in {-1, +1}.

    Subclasses define ``value``, ``derivative`` and ``curvature``
    (elementwise on ``u``) and the class attributes below.
    """

    name = None
    kind = "margin"
    curvature_bound = None
    derivative_bound = None
    flat_at_zero = False
    is_likelihood = False

    def value_and_derivative(self, u):
        """``(value(u), derivative(u))``."""
        return self.value(u), self.derivative(u)

    def smoothed_curvature(self, u):
        """The curvature model of the renewable state (the curvature itself
        unless the loss has a kink)."""
        return self.curvature(u)

    def probabilities(self, scores):
        """Class probabilities from decision scores (likelihoods only)."""
        raise AttributeError(f"the {self.name} loss is not a likelihood: no probabilities.")

    #: the genDWD exponent a q-speaking protocol message carries (None: none)
    q = None


@dataclass(frozen=True)
class GenDWDLoss(MarginLoss):
    """Generalized DWD loss ``V_q`` (Guo et al. 2025, eq. 4), any ``q > 0``.

    ``V_q(u) = 1 - u`` left of the kink ``u0 = q/(q+1)``, ``(u0/u)^q/(q+1)``
    right of it; ``|V_q'| <= 1``; ``0 <= V_q'' <= (q+1)²/q``; the smoothed
    curvature is eq. 8.
    """

    q: float = 1.0
    name = "gendwd"
    derivative_bound = 1.0
    flat_at_zero = True

    def __post_init__(self):
        if not (isinstance(self.q, Real) and self.q > 0):
            raise ValueError(f"genDWD needs q > 0, got {self.q!r}.")
        object.__setattr__(self, "q", float(self.q))

    @property
    def curvature_bound(self):
        return gendwd_curvature_bound(self.q)

    def value(self, u):
        return gendwd_loss(u, self.q)

    def derivative(self, u):
        return gendwd_derivative(u, self.q)

    def value_and_derivative(self, u):
        return gendwd_loss_and_derivative(u, self.q)

    def curvature(self, u):
        return gendwd_curvature(u, self.q)

    def smoothed_curvature(self, u):
        return gendwd_smoothed_curvature(u, self.q)


@dataclass(frozen=True)
class LogisticLoss(MarginLoss):
    """Binary logistic loss ``log(1 + exp(-u))`` (one-vs-rest for more
    classes): ``|ℓ'| < 1``, ``0 < ℓ'' <= 1/4``."""

    name = "logistic"
    curvature_bound = 0.25
    derivative_bound = 1.0
    is_likelihood = True

    def value(self, u):
        return logistic_loss(u)

    def derivative(self, u):
        return logistic_derivative(u)

    def value_and_derivative(self, u):
        u = np.asarray(u, dtype=float)
        return np.logaddexp(0.0, -u), -expit(-u)

    def curvature(self, u):
        p = expit(np.asarray(u, dtype=float))
        return p * (1.0 - p)

    def probabilities(self, scores):
        return logistic_probabilities(scores)


@dataclass(frozen=True)
class SquaredHingeLoss(MarginLoss):
    """Squared hinge ``max(0, 1 - u)²``: ``ℓ' = -2 max(0, 1 - u)`` (unbounded:
    a sensitivity needs the gradient itself clipped), ``0 <= ℓ'' <= 2``
    (2 left of 1, 0 right of it; the left limit at 1, an element of the
    generalized second derivative)."""

    name = "squared_hinge"
    curvature_bound = 2.0
    derivative_bound = float("inf")

    def value(self, u):
        return np.maximum(0.0, 1.0 - np.asarray(u, dtype=float)) ** 2

    def derivative(self, u):
        return -2.0 * np.maximum(0.0, 1.0 - np.asarray(u, dtype=float))

    def curvature(self, u):
        return np.where(np.asarray(u, dtype=float) < 1.0, 2.0, 0.0)


@dataclass(frozen=True)
class MultinomialLoss(LossSpec):
    """Multinomial (softmax) loss ``logsumexp(s) - s_y`` of scores ``s``
    (one per class, class axis last). Not a margin loss: its class models
    are coupled, so a Newton solver treats all of them as one parameter
    vector. The Hessian in the scores, ``diag(p) - p pᵀ``, is at most 1/2
    in spectral norm; the gradient ``p - e_y`` has norm at most ``sqrt(2)``.
    """

    name = "multinomial"
    kind = "multinomial"
    curvature_bound = softmax_curvature_bound()
    derivative_bound = float(np.sqrt(2.0))
    flat_at_zero = False
    is_likelihood = True
    q = None

    def value(self, scores, Y):
        """Per-row loss of ``scores`` (n, K) at one-hot targets ``Y`` (n, K)."""
        return -(log_softmax(scores, axis=-1) * Y).sum(axis=-1)

    def value_and_gradient(self, scores, Y):
        """Per-row loss and its gradient ``softmax(s) - Y`` in the scores."""
        log_p = log_softmax(scores, axis=-1)
        return -(log_p * Y).sum(axis=-1), np.exp(log_p) - Y

    def curvature_product(self, scores, V):
        """``(diag(p) - p pᵀ) v`` row by row, ``V`` of the scores' shape."""
        p = softmax(scores, axis=-1)
        pv = p * V
        return pv - p * pv.sum(axis=-1, keepdims=True)

    def probabilities(self, scores):
        if scores.ndim == 1:
            p1 = expit(scores)
            return np.column_stack([1.0 - p1, p1])
        return softmax(scores, axis=-1)


#: The registry: every loss the estimators accept by name.
LOSSES = {
    "gendwd": GenDWDLoss,
    "logistic": LogisticLoss,
    "multinomial": MultinomialLoss,
    "squared_hinge": SquaredHingeLoss,
}


def make_loss(name, **params):
    """The loss registered as ``name``, built with ``params`` (e.g. ``q``).

    Parameters
    ----------
    name : str or dict
        A registry name, or a spec ``{"loss": name, "params": {...}}`` (as
        :meth:`LossSpec.spec` builds it; then no ``params`` keywords).
    **params
        The loss's parameters (its dataclass fields; defaults for the rest).

    Raises
    ------
    ValueError
        An unknown name, spec key or parameter, or an invalid parameter value.
    """
    if isinstance(name, Mapping):
        if params or set(name) - {"loss", "params"} or not isinstance(name.get("params", {}),
                                                                      Mapping):
            raise ValueError(f"a loss spec is {{'loss': name, 'params': {{...}}}}, got {name!r}.")
        name, params = name.get("loss"), dict(name.get("params", {}))
    if not isinstance(name, str) or name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; known: {sorted(LOSSES)}.")
    cls = LOSSES[name]
    unknown = set(params) - {f.name for f in fields(cls)}
    if unknown:
        raise ValueError(f"the {name} loss takes no parameters {sorted(unknown)}.")
    return cls(**params)


def as_loss(loss):
    """A loss object from a loss object or a genDWD exponent ``q``."""
    if isinstance(loss, (MarginLoss, MultinomialLoss)):
        return loss
    if isinstance(loss, Real) and not isinstance(loss, bool):
        return GenDWDLoss(float(loss))
    raise TypeError(f"expected a loss object or a genDWD q, got {loss!r}.")


__all__ = ["GenDWDLoss", "LOSSES", "LogisticLoss", "LossSpec", "MarginLoss", "MultinomialLoss",
           "SquaredHingeLoss", "as_loss", "make_loss"]
