"""The DWD site of the federated protocol (no Flower import).

A :class:`DWDSite` holds one site's rows (batch by batch) and answers the
server's requests with sums over those rows — exactly the summaries the
in-process :class:`~skfedpriv.DWDClassifier` computes per site. With a
:class:`SitePrivacy` it answers *only* with Gaussian-noised summaries, and
the site is the trust boundary: the class count K, σ, the clip, the release
caps and the batches are fixed by the site's own configuration and its own
ledger file, never by a request; a request that names other values is
refused before any row is read, and every refusal reaches the server as a
fixed text (:mod:`skfedpriv.federated._refusal`).
"""

import numbers

import numpy as np

from .._loss import GenDWDLoss
from .._losses import count_models
from .._param_validation import Interval, validate_parameters
from ..linear_model._dwd import PARAMETER_CONSTRAINTS as DWD_CONSTRAINTS
from ..linear_model._dwd_sites import prepare_rows, side_flags
from ..linear_model._inference_sites import site_inference_summary
from ..linear_model._second_order import (
    MAX_THIRD_NUMBERS,
    second_order_numbers,
    site_second_order_moments,
)
from ..linear_model._dwd_solver import (
    augmented_scores,
    site_curvature_matrices,
    augmented_gram,
    site_curvature_product,
    site_line_losses,
    site_summary,
)
from ..privacy._objective_perturbation import (
    SUMMARY_KINDS,
    check_augmented_clip_norm,
    local_gaussian_releases,
    local_gaussian_sigma,
    site_noise,
    summary_sensitivity,
)
from ._continual_site import ContinualSitePrivacy
from ._loss_message import request_loss
from ._refusal import EXHAUSTED, MISMATCH, RAW_SUMS, Refused, answer_or_refuse
from ._site_config import (
    _PROCESS_SAFE_CONSTRAINTS,
    checked_theta as _checked_theta,
    declared_classes,
    labels_differ,
    refuse_mismatch,
    required_ledger,
)

#: Version 2: DWD sites answer ``curvature_product`` and ``line_losses``, so a
#: remote fit takes the rounds of an in-process one. Version 3: a
#: ``curvature_product`` request may name (``exact``, one flag per model) the
#: models whose product uses ``V_q''`` itself instead of the smoothed one, and
#: a ``summary`` request (``with_curvature``, one flag per model) the models
#: whose curvature matrix it asks for; with ``exact_curvature`` it also asks
#: for every model's matrix on ``V_q''`` (the server's curvature cache).
#: Version 4: private sites fix K, σ, the clip and the batches themselves
#: (declared ``classes``, a required ledger file); a private learner's round
#: ``r`` reads its batch ``r``; private refusals are fixed texts.
#: Version 5: requests name the loss by its registry spec (``loss``,
#: ``loss-<param>``: :mod:`~skfedpriv.federated._loss_message`), not by
#: genDWD's ``q``; a non-private site serves every margin loss of the
#: registry, a private one only the genDWD loss of its own configuration.
#: Version 6: a private site may hold a 'local-tree' / 'local-blt' noise
#: stream (``continual``), and non-private sites answer ``inference_summary``.
#: Version 7: non-private sites answer ``second_order_summary`` (the moments
#: of ``DWDClassifier``'s second-order stream correction).
PROTOCOL_VERSION = 7

#: The requests a private site answers with releases (each privacy one of them).
_RELEASE_OPS = frozenset({"noised", "continual"})

#: The checks of :class:`SitePrivacy`: those of the estimator's parameters of
#: the same names, with ``delta > 0`` and ``clip_norm`` required.
_SITE_PRIVACY_CONSTRAINTS = {
    **{name: DWD_CONSTRAINTS[name]
       for name in ("epsilon", "q", "online_steps", "fit_intercept", "calibration")},
    "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
    "clip_norm": [Interval(numbers.Real, 0, None, closed="neither")],
    "classes": ["array-like", None],
    **_PROCESS_SAFE_CONSTRAINTS,
}


