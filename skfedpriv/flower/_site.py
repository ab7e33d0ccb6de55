"""The site side of the federated protocols (no Flower import).

A :class:`DWDSite` holds one site's rows (batch by batch) and answers the
server's requests with sums over those rows — exactly the summaries the
in-process :class:`~skfedpriv.DWDClassifier` computes per site. With a
:class:`SitePrivacy` it answers *only* with Gaussian-noised summaries: the
noise scale is computed at the site from its own privacy parameters, the
rows are clipped at the site, and the site counts its releases and refuses
any request past the number the calibration covers. A server that asks for
more, or for raw sums, gets an error, never data.

A :class:`LogisticSite` is one learner of
:class:`~skfedpriv.LogisticRegression` (Algorithm 1 of the correlated-noise
paper): each round it runs the τ local steps on its rows of the round from
the global model the server sends and replies with ``g_i^r``; with a
:class:`LearnerPrivacy` it holds its *own* correlated-noise stream and
replies only with ``ĝ_i^r = g_i^r +`` its noise increment.
"""

import numbers
import os
import pickle
import sqlite3

import numpy as np

from .._losses import count_models
from .._param_validation import InvalidParameterError, Interval, validate_parameters
from ..linear_model._dwd import PARAMETER_CONSTRAINTS as DWD_CONSTRAINTS
from ..linear_model._dwd_sites import prepare_rows, side_flags
from ..linear_model._dwd_solver import (
    _scores,
    _site_curvature,
    augmented_gram,
    site_curvature_product,
    site_line_losses,
    site_summary,
)
from ..privacy import write_transaction
from ..privacy._objective_perturbation import (
    SUMMARY_KINDS,
    check_augmented_clip_norm,
    local_gaussian_releases,
    local_gaussian_sigma,
    site_noise,
    summary_sensitivity,
)
from ..linear_model._local_steps import learner_messages
from ..linear_model._logistic import logistic_settings, noise_calibration
from ..privacy._gradient_noise import LearnerNoise

#: Version 2: DWD sites answer ``curvature_product`` and ``line_losses``, so a
#: remote fit takes the rounds of an in-process one. Version 3: a
#: ``curvature_product`` request may name (``exact``, one flag per model) the
#: models whose product uses ``V_q''`` itself instead of the smoothed one, and
#: a ``summary`` request (``with_curvature``, one flag per model) the models
#: whose curvature matrix it asks for; with ``exact_curvature`` it also asks
#: for every model's matrix on ``V_q''`` (the server's curvature cache).
PROTOCOL_VERSION = 3


