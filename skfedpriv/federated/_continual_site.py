"""A remote site's own noise stream for 'local-tree' / 'local-blt' (no Flower import).

With a :class:`ContinualSitePrivacy`, a :class:`~skfedpriv.federated.DWDSite`
releases, at batch ``b``, its linearized summaries ``(a_b, J_b)`` at the
server's ``θ_{b-1}`` plus the next increment of its *own* prefix-sum noise
stream (:mod:`skfedpriv.privacy._continual_summaries`): the server sums the
sites' releases and runs the in-process update on them. The site fixes
everything the guarantee needs from its own configuration and ledger file:
the factorization and its horizon (``n_batches``), σ, the clip, ``q`` and
``K``; batch ``b`` is step ``b`` of its stream, answered once and in order;
its noise generator and stream state live in the ledger file, advanced in
the same transaction that records the release, so no generator state is
drawn from twice, across processes and restarts.
"""

import math
import numbers
import pickle

import numpy as np

from .._loss import GenDWDLoss
from .._losses import count_models
from .._param_validation import (
    InvalidParameterError,
    Interval,
    Options,
    validate_parameters,
)
from ..linear_model._dwd import PARAMETER_CONSTRAINTS as DWD_CONSTRAINTS
from ..linear_model._dwd_settings import CONTINUAL
from ..privacy._continual_summaries import (
    continual_sensitivities,
    continual_sigma,
    linearized_summary,
    summary_size,
    unit_scales,
    unpack_summary,
)
from ..privacy._factorizations import make_factorization
from ..privacy._mechanisms import warn_if_seeded
from ..privacy._objective_perturbation import check_augmented_clip_norm
from ._loss_message import request_loss
from ._refusal import EXHAUSTED, MISMATCH, NOT_IN_ORDER, Refused
from ._site_config import (
    _PROCESS_SAFE_CONSTRAINTS,
    declared_classes,
    labels_differ,
    refuse_mismatch,
    required_ledger,
)

__all__ = ["ContinualSitePrivacy"]

#: The ledger key of a site's stream state (generator, stream, next batch).
_STREAM_STATE = "dwd-continual-stream"

_CONSTRAINTS = {
    "mechanism": [Options(*sorted(CONTINUAL))],
    **{name: DWD_CONSTRAINTS[name] for name in ("epsilon", "q", "fit_intercept", "calibration")},
    "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
    "clip_norm": [Interval(numbers.Real, 0, None, closed="neither")],
    "n_batches": [Interval(numbers.Integral, 1, None), None],
    "classes": ["array-like", None],
    **_PROCESS_SAFE_CONSTRAINTS,
}