class SitePrivacy:
    """Site-local Gaussian privacy of ``DWDClassifier(mechanism='local-gaussian')``.

    Everything the guarantee needs is fixed here, at the site: the class
    count ``K`` (from ``classes``), the unit noise multiplier σ and the
    release cap of a batch (computed once from them), the loss (genDWD with
    this ``q``), the clip and the ledger file that counts releases across
    runs and processes. A request naming other classes, another loss or
    ``q``, clip or ``fit_intercept`` is refused.

    The guarantee: for each row of this site, (ε, δ)-DP of everything the
    site sends over the whole stream (every reply and every refusal), under
    the replacement of one row by another row of the site's domain (finite
    features, a label among ``classes``, weight one), against a server that
    may deviate from the protocol in any way. Rows outside that domain are
    not answered for (the site refuses every request on their batch).

    Parameters
    ----------
    epsilon, delta : float
        The guarantee for each row of this site over the whole stream.
    clip_norm : float
        Bound enforced on ``‖(1, x)‖₂`` (``‖x‖₂`` without intercept).
    classes : array-like
        The labels the site's rows may carry, the ``classes`` of the server's
        estimator (required). Fixes ``K``; the site checks its own rows
        against it when it reads them.
    ledger_path : str or path-like
        The site's :class:`SiteLedgerFile` (required): the release count of
        every batch, kept across Flower runs and concurrent processes, under
        this calibration (another calibration on the same file is refused).
    q : float, default=1.0
        The genDWD exponent: the site computes the genDWD loss of this
        ``q`` and no other loss.
    online_steps : int, default=10
        The horizon of a batch: ``online_steps`` gradients and one curvature
        per model (and the Gram matrix in batch 0).
    fit_intercept : bool, default=True
    calibration : {'analytic', 'classic', 'zcdp'}, default='analytic'
    random_state : int or None, default=None
        Seed of this site's noise; ``None`` draws OS entropy for every
        release. An integer seeds release ``i`` of batch ``b`` with
        ``(random_state, b, i)``, ``i`` read from the ledger file, so no
        release reuses a draw. Keep it secret from the server: whoever knows
        it can subtract the noise. An integer is for reproducible experiments.

    Attributes
    ----------
    classes : ndarray
        The declared labels, sorted.
    n_models : int
        ``K``: one-vs-rest models (one for two classes).
    loss : GenDWDLoss
        The loss the site computes (from ``q``).
    release_caps, unit_sigmas : dict
        ``{first_batch: value}``: the releases a batch may make and the
        unit noise multiplier σ covering them.
    """

    #: The request this privacy answers with releases.
    release_op = "noised"

    def __init__(self, epsilon, delta, clip_norm, *, classes=None, ledger_path=None, q=1.0,
                 online_steps=10, fit_intercept=True, calibration="analytic",
                 random_state=None):
        validate_parameters(_SITE_PRIVACY_CONSTRAINTS, dict(
            epsilon=epsilon, delta=delta, clip_norm=clip_norm, q=q, online_steps=online_steps,
            fit_intercept=fit_intercept, calibration=calibration, random_state=random_state,
            ledger_path=ledger_path, classes=classes), "SitePrivacy")
        check_augmented_clip_norm(clip_norm, fit_intercept)
        self.epsilon, self.delta, self.clip_norm = float(epsilon), float(delta), float(clip_norm)
        self.q, self.online_steps = float(q), int(online_steps)
        self.loss = GenDWDLoss(self.q)
        self.fit_intercept, self.calibration = bool(fit_intercept), calibration
        self.random_state = random_state
        self.classes = declared_classes(classes, "SitePrivacy")
        self.ledger_file = required_ledger(ledger_path, "SitePrivacy")
        self.n_models = count_models(self.classes)
        self.release_caps = {first: local_gaussian_releases(self.n_models, self.online_steps, first)
                             for first in (True, False)}
        self.unit_sigmas = {first: local_gaussian_sigma(self.epsilon, self.delta, cap, calibration)
                            for first, cap in self.release_caps.items()}

    @classmethod
    def from_estimator(cls, estimator, random_state=None, ledger_path=None, classes=None):
        """The site parameters matching a ``DWDClassifier(mechanism='local-gaussian')``
        (``classes``: default the estimator's ``classes`` hyperparameter)."""
        if estimator.mechanism != "local-gaussian":
            raise ValueError("only mechanism='local-gaussian' runs its noise at the sites.")
        return cls(
            estimator.epsilon, estimator.delta, estimator.clip_norm, q=estimator.q,
            online_steps=estimator.online_steps, fit_intercept=estimator.fit_intercept,
            calibration=estimator.calibration, random_state=random_state,
            ledger_path=ledger_path,
            classes=estimator.classes if classes is None else classes,
        )

    def calibration_key(self):
        """Everything that fixes the noise and the release caps (as text): K,
        σ and the caps included, so a ledger file never counts under two."""
        return repr(("dwd-local-gaussian", self.epsilon, self.delta, self.clip_norm, self.q,
                     self.online_steps, self.fit_intercept, self.calibration,
                     self.classes.tolist(), self.n_models, sorted(self.release_caps.items()),
                     sorted(self.unit_sigmas.items())))

    def check_request(self, request, site):
        """Refuse (:data:`MISMATCH`) a request naming anything but this configuration."""
        clip = request.get("clip_norm")
        refuse_mismatch({
            "classes": labels_differ(request, self.classes),
            "fit_intercept": request.get("fit_intercept") is None
            or bool(request["fit_intercept"]) != self.fit_intercept,
            "clip_norm": clip is None or float(clip) != self.clip_norm,
            "class_weight": request.get("class_weight") is not None,
            "loss": (request.get("op") == "noised" or "loss" in request)
            and self._names_another_loss(request),
            "batch": int(request.get("batch", -1)) < 0,
        }, site)


    def _names_another_loss(self, request):
        """Whether the request names a loss other than the site's own (or none)."""
        try:
            return request_loss(request) != self.loss
        except (ValueError, TypeError):
            return True