class SiteLedgerFile:
    """A site's release ledger in an SQLite file, shared by every process and run.

    A Flower ClientApp process lives for one message, and a Flower run's
    ``context.state`` for one run; a site whose ledger must hold across runs
    and concurrent processes keeps it in a file instead (``ledger_path=`` of
    :class:`SitePrivacy` / :class:`LearnerPrivacy`). Every check-and-charge
    is one ``BEGIN IMMEDIATE`` transaction, so concurrent processes are
    serialized. The file records each site's calibration (the privacy
    parameters that fix its noise and its release caps) and refuses a site
    that opens it with another one: counts made under one calibration do not
    bound releases under another.

    Parameters
    ----------
    path : str or path-like
        Created if missing. Keep it at the site (it may hold the site's
        noise-stream state).
    """

    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS skfedpriv_site ("
        " site TEXT PRIMARY KEY, calibration TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS skfedpriv_site_ledger ("
        " site TEXT NOT NULL, key TEXT NOT NULL, used INTEGER, state BLOB,"
        " PRIMARY KEY (site, key))",
    )

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))

    def _transaction(self, site, calibration, body):
        """Run ``body(conn)`` in one write transaction, after checking the calibration."""
        conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        try:
            with write_transaction(conn):
                for statement in self._SCHEMA:
                    conn.execute(statement)
                row = conn.execute("SELECT calibration FROM skfedpriv_site WHERE site = ?",
                                   (site,)).fetchone()
                if row is None:
                    conn.execute("INSERT INTO skfedpriv_site VALUES (?, ?)", (site, calibration))
                elif row[0] != calibration:
                    raise PermissionError(
                        f"site {site}: the ledger file {self.path!r} was kept under the "
                        f"calibration {row[0]}, not {calibration}; refusing."
                    )
                return body(conn)
        finally:
            conn.close()

    def charge(self, site, calibration, key, cost, cap):
        """Count ``cost`` releases under ``key`` if they stay within ``cap``.

        Returns
        -------
        used : int
            The count before this charge.

        Raises
        ------
        PermissionError
            If ``used + cost > cap`` (nothing is counted) or the calibration differs.
        """
        def body(conn):
            row = conn.execute("SELECT used FROM skfedpriv_site_ledger WHERE site = ? AND key = ?",
                               (site, key)).fetchone()
            used = 0 if row is None else int(row[0])
            if used + cost > cap:
                raise PermissionError(
                    f"site {site}: {key} has used {used} of its {cap} calibrated releases "
                    f"(ledger file {self.path!r}, kept across runs); refusing more."
                )
            conn.execute("INSERT OR REPLACE INTO skfedpriv_site_ledger (site, key, used) "
                         "VALUES (?, ?, ?)", (site, key, used + cost))
            return used
        return self._transaction(site, calibration, body)

    def update_state(self, site, calibration, key, update):
        """Atomically replace the state under ``key`` by ``update(old)`` (bytes or None).

        ``update`` returns ``(new_state, result)``; ``new_state=None`` keeps
        the old state. Returns ``result``.
        """
        def body(conn):
            row = conn.execute("SELECT state FROM skfedpriv_site_ledger WHERE site = ? AND key = ?",
                               (site, key)).fetchone()
            new, result = update(None if row is None else bytes(row[0]))
            if new is not None:
                conn.execute("INSERT OR REPLACE INTO skfedpriv_site_ledger (site, key, state) "
                             "VALUES (?, ?, ?)", (site, key, sqlite3.Binary(new)))
            return result
        return self._transaction(site, calibration, body)

    def counts(self, site):
        """``{key: used}`` of one site (empty if the file or the site is new)."""
        if not os.path.exists(self.path):
            return {}
        conn = sqlite3.connect(self.path, timeout=60.0)
        try:
            rows = conn.execute("SELECT key, used FROM skfedpriv_site_ledger "
                                "WHERE site = ? AND used IS NOT NULL", (site,)).fetchall()
        except sqlite3.OperationalError:  # no tables yet
            return {}
        finally:
            conn.close()
        return {k: int(v) for k, v in rows}

    def __repr__(self):
        return f"SiteLedgerFile({self.path!r})"


def _ledger_file(ledger_path):
    return None if ledger_path is None else SiteLedgerFile(ledger_path)


#: The checks of :class:`SitePrivacy`: those of the estimator's parameters of
#: the same names, with ``delta > 0`` and ``clip_norm`` required; the seed an
#: integer (it must survive processes).
#: What a site's privacy settings need to survive processes: an integer seed
#: (or None) and a ledger file path (or None).
_PROCESS_SAFE_CONSTRAINTS = {
    "random_state": [Interval(numbers.Integral, 0, None), None],
    "ledger_path": [str, os.PathLike, None],
}

_SITE_PRIVACY_CONSTRAINTS = {
    **{name: DWD_CONSTRAINTS[name]
       for name in ("epsilon", "q", "online_steps", "fit_intercept", "calibration")},
    "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
    "clip_norm": [Interval(numbers.Real, 0, None, closed="neither")],
    **_PROCESS_SAFE_CONSTRAINTS,
}