class ContinualSitePrivacy:
    """Site-held correlated noise of ``DWDClassifier(mechanism='local-tree' | 'local-blt')``.

    The site computes from these parameters alone the factorization of its
    stream (Honaker tree or BLT over ``n_batches`` steps), the noise
    multiplier σ (:func:`~skfedpriv.privacy._continual_summaries.continual_sigma`,
    as the estimator does) and the sensitivities of its summaries; it draws
    its own stream and adds its increments to every release.

    The guarantee: for each row of this site, (ε, δ)-DP of everything the
    site sends over the whole stream (every release and every refusal),
    under the replacement of one row by another row of the site's domain
    (finite features, a label among ``classes``, weight one), against a
    server that may deviate from the protocol in any way, the server's
    ``θ_{b-1}`` chosen adaptively (adaptive continual release, Denisov et
    al. 2022, Thm. 2.1). The site enforces what that needs: rows clipped to
    ``clip_norm`` and the per-row joint clipping of the summaries, batch
    ``b`` read at step ``b`` only (each row in one release), each step
    answered once and in order, no step past ``n_batches``, and every
    request naming another K, loss, clip, horizon or σ refused.

    Parameters
    ----------
    mechanism : {'local-tree', 'local-blt'}
    epsilon, delta : float
        The guarantee for each row of this site over the whole stream.
    clip_norm : float
        Bound enforced on ``‖(1, x)‖₂`` (``‖x‖₂`` without intercept).
    n_batches : int
        The horizon: steps of the site's stream (batches ``0 .. n_batches - 1``).
    classes : array-like
        The labels the site's rows may carry (required); fixes ``K``.
    ledger_path : str or path-like
        The site's :class:`SiteLedgerFile` (required): the noise stream and
        the next batch, kept across Flower runs and processes. The file
        holds the noise generator: keep it at the site.
    q : float, default=1.0
    fit_intercept : bool, default=True
    calibration : {'analytic', 'classic', 'zcdp'}, default='analytic'
    random_state : int or None, default=None
        Seed of the site's stream; ``None`` draws OS entropy once, when the
        stream starts (the generator then lives in the ledger file). Keep it
        secret from the server. An integer is for reproducible experiments.

    Attributes
    ----------
    classes : ndarray
    n_models : int
    factorization : PrefixSumFactorization
    sigma : float
        σ of each unit draw of the stream.
    std : (float, float)
        Noise std per entry of ``a`` and of ``J``.
    """

    #: The request this privacy answers with releases.
    release_op = "continual"

    def __init__(self, mechanism, epsilon, delta, clip_norm, *, n_batches=None, classes=None,
                 ledger_path=None, q=1.0, fit_intercept=True, calibration="analytic",
                 random_state=None):
        validate_parameters(_CONSTRAINTS, dict(
            mechanism=mechanism, epsilon=epsilon, delta=delta, clip_norm=clip_norm,
            n_batches=n_batches, q=q, fit_intercept=fit_intercept, calibration=calibration,
            random_state=random_state, ledger_path=ledger_path, classes=classes),
            "ContinualSitePrivacy")
        if n_batches is None:
            raise InvalidParameterError(
                "a ContinualSitePrivacy needs n_batches, the horizon of its noise stream.")
        check_augmented_clip_norm(clip_norm, fit_intercept)
        self.mechanism = mechanism
        self.epsilon, self.delta, self.clip_norm = float(epsilon), float(delta), float(clip_norm)
        self.n_batches, self.q = int(n_batches), float(q)
        self.loss = GenDWDLoss(self.q)
        self.fit_intercept, self.calibration = bool(fit_intercept), calibration
        warn_if_seeded(random_state, "ContinualSitePrivacy")
        self.random_state = random_state
        self.classes = declared_classes(classes, "ContinualSitePrivacy")
        self.n_models = count_models(self.classes)
        self.ledger_file = required_ledger(ledger_path, "ContinualSitePrivacy")
        self.factorization = make_factorization(CONTINUAL[mechanism], self.n_batches)
        self.sigma = continual_sigma(self.epsilon, self.delta, self.factorization, calibration)
        self.std = tuple(self.sigma * s for s in unit_scales(continual_sensitivities(self.q, self.clip_norm)))

    @classmethod
    def from_estimator(cls, estimator, random_state=None, ledger_path=None, classes=None):
        """The site parameters matching a ``DWDClassifier`` of a prefix-sum
        mechanism (``classes``: default the estimator's ``classes``)."""
        if estimator.mechanism not in CONTINUAL:
            raise ValueError(f"mechanism={estimator.mechanism!r} is not one of "
                             f"{sorted(CONTINUAL)}.")
        return cls(estimator.mechanism, estimator.epsilon, estimator.delta, estimator.clip_norm,
                   n_batches=estimator.n_batches, q=estimator.q,
                   fit_intercept=estimator.fit_intercept, calibration=estimator.calibration,
                   random_state=random_state, ledger_path=ledger_path,
                   classes=estimator.classes if classes is None else classes)

    def calibration_key(self):
        """Everything that fixes the stream and its noise (as text), so a
        ledger file never holds a stream under two calibrations."""
        return repr(("dwd-continual", self.mechanism, self.epsilon, self.delta, self.clip_norm,
                     self.q, self.fit_intercept, self.calibration, self.classes.tolist(),
                     self.n_models, repr(self.factorization), self.sigma))

    def check_request(self, request, site):
        """Refuse (:data:`MISMATCH`) a request naming anything but this configuration."""
        clip = request.get("clip_norm")
        checks = {
            "classes": labels_differ(request, self.classes),
            "fit_intercept": request.get("fit_intercept") is None
            or bool(request["fit_intercept"]) != self.fit_intercept,
            "clip_norm": clip is None or float(clip) != self.clip_norm,
            "class_weight": request.get("class_weight") is not None,
            "batch": int(request.get("batch", -1)) < 0,
        }
        if request.get("op") == self.release_op or "loss" in request:
            checks["loss"] = self._names_another_loss(request)
        if request.get("op") == self.release_op:
            checks["horizon"] = request.get("n_batches") != self.n_batches
            checks["factorization"] = request.get("factorization") != repr(self.factorization)
            checks["sigma"] = not _same(request.get("sigma"), self.sigma)
        refuse_mismatch(checks, site)

    def _names_another_loss(self, request):
        try:
            return request_loss(request) != self.loss
        except (ValueError, TypeError):
            return True

    def release(self, site, batch, X, Y, theta):
        """Step ``batch`` of the site's stream: ``(a_b, J_b)`` of the site's
        prepared rows at ``theta`` plus the stream's next increment.

        The increment is drawn and the stream's new state recorded in one
        ledger transaction, before the values leave the site.
        """
        a, J = linearized_summary(X, Y, theta, self.q, self.fit_intercept)
        size = summary_size(*theta.shape)
        z = self.ledger_file.update_state(
            site, self.calibration_key(), _STREAM_STATE,
            lambda saved: self._advance(saved, site, batch, size))
        noise_a, noise_J = unpack_summary(z, *theta.shape, self.std)
        return a + noise_a, J + noise_J

    def _advance(self, saved, site, batch, size):
        """(new saved state, the unit draw of step ``batch``)."""
        if batch >= self.n_batches:
            raise Refused(EXHAUSTED, f"site {site}: batch {batch} is past the horizon "
                                     f"n_batches={self.n_batches}.")
        state = None if saved is None else pickle.loads(saved)
        expected = 0 if state is None else state["next_batch"]
        if batch != expected:
            raise Refused(NOT_IN_ORDER, f"site {site}: asked for batch {batch}, its next "
                                        f"batch is {expected}.")
        if state is None:  # the stream starts: its generator lives in the ledger from now on
            rng = np.random.default_rng(self.random_state)
            state = dict(stream=self.factorization.noise_stream(rng, 1.0, shape=(size,)))
        if state["stream"].shape != (size,):
            raise Refused(MISMATCH, f"site {site}: the model changed shape within a stream.")
        z = state["stream"].next()
        state["next_batch"] = batch + 1
        return pickle.dumps(state), z


def _same(value, sigma):
    """Whether the request's σ is the site's (up to rounding of the calibration)."""
    try:
        return math.isclose(float(value), sigma, rel_tol=1e-9, abs_tol=0.0)
    except (TypeError, ValueError):
        return False
