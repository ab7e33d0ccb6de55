"""The logistic learner of the federated protocol (no Flower import).

A :class:`LogisticSite` is one learner of
:class:`~skfedpriv.LogisticRegression` (Algorithm 1 of the correlated-noise
paper): each round it runs the τ local steps on its rows of the round from
the global model the server sends and replies with ``g_i^r``; with a
:class:`LearnerPrivacy` it holds its *own* correlated-noise stream and
replies only with ``ĝ_i^r = g_i^r +`` its noise increment. A private learner
fixes from its own configuration and ledger file which rows a round uses
(round ``r`` reads its batch ``r``), that each round is answered once and in
order, the horizon, the class count and the calibration; the server chooses
none of them.
"""

import pickle

import numpy as np

from .._losses import count_models
from .._param_validation import InvalidParameterError, validate_parameters
from ..linear_model._local_steps import learner_messages
from ..linear_model._logistic import logistic_settings, noise_calibration
from ..privacy._gradient_noise import LearnerNoise
from ._refusal import EXHAUSTED, MISMATCH, NOT_IN_ORDER, Refused
from ._site import _Site
from ._site_config import (
    _PROCESS_SAFE_CONSTRAINTS,
    checked_theta as _checked_theta,
    declared_classes,
    labels_differ,
    refuse_mismatch,
    required_ledger,
)

#: Hyperparameters of :class:`~skfedpriv.LogisticRegression` a learner needs
#: for its local steps and its noise (sent as ``param-<name>``).
LOGISTIC_PARAMS = ("local_steps", "learning_rate", "n_rounds", "mechanism", "epsilon",
                   "delta", "clip_norm", "feature_clip_norm", "alpha", "fit_intercept")
_LEARNER_STATE = "logistic-learner"


def logistic_request_params(settings):
    """The ``param-*`` entries of a round request from the server's
    :class:`~skfedpriv.linear_model._logistic.LogisticSettings` (``None``
    values are omitted; ``learning_rate`` is the resolved step size)."""
    values = settings.as_dict()
    return {f"param-{k}": values[k] for k in LOGISTIC_PARAMS if values[k] is not None}


def _settings_from_request(request):
    return logistic_settings({k: request.get(f"param-{k}") for k in LOGISTIC_PARAMS
                              if request.get(f"param-{k}") is not None})


def _learner_view(settings):
    """The settings a learner's messages depend on (all but the server's step)."""
    return {k: v for k, v in settings.as_dict().items() if k in LOGISTIC_PARAMS}