class SitePrivacy:
    """Site-local Gaussian privacy of ``DWDClassifier(mechanism='local-gaussian')``.

    The parameters must equal the server estimator's (``q``,
    ``online_steps``, ``fit_intercept`` enter the noise calibration); the
    server checks that the noise scale each site reports is the one it
    expects and stops otherwise.

    Parameters
    ----------
    epsilon, delta : float
        The guarantee for each row of this site over the whole stream.
    clip_norm : float
        Bound enforced on ``‖(1, x)‖₂`` (``‖x‖₂`` without intercept).
    q : float, default=1.0
    online_steps : int, default=10
    fit_intercept : bool, default=True
    calibration : {'analytic', 'classic', 'zcdp'}, default='analytic'
    random_state : int or None, default=None
        Seed of this site's noise; ``None`` draws OS entropy for every
        release. Keep it secret from the server: whoever knows it can
        subtract the noise. An integer is for reproducible experiments.
    ledger_path : str or path-like or None, default=None
        Where the site counts its releases. ``None``: in the ledger dict the
        caller keeps (Flower: the run's ``context.state``), so a new Flower
        run starts from zero. A path: in a :class:`SiteLedgerFile` at the
        site, so the counts hold across Flower runs and concurrent
        processes, and a batch whose calibrated releases are used up is
        refused in every later run.
    """

    def __init__(self, epsilon, delta, clip_norm, *, q=1.0, online_steps=10,
                 fit_intercept=True, calibration="analytic", random_state=None,
                 ledger_path=None):
        validate_parameters(_SITE_PRIVACY_CONSTRAINTS, dict(
            epsilon=epsilon, delta=delta, clip_norm=clip_norm, q=q, online_steps=online_steps,
            fit_intercept=fit_intercept, calibration=calibration, random_state=random_state,
            ledger_path=ledger_path), "SitePrivacy")
        check_augmented_clip_norm(clip_norm, fit_intercept)
        self.epsilon, self.delta, self.clip_norm = float(epsilon), float(delta), float(clip_norm)
        self.q, self.online_steps = float(q), int(online_steps)
        self.fit_intercept, self.calibration = bool(fit_intercept), calibration
        self.random_state = random_state
        self.ledger_file = _ledger_file(ledger_path)

    @classmethod
    def from_estimator(cls, estimator, random_state=None, ledger_path=None):
        """The site parameters matching a ``DWDClassifier(mechanism='local-gaussian')``."""
        if estimator.mechanism != "local-gaussian":
            raise ValueError("only mechanism='local-gaussian' runs its noise at the sites.")
        return cls(
            estimator.epsilon, estimator.delta, estimator.clip_norm, q=estimator.q,
            online_steps=estimator.online_steps, fit_intercept=estimator.fit_intercept,
            calibration=estimator.calibration, random_state=random_state,
            ledger_path=ledger_path,
        )

    def calibration_key(self):
        """The parameters that fix the noise and the release caps (as text)."""
        return repr(("dwd-local-gaussian", self.epsilon, self.delta, self.clip_norm, self.q,
                     self.online_steps, self.fit_intercept, self.calibration))

    def unit_sigma(self, n_models, first):
        releases = local_gaussian_releases(n_models, self.online_steps, first)
        return local_gaussian_sigma(self.epsilon, self.delta, releases, self.calibration)

    def release_cap(self, n_models, first):
        return local_gaussian_releases(n_models, self.online_steps, first)


def _as_labels(values):
    return np.asarray(list(values))


class _Site:
    """What every site shares: its rows, its name, the protocol check."""

    privacy_type = None

    def __init__(self, load_batch, privacy=None, name="site"):
        if privacy is not None and not isinstance(privacy, self.privacy_type):
            raise TypeError(f"privacy must be a {self.privacy_type.__name__} or None.")
        self.load_batch = load_batch
        self.privacy = privacy
        self.name = str(name)

    def _rows(self, batch):
        loaded = self.load_batch(int(batch))
        X, y = np.asarray(loaded[0], dtype=np.float64), np.asarray(loaded[1])
        w = np.ones(len(y)) if len(loaded) < 3 or loaded[2] is None else np.asarray(loaded[2], dtype=float)
        if X.ndim != 2 or y.ndim != 1 or len(y) != X.shape[0] or w.shape != y.shape:
            raise ValueError("load_batch must return X of shape (n, p), y and sample_weight of shape (n,).")
        if not np.all(np.isfinite(X)) or not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("X and sample_weight must be finite, sample_weight >= 0.")
        return X, y, w

    @staticmethod
    def _check_protocol(request):
        if int(request.get("protocol", -1)) != PROTOCOL_VERSION:
            raise ValueError(f"protocol version {request.get('protocol')!r} is not {PROTOCOL_VERSION}.")

    def _check_labels(self, y, classes):
        unseen = np.setdiff1d(np.unique(y), classes)
        if unseen.size:
            raise ValueError(f"site {self.name}: labels {unseen!r} are not in classes {classes!r}.")