class _Site:
    """What every site shares: its rows, its name, the protocol check."""

    privacy_type = None

    def __init__(self, load_batch, privacy=None, name="site"):
        if privacy is not None and not isinstance(privacy, self.privacy_type):
            types = self.privacy_type if isinstance(self.privacy_type, tuple) else (
                self.privacy_type,)
            names = " or ".join(t.__name__ for t in types)
            raise TypeError(f"privacy must be a {names} or None.")
        self.load_batch = load_batch
        self.privacy = privacy
        self.name = str(name)

    def handle(self, request):
        """Answer one request (see :mod:`skfedpriv.federated`).

        A private site's every failure reaches the caller as a
        :class:`~skfedpriv.federated.SiteRefusal` with a fixed text (the reason
        goes to the site's log).

        Parameters
        ----------
        request : dict
            ``op`` and its arguments.

        Returns
        -------
        reply : dict of arrays and scalars
        """
        if self.privacy is None:
            self._check_protocol(request)
            return self._answer(request)
        return answer_or_refuse(self.name, self._answer_private, request)

    def _rows(self, batch):
        loaded = self.load_batch(int(batch))
        X, y = np.asarray(loaded[0], dtype=np.float64), np.asarray(loaded[1])
        w = np.ones(len(y)) if len(loaded) < 3 or loaded[2] is None else np.asarray(loaded[2], dtype=float)
        if X.ndim != 2 or y.ndim != 1 or len(y) != X.shape[0] or w.shape != y.shape:
            raise ValueError("load_batch must return X of shape (n, p), y and sample_weight of shape (n,).")
        if not np.all(np.isfinite(X)) or not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("X and sample_weight must be finite, sample_weight >= 0.")
        return X, y, w

    def _private_rows(self, batch):
        """The batch's rows, checked against the site's own domain (declared
        classes, weight one); a failure stays at the site (its log)."""
        X, y, w = self._rows(batch)
        self._check_labels(y, self.privacy.classes)
        if not np.all(w == 1.0):
            raise ValueError(f"site {self.name}: a private site's rows weigh one.")
        return X, y, w

    @staticmethod
    def _check_protocol(request):
        if int(request.get("protocol", -1)) != PROTOCOL_VERSION:
            raise Refused(MISMATCH, f"protocol version {request.get('protocol')!r} is not "
                                    f"{PROTOCOL_VERSION}.")

    def _check_labels(self, y, classes):
        unseen = np.setdiff1d(np.unique(y), classes)
        if unseen.size:
            raise ValueError(f"site {self.name}: labels {unseen!r} are not in classes {classes!r}.")


def _margin_loss(request):
    """The margin loss a request names (the site's summaries are one-vs-rest)."""
    loss = request_loss(request)
    if loss.kind != "margin":
        raise ValueError(f"a DWDSite computes one-vs-rest summaries of margin losses, not "
                         f"of the {loss.name} loss.")
    return loss