class LearnerPrivacy:
    """Learner-held correlated noise of ``LogisticRegression(mechanism=...)``.

    A learner with these parameters computes, from them alone, the
    factorization ``A = B C`` and the std σ of its noise (exactly as the
    estimator does: :func:`~skfedpriv.linear_model._logistic.noise_calibration`),
    draws its own stream and adds its increments to every message it sends
    (:class:`~skfedpriv.privacy._gradient_noise.LearnerNoise`).

    The guarantee: for each row of this learner, (ε, δ)-DP of everything the
    learner sends over its whole stream (every message and every refusal),
    under the replacement of one row by another row of its domain (finite
    features, a label among ``classes``), against a server that may deviate
    from the protocol. The learner enforces what that needs itself: round
    ``r`` uses its batch ``r`` (each row in one message), each round is
    answered once and in order, only rounds ``0 .. n_rounds - 1``, and it
    refuses a request whose hyperparameters or classes differ from these.

    Parameters
    ----------
    mechanism : {'independent', 'tree', 'honaker', 'toeplitz', 'optimal', 'blt'}
    epsilon, delta : float
    classes : array-like
        The labels the learner's rows may carry (required); fixes the class
        count and the model's shape.
    ledger_path : str or path-like
        The learner's :class:`SiteLedgerFile` (required): its noise stream,
        pending increments and next round, kept across Flower runs and
        concurrent processes (a later run cannot restart round 0). The file
        holds the noise stream: keep it at the learner.
    n_rounds, local_steps, learning_rate, clip_norm, feature_clip_norm, alpha, fit_intercept
        As in :class:`~skfedpriv.LogisticRegression` (same defaults).
    random_state : int or None, default=None
        Seed of this learner's noise stream; ``None`` draws OS entropy once,
        when the learner joins (the generator then lives in the ledger
        file). Keep it secret from the server: whoever knows it can subtract
        the noise. An integer is for reproducible experiments.

    Attributes
    ----------
    settings : LogisticSettings
        The validated parameters (``learning_rate`` resolved).
    classes : ndarray
    factorization : PrefixSumFactorization
    noise_scale : float
        σ of each entry of the learner's draws.
    """

    def __init__(self, mechanism, epsilon, delta, *, classes=None, ledger_path=None,
                 n_rounds=100, local_steps=5, learning_rate="auto", clip_norm=1.0,
                 feature_clip_norm=None, alpha=0.0, fit_intercept=True, random_state=None):
        validate_parameters(_PROCESS_SAFE_CONSTRAINTS, dict(
            random_state=random_state, ledger_path=ledger_path), "LearnerPrivacy")
        if mechanism is None:
            raise InvalidParameterError(
                "a LearnerPrivacy needs a mechanism (None adds no noise: use privacy=None).")
        # every check of the estimator
        self.settings = logistic_settings(dict(
            mechanism=mechanism, epsilon=epsilon, delta=delta, n_rounds=n_rounds,
            local_steps=local_steps, learning_rate=learning_rate, clip_norm=clip_norm,
            feature_clip_norm=feature_clip_norm, alpha=alpha, fit_intercept=fit_intercept,
        ))
        calibration = noise_calibration(self.settings)
        self.factorization = calibration.factorization
        self.noise_scale = float(calibration.noise_scale)
        self.random_state = random_state
        self.classes = declared_classes(classes, "LearnerPrivacy")
        self.ledger_file = required_ledger(ledger_path, "LearnerPrivacy")
        # the param-* entries of a round request: exactly what a server with
        # these settings sends (None: omitted)
        self.request_params = _learner_view(self.settings)

    @classmethod
    def from_estimator(cls, estimator, random_state=None, ledger_path=None, classes=None):
        """The learner parameters matching a private ``LogisticRegression``
        (``classes``: default the estimator's ``classes`` hyperparameter)."""
        values = estimator.get_params()
        return cls(**{k: values[k] for k in LOGISTIC_PARAMS}, random_state=random_state,
                   ledger_path=ledger_path,
                   classes=values["classes"] if classes is None else classes)

    def calibration_key(self):
        """The parameters that fix the noise stream (as text)."""
        return repr(("logistic", sorted(self.request_params.items()), self.noise_scale,
                     self.classes.tolist()))

    def check_request(self, request, site):
        """Refuse (:data:`MISMATCH`) a round naming other hyperparameters,
        classes or rows than this learner's own (round ``r`` reads batch ``r``)."""
        theirs = {k: request.get(f"param-{k}") for k in LOGISTIC_PARAMS}
        r = int(request.get("round", -1))
        refuse_mismatch({
            "hyperparameters": theirs != self.request_params,
            "classes": labels_differ(request, self.classes),
            "batch": int(request.get("batch", -1)) != r,
        }, site)
        if not 0 <= r < self.settings.n_rounds:
            raise Refused(EXHAUSTED, f"site {site}: round {r} is outside the horizon.")
        return r