class DWDSite(_Site):
    """One site: its rows and its answers to the server.

    Parameters
    ----------
    load_batch : callable ``batch -> (X, y)`` or ``(X, y, sample_weight)``
        The site's rows of batch ``batch`` (0 for ``fit``, 0, 1, ... for a
        stream). Called on every request (a Flower client process lives for
        one message), so it should be cheap (e.g. ``numpy.load``).
    privacy : SitePrivacy or None
        None: the site trusts the server with raw sums.
    name : str
        The site's name (replies are summed in order of names).
    """

    privacy_type = SitePrivacy

    # -- rows -----------------------------------------------------------------

    def _prepared(self, request):
        """Rows as the summaries need them: targets, weights, clipped rows."""
        X, y, w = self._rows(request["batch"])
        classes = _as_labels(request["classes"])
        self._check_labels(y, classes)
        fit_intercept = bool(request["fit_intercept"])
        clip_norm = request.get("clip_norm")  # Algorithm 2 on a trusted server: clip here
        if self.privacy is not None:
            if fit_intercept != self.privacy.fit_intercept:
                raise ValueError("server and site disagree on fit_intercept.")
            clip_norm = self.privacy.clip_norm  # the site's own bound
        X, Y, w = prepare_rows(X, y, w, classes, fit_intercept=fit_intercept,
                               class_weight=request.get("class_weight"), clip_norm=clip_norm)
        return X, Y, w, fit_intercept

    # -- requests -------------------------------------------------------------

    def handle(self, request, ledger):
        """Answer one request.

        Parameters
        ----------
        request : dict
            ``op`` and its arguments (see :mod:`skfedpriv.flower`).
        ledger : dict
            The site's release counts, kept between requests by the caller
            (Flower: the client's ``context.state``); updated in place.

        Returns
        -------
        reply : dict of arrays and scalars
        """
        op = request.get("op")
        self._check_protocol(request)
        reply = {"site": self.name}
        if op == "describe":
            X, y, w = self._rows(request["batch"])
            reply.update(n_rows=int(len(y)), n_features=int(X.shape[1]),
                         private=self.privacy is not None)
            if self.privacy is None:  # a private site's label set is not released
                reply["labels"] = np.unique(y).tolist()
            return reply
        X, Y, w, fit_intercept = self._prepared(request)
        if op == "prepare":
            reply.update(weight_sum=float(w.sum()))  # a row count when private (weights are 1)
            if self.privacy is None:
                # which sides of each model its rows are on: a function of single
                # labels (the only row of a class flips it), so never sent by a
                # private site; the private updates do not read it
                has_positive, has_negative = side_flags(Y, w)
                reply.update(has_positive=has_positive.tolist(),
                             has_negative=has_negative.tolist())
            return reply
        if op == "noised":
            return self._noised(request, X, Y, w, fit_intercept, ledger, reply)
        if self.privacy is not None:
            raise PermissionError(
                f"site {self.name} is private: it sends noised summaries only, not {op!r}."
            )
        if op == "summary":
            theta, q = np.asarray(request["theta"], dtype=float), float(request["q"])
            scores = _scores(X, theta, fit_intercept)  # one pass, for every sum below
            loss, grad, curvature = site_summary(
                X, Y, w, theta, q, fit_intercept,
                np.asarray(request["with_curvature"], dtype=bool), scores=scores,
            )
            reply.update(loss=loss, grad=grad)
            if curvature is not None:
                reply["curvature"] = curvature
            if request.get("exact_curvature"):
                # every model's matrix on V_q'' itself (the server's cache)
                reply["exact_curvature"] = _site_curvature(X, Y, w, scores, q, fit_intercept,
                                                           exact=True)
            return reply
        if op == "gram":
            reply["gram"] = augmented_gram(X, w, fit_intercept)
            return reply
        theta, q = np.asarray(request["theta"], dtype=float), float(request["q"])
        if op == "curvature_product":
            exact = request.get("exact")
            reply["value"] = site_curvature_product(
                X, Y, w, theta, np.asarray(request["v"], dtype=float), q, fit_intercept,
                exact=None if exact is None else np.asarray(exact, dtype=bool))
            return reply
        if op == "line_losses":
            reply["value"] = site_line_losses(
                X, Y, w, theta, np.asarray(request["s"], dtype=float),
                [float(t) for t in request["steps"]], q, fit_intercept)
            return reply
        raise ValueError(f"unknown request {op!r}.")

    def _noised(self, request, X, Y, w, fit_intercept, ledger, reply):
        privacy = self.privacy
        if privacy is None:
            raise ValueError(f"site {self.name} has no SitePrivacy to draw noise with.")
        if float(request["q"]) != privacy.q:
            raise ValueError("server and site disagree on q.")
        batch, kind = int(request["batch"]), request["kind"]
        n_models = Y.shape[1]
        first = batch == 0
        p1 = X.shape[1] + int(fit_intercept)
        sigma = privacy.unit_sigma(n_models, first)
        if kind not in SUMMARY_KINDS:
            raise ValueError(f"unknown noised summary {kind!r}.")
        cost = 1 if kind == "gram" else n_models
        if kind == "gram" and not first:
            raise PermissionError("the Gram matrix is released in the first batch only.")
        key = f"releases-{batch}"
        cap = privacy.release_cap(n_models, first)
        if privacy.ledger_file is not None:  # counted in the file, across runs and processes
            used = privacy.ledger_file.charge(self.name, privacy.calibration_key(), key, cost, cap)
        else:
            used = int(ledger.get(key, 0))
            if used + cost > cap:
                raise PermissionError(
                    f"site {self.name}: batch {batch} has used {used} of its "
                    f"{cap} calibrated releases; refusing more."
                )
            ledger[key] = used + cost  # counted before the value is computed
        rng = np.random.default_rng(
            None if privacy.random_state is None else [privacy.random_state, batch, used]
        )
        Theta = np.asarray(request["theta"], dtype=float)
        std = sigma * summary_sensitivity(kind, privacy.q, privacy.clip_norm)
        if kind == "gram":
            value = augmented_gram(X, w, fit_intercept)
        else:
            _, grad, curvature = site_summary(X, Y, w, Theta, privacy.q, fit_intercept,
                                              kind == "curvature")
            value = grad if kind == "gradient" else curvature
        value = value + site_noise(kind, std, p1, n_models, rng)
        reply.update(value=value, std=float(std))
        return reply