class DWDSite(_Site):
    """One site: its rows and its answers to the server.

    Parameters
    ----------
    load_batch : callable ``batch -> (X, y)`` or ``(X, y, sample_weight)``
        The site's rows of batch ``batch`` (0 for ``fit``, 0, 1, ... for a
        stream). Called on every request (a Flower client process lives for
        one message), so it should be cheap (e.g. ``numpy.load``).
    privacy : SitePrivacy, ContinualSitePrivacy or None
        None: the site trusts the server with raw sums. A
        :class:`SitePrivacy` ('local-gaussian') answers ``noised`` requests,
        a :class:`ContinualSitePrivacy` ('local-tree', 'local-blt')
        ``continual`` requests, each from the site's own stream.
    name : str
        The site's name (replies are summed in order of names; with a
        :class:`SitePrivacy`, the site's name in its ledger file).
    """

    privacy_type = (SitePrivacy, ContinualSitePrivacy)

    # -- a site that trusts the server ---------------------------------------

    def _prepared(self, request):
        """Rows as the summaries need them: targets, weights, clipped rows."""
        X, y, w = self._rows(request["batch"])
        classes = np.asarray(list(request["classes"]))
        self._check_labels(y, classes)
        fit_intercept = bool(request["fit_intercept"])
        X, Y, w = prepare_rows(X, y, w, classes, fit_intercept=fit_intercept,
                               class_weight=request.get("class_weight"),
                               clip_norm=request.get("clip_norm"))  # Algorithm 2: clip here
        return X, Y, w, fit_intercept

    def _answer(self, request):
        op = request.get("op")
        reply = {"site": self.name}
        if op == "describe":
            X, y, w = self._rows(request["batch"])
            reply.update(n_rows=int(len(y)), n_features=int(X.shape[1]), private=False,
                         labels=np.unique(y).tolist())
            return reply
        if op == "noised":
            raise ValueError(f"site {self.name} has no SitePrivacy to draw noise with.")
        X, Y, w, fit_intercept = self._prepared(request)
        if op == "prepare":
            has_positive, has_negative = side_flags(Y, w)
            reply.update(weight_sum=float(w.sum()), has_positive=has_positive.tolist(),
                         has_negative=has_negative.tolist())
            return reply
        if op == "summary":
            theta, loss = np.asarray(request["theta"], dtype=float), _margin_loss(request)
            scores = augmented_scores(X, theta, fit_intercept)  # one pass, for every sum below
            total, grad, curvature = site_summary(
                X, Y, w, theta, loss, fit_intercept,
                np.asarray(request["with_curvature"], dtype=bool), scores=scores,
            )
            reply.update(loss=total, grad=grad)
            if curvature is not None:
                reply["curvature"] = curvature
            if request.get("exact_curvature"):
                # every model's matrix on V_q'' itself (the server's cache)
                reply["exact_curvature"] = site_curvature_matrices(
                    X, Y, w, scores, loss, fit_intercept, exact=True)
            return reply
        if op == "gram":
            reply["gram"] = augmented_gram(X, w, fit_intercept)
            return reply
        if op == "inference_summary":
            loss = _margin_loss(request)
            summary = site_inference_summary(X, Y, w, _checked_theta(request, (
                X.shape[1] + int(fit_intercept), Y.shape[1])), fit_intercept,
                loss.derivative, loss.curvature)
            reply.update(curvature=summary.curvature, score_outer=summary.score_outer,
                         score_sum=summary.score_sum, weight_sq_sum=summary.weight_sq_sum)
            return reply
        if op == "second_order_summary":
            return self._second_order_summary(request, X, Y, w, fit_intercept, reply)
        theta, loss = np.asarray(request["theta"], dtype=float), _margin_loss(request)
        if op == "curvature_product":
            exact = request.get("exact")
            reply["value"] = site_curvature_product(
                X, Y, w, theta, np.asarray(request["v"], dtype=float), loss, fit_intercept,
                exact=None if exact is None else np.asarray(exact, dtype=bool))
            return reply
        if op == "line_losses":
            reply["value"] = site_line_losses(
                X, Y, w, theta, np.asarray(request["s"], dtype=float),
                [float(t) for t in request["steps"]], loss, fit_intercept)
            return reply
        raise ValueError(f"unknown request {op!r}.")

    def _second_order_summary(self, request, X, Y, w, fit_intercept, reply):
        """The site's correction moments at the request's ``theta`` and
        smoothing ``widths``, their shapes from its own rows and the
        prepared targets; refused beyond :data:`MAX_THIRD_NUMBERS` numbers."""
        loss = _margin_loss(request)
        p1, n_models = X.shape[1] + int(fit_intercept), Y.shape[1]
        if second_order_numbers(p1, n_models) > MAX_THIRD_NUMBERS:
            raise ValueError(f"site {self.name}: the second-order moments of {n_models} "
                             f"models of {p1} parameters exceed {MAX_THIRD_NUMBERS} numbers.")
        theta = _checked_theta(request, (p1, n_models))
        widths = np.asarray(request.get("widths"), dtype=float)
        if widths.shape != (n_models,) or not np.all(np.isfinite(widths) & (widths > 0)):
            raise ValueError(f"site {self.name}: the smoothing widths must be {n_models} "
                             "positive finite numbers.")
        third, outer, fourth = site_second_order_moments(X, Y, w, theta, fit_intercept, loss,
                                                         widths)
        reply.update(third=third, outer_derivative=outer, fourth=fourth)
        return reply

    # -- a private site ------------------------------------------------------

    def _answer_private(self, request):
        """``describe``, ``prepare`` and the privacy's ``release_op``
        (``noised`` or ``continual``) only; every value the guarantee needs
        comes from the site's privacy and ledger."""
        privacy = self.privacy
        self._check_protocol(request)
        op = request.get("op")
        if op in _RELEASE_OPS - {privacy.release_op}:
            raise Refused(MISMATCH, f"site {self.name} answers {privacy.release_op!r}, not {op!r}.")
        if op not in ("describe", "prepare", privacy.release_op):
            raise Refused(RAW_SUMS, f"site {self.name} sends noised summaries only, not {op!r}.")
        reply = {"site": self.name}
        if op == "describe":  # row and feature counts: the same on neighbouring data sets
            X, y, _ = self._private_rows(request.get("batch"))
            reply.update(n_rows=int(len(y)), n_features=int(X.shape[1]), private=True,
                         holds_noise_stream=privacy.release_op == "continual")
            return reply
        privacy.check_request(request, self.name)
        X, y, w = self._private_rows(request["batch"])
        X, Y, w = prepare_rows(X, y, w, privacy.classes, fit_intercept=privacy.fit_intercept,
                               clip_norm=privacy.clip_norm)
        if op == "prepare":  # a row count (rows weigh one); no sides, no labels
            reply.update(weight_sum=float(w.sum()))
            return reply
        if op == "continual":
            theta = _checked_theta(request, (X.shape[1] + int(privacy.fit_intercept),
                                             privacy.n_models))
            linear, curvature = privacy.release(self.name, int(request["batch"]), X, Y, theta)
            reply.update(linear=linear, curvature=curvature, sigma=privacy.sigma)
            return reply
        return self._noised(request, X, Y, w, reply)

    def _noised(self, request, X, Y, w, reply):
        privacy = self.privacy
        batch, kind = int(request["batch"]), request.get("kind")
        if kind not in SUMMARY_KINDS:
            raise Refused(MISMATCH, f"unknown noised summary {kind!r}.")
        first = batch == 0
        if kind == "gram" and not first:
            raise Refused(EXHAUSTED, "the Gram matrix is released in the first batch only.")
        fit_intercept, n_models = privacy.fit_intercept, privacy.n_models
        p1 = X.shape[1] + int(fit_intercept)
        Theta = _checked_theta(request, (p1, n_models))
        cost = 1 if kind == "gram" else n_models
        # counted in the file, across runs and processes, before the value is computed
        used = privacy.ledger_file.charge(self.name, privacy.calibration_key(), f"releases-{batch}",
                                          cost, privacy.release_caps[first])
        rng = np.random.default_rng(
            None if privacy.random_state is None else [privacy.random_state, batch, used]
        )
        std = privacy.unit_sigmas[first] * summary_sensitivity(kind, privacy.loss, privacy.clip_norm)
        if kind == "gram":
            value = augmented_gram(X, w, fit_intercept)
        else:
            _, grad, curvature = site_summary(X, Y, w, Theta, privacy.loss, fit_intercept,
                                              kind == "curvature")
            value = grad if kind == "gradient" else curvature
        value = value + site_noise(kind, std, p1, n_models, rng)
        reply.update(value=value, std=float(std))
        return reply