class LogisticSite(_Site):
    """One learner of the federated logistic protocol.

    Parameters
    ----------
    load_batch : callable ``batch -> (X, y)``
        The learner's rows (clients) of round ``batch``; an empty batch
        means the learner is absent from that round.
    privacy : LearnerPrivacy or None
        None: the learner sends its raw ``g_i^r`` (not private).
    name : str
        The learner's name; learners new in the same round are numbered in
        order of names (as ``numpy.unique`` orders ``sample_group``).

    Requests: ``describe`` (feature count; labels only when not private)
    and ``round`` (the global model ``theta``, the round index, the batch,
    the classes and the estimator's hyperparameters ``param-*``). A private
    learner reads batch ``r`` in round ``r`` (a request naming another
    batch is refused), keeps in its ledger file its noise stream, the
    increments of the rounds it missed and the next round index, and answers
    each round once, in order.
    """

    privacy_type = LearnerPrivacy

    def _describe(self, request, reply, rows):
        batches = request.get("batches", [request.get("batch", 0)])
        n_features, labels = set(), set()
        for batch in batches:
            X, y, _ = rows(batch)
            n_features.add(int(X.shape[1]))
            labels.update(np.unique(y).tolist())
        if len(n_features) != 1:
            raise ValueError(f"site {self.name}: batches differ in their feature counts.")
        reply.update(n_features=n_features.pop(), private=self.privacy is not None)
        if self.privacy is None:  # a private learner keeps even its label set
            reply["labels"] = sorted(labels, key=lambda v: (str(type(v)), v))
        return reply

    def _answer(self, request):
        op = request.get("op")
        reply = {"site": self.name}
        if op == "describe":
            return self._describe(request, reply, self._rows)
        if op != "round":
            raise ValueError(f"unknown request {op!r} (site {self.name} runs the logistic protocol).")
        settings = _settings_from_request(request)
        if settings.mechanism is not None:
            raise ValueError(f"site {self.name} has no LearnerPrivacy to draw noise with.")
        classes = np.asarray(list(request["classes"]))
        X, y, w = self._rows(request["batch"])
        if not np.all(w == 1.0):
            raise ValueError("the logistic protocol has no sample weights.")
        self._check_labels(y, classes)
        theta = _checked_theta(request, (count_models(classes), X.shape[1] + int(settings.fit_intercept)))
        # lines 4-10: τ clipped local steps from x^r, then g_i^r
        _, messages = learner_messages(theta, X, y, np.zeros(len(y), dtype=np.intp), classes, settings)
        reply["present"] = len(y) > 0
        if reply["present"]:
            reply["message"] = messages[0]
        return reply

    def _answer_private(self, request):
        privacy = self.privacy
        self._check_protocol(request)
        op = request.get("op")
        reply = {"site": self.name}
        if op == "describe":
            return self._describe(request, reply, self._private_rows)
        if op != "round":
            raise Refused(MISMATCH, f"unknown request {op!r}.")
        r = privacy.check_request(request, self.name)
        settings, classes = privacy.settings, privacy.classes
        X, y, _ = self._private_rows(r)  # round r reads batch r: the learner's own schedule
        n_models = count_models(classes)
        theta = _checked_theta(request, (n_models, X.shape[1] + int(settings.fit_intercept)))
        present = len(y) > 0
        # lines 4-10: τ clipped local steps from x^r, then g_i^r
        _, messages = learner_messages(theta, X, y, np.zeros(len(y), dtype=np.intp), classes, settings)
        # lines 11-12 with the learner's own stream, advanced in one transaction
        joined, message = privacy.ledger_file.update_state(
            self.name, privacy.calibration_key(), _LEARNER_STATE,
            lambda saved: self._advance(saved, r, present, messages, theta.size))
        reply["present"] = present
        if not joined:
            return reply
        if message is not None:
            reply["message"] = message
        reply["std"] = privacy.noise_scale
        return reply

    def _advance(self, saved, r, present, messages, d):
        """(new saved state or None, (joined, message or None)) for round ``r``."""
        privacy = self.privacy
        state = pickle.loads(saved) if saved is not None else None
        if state is None and not present:
            return None, (False, None)  # not joined yet: no stream, nothing sent
        if state is None:  # joins now: a fresh stream, first increment this round
            noise = LearnerNoise(privacy.factorization, privacy.noise_scale, d,
                                 np.random.default_rng(privacy.random_state))
            state = dict(next_round=r, noise=noise)
        elif r != state["next_round"]:
            raise Refused(NOT_IN_ORDER, f"site {self.name}: asked for round {r}, its next round "
                                        f"is {state['next_round']}.")
        if state["noise"].size != d:
            raise Refused(MISMATCH, f"site {self.name}: the model changed shape within a stream.")
        noised = state["noise"].add([self.name] if present else [], messages)  # raises past n_rounds
        state.update(next_round=r + 1)
        return pickle.dumps(state), (True, noised[0] if present else None)  # kept before the message leaves