# -- the logistic protocol (Algorithm 1 of the correlated-noise paper) -----------

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
    (:class:`~skfedpriv.privacy._gradient_noise.LearnerNoise`). It refuses
    a server whose hyperparameters differ from these (the calibration and
    the sensitivity ``2 B_g / τ`` depend on them).

    Parameters
    ----------
    mechanism : {'independent', 'tree', 'honaker', 'toeplitz', 'optimal', 'blt'}
    epsilon, delta : float
    n_rounds, local_steps, learning_rate, clip_norm, feature_clip_norm, alpha, fit_intercept
        As in :class:`~skfedpriv.LogisticRegression` (same defaults).
    random_state : int or None, default=None
        Seed of this learner's noise stream; ``None`` draws OS entropy once,
        when the learner joins (the generator then lives in the learner's
        state). Keep it secret from the server: whoever knows it can
        subtract the noise. An integer is for reproducible experiments.
    ledger_path : str or path-like or None, default=None
        Where the learner keeps its state (noise stream, pending increments,
        next round). ``None``: in the state dict the caller keeps (Flower:
        the run's ``context.state``), so a new Flower run starts a new
        stream. A path: in a :class:`SiteLedgerFile` at the learner, so the
        stream and its round counter hold across Flower runs and concurrent
        processes (a later run cannot restart round 0). The file then holds
        the noise stream: keep it at the learner.

    Attributes
    ----------
    settings : LogisticSettings
        The validated parameters (``learning_rate`` resolved).
    factorization : PrefixSumFactorization
    noise_scale : float
        σ of each entry of the learner's draws.
    """

    def __init__(self, mechanism, epsilon, delta, *, n_rounds=100, local_steps=5,
                 learning_rate="auto", clip_norm=1.0, feature_clip_norm=None, alpha=0.0,
                 fit_intercept=True, random_state=None, ledger_path=None):
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
        self.ledger_file = _ledger_file(ledger_path)

    @classmethod
    def from_estimator(cls, estimator, random_state=None, ledger_path=None):
        """The learner parameters matching a private ``LogisticRegression``."""
        values = estimator.get_params()
        return cls(**{k: values[k] for k in LOGISTIC_PARAMS}, random_state=random_state,
                   ledger_path=ledger_path)

    def calibration_key(self):
        """The parameters that fix the noise stream (as text)."""
        return repr(("logistic", sorted(_learner_view(self.settings).items()), self.noise_scale))


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
    and ``round`` (the global model ``theta``, the round index, the classes
    and the estimator's hyperparameters ``param-*``). A private learner
    keeps, in its state (``ledger``), its noise stream, the increments of
    the rounds it missed and the next round index, and answers each round
    once, in order.
    """

    privacy_type = LearnerPrivacy

    def handle(self, request, ledger):
        """Answer one request (``ledger``: the learner's state, updated in place)."""
        self._check_protocol(request)
        op = request.get("op")
        reply = {"site": self.name}
        if op == "describe":
            batches = request.get("batches", [request.get("batch", 0)])
            n_features = set()
            labels = set()
            for batch in batches:
                X, y, _ = self._rows(batch)
                n_features.add(int(X.shape[1]))
                labels.update(np.unique(y).tolist())
            if len(n_features) != 1:
                raise ValueError(f"site {self.name}: batches differ in their feature counts.")
            reply.update(n_features=n_features.pop(), private=self.privacy is not None)
            if self.privacy is None:  # a private learner keeps even its label set
                reply["labels"] = sorted(labels, key=lambda v: (str(type(v)), v))
            return reply
        if op == "round":
            return self._round(request, ledger, reply)
        raise ValueError(f"unknown request {op!r} (site {self.name} runs the logistic protocol).")

    def _round(self, request, ledger, reply):
        privacy = self.privacy
        settings = _settings_from_request(request)
        if privacy is None:
            if settings.mechanism is not None:
                raise ValueError(f"site {self.name} has no LearnerPrivacy to draw noise with.")
        else:
            mine, theirs = _learner_view(privacy.settings), _learner_view(settings)
            if mine != theirs:
                differ = sorted(k for k in mine if mine[k] != theirs.get(k))
                raise ValueError(f"site {self.name}: server and learner disagree on {differ}.")
            settings = privacy.settings
        classes = _as_labels(request["classes"])
        X, y, w = self._rows(request["batch"])
        if not np.all(w == 1.0):
            raise ValueError("the logistic protocol has no sample weights.")
        self._check_labels(y, classes)
        theta = np.asarray(request["theta"], dtype=float)
        n_models = count_models(classes)
        p = X.shape[1] + int(settings.fit_intercept)
        if theta.shape != (n_models, p):
            raise ValueError(f"site {self.name}: model of shape {theta.shape}, expected {(n_models, p)}.")
        d = n_models * p
        present = len(y) > 0
        # lines 4-10: τ clipped local steps from x^r, then g_i^r
        _, messages = learner_messages(theta, X, y, np.zeros(len(y), dtype=np.intp), classes, settings)
        reply["present"] = present
        if privacy is None:
            if present:
                reply["message"] = messages[0]
            return reply
        # lines 11-12 with the learner's own stream
        r = int(request["round"])

        def advance(saved):
            """(new saved state or None, (joined, message or None)) for round r."""
            state = pickle.loads(saved) if saved is not None else None
            if state is None and not present:
                return None, (False, None)  # not joined yet: no stream, nothing sent
            if state is None:  # joins now: a fresh stream, first increment this round
                noise = LearnerNoise(privacy.factorization, privacy.noise_scale, d,
                                     np.random.default_rng(privacy.random_state))
                state = dict(next_round=r, noise=noise)
            elif r != state["next_round"]:
                raise PermissionError(
                    f"site {self.name}: asked for round {r}, its next round is {state['next_round']}; "
                    "every round is answered once, in order."
                )
            if state["noise"].size != d:
                raise ValueError(f"site {self.name}: the model changed shape within a stream.")
            noised = state["noise"].add([self.name] if present else [], messages)  # raises past n_rounds
            state.update(next_round=r + 1)
            return pickle.dumps(state), (True, noised[0] if present else None)  # kept before the message leaves

        if privacy.ledger_file is not None:  # one transaction: read, advance, store
            joined, message = privacy.ledger_file.update_state(
                self.name, privacy.calibration_key(), _LEARNER_STATE, advance)
        else:
            saved, (joined, message) = advance(ledger.get(_LEARNER_STATE))
            if saved is not None:
                ledger[_LEARNER_STATE] = saved
        if not joined:
            return reply
        if message is not None:
            reply["message"] = message
        reply["std"] = privacy.noise_scale
        return reply
