"""The server side of the federated protocols (no Flower import).

:class:`RemoteSites` implements the sites interface of
:class:`~skfedpriv.DWDClassifier` (:class:`~skfedpriv.linear_model.DWDSites`,
as the in-process ``SiteData`` does): each request goes to every site
through a *transport* and the replies are added up.
:func:`federated_fit` and :func:`federated_partial_fit` are thin drivers:
they build the :class:`RemoteSites` of a batch and call the estimator's
public ``fit_sites`` / ``partial_fit_sites``, which run the same update as
``fit`` / ``partial_fit``.

A transport is any callable ``request (dict) -> list of reply dicts`` (one
per site). :class:`LocalTransport` calls :class:`DWDSite` objects in this
process; the Flower server app sends each request as a Flower message.

The same functions fit a :class:`~skfedpriv.LogisticRegression` on
:class:`~skfedpriv.federated.LogisticSite` learners: :class:`RemoteLearners`
implements the estimator's declared learners interface
(:class:`~skfedpriv.linear_model.LogisticLearners`) over the transport, and
the estimator runs its own rounds on it
(:meth:`~skfedpriv.LogisticRegression.fit_sites`,
:meth:`~skfedpriv.LogisticRegression.partial_fit_sites`): each round it
sends the global model, every learner present replies with its (noised)
``g_i^r``, and the estimator averages them and moves the model.
"""


import numpy as np

from .._loss import as_loss
from .._losses import count_models
from ..linear_model._dwd_sites import DWDSites
from ..linear_model._inference_sites import InferenceSummary
from ..linear_model._local_steps import LogisticLearners
from ..linear_model._second_order import smoothing_widths
from ..linear_model._logistic import LogisticRegression
from ._learner import logistic_request_params
from ._loss_message import loss_entries
from ._site import PROTOCOL_VERSION


class LocalTransport:
    """Send each request to site objects (:class:`DWDSite`, :class:`LogisticSite`) in this process.

    Keeps nothing of the exchanges. A private site keeps its state (release
    counts, noise stream) in its own ledger file, not here.
    """

    def __init__(self, sites):
        self.sites = list(sites)

    def __call__(self, request):
        return [site.handle(dict(request)) for site in self.sites]


def _ask(transport, request):
    """The sites' replies to ``request``, in order of site names."""
    replies = transport(request)
    names = [r["site"] for r in replies]
    if len(set(names)) != len(names):
        raise RuntimeError(f"two sites share a name: {names!r}")
    return sorted(replies, key=lambda r: r["site"])  # fixed summation order


class RemoteSites(DWDSites):
    """The sites of one batch, reached through a transport (a :class:`DWDSites`).

    Built before the estimator is involved: it asks the sites to describe
    their rows of batch ``batch`` (features, and labels unless private).
    :meth:`~skfedpriv.DWDClassifier.fit_sites` then prepares it and sends
    every summary request through the transport.

    Parameters
    ----------
    transport : callable
        ``request (dict) -> list of reply dicts`` (one per site).
    batch : int
    cache : bool, default=True
        Without a privacy mechanism: ask for the curvature with every
        summary (smoothed, and with ``V_q''`` itself for Newton's local
        phase: ``2 (p+1)²`` numbers per model) and answer the next request
        at the same point from it (curvature-vector products of ``fit``
        formed by the server, no round trip). A ``partial_fit`` takes the same rounds either way
        (each renewable step is one summary request), so for a stream
        ``cache=False`` sends less. Always off under a mechanism
        (``prepare`` with a ``clip_norm``), where every release counts.

    Attributes
    ----------
    rounds : int
        Requests sent after ``prepare`` (each one message to every site and
        one reply), as ``SiteData`` counts them in process.
    n_requests : int
        ``rounds`` plus the ``prepare`` request.

    Every request names the loss by its registry spec
    (:mod:`~skfedpriv.federated._loss_message`): a non-private
    :class:`DWDSite` computes the summaries of any margin loss of
    :data:`~skfedpriv._loss.LOSSES`; a private one only its own genDWD loss.
    """

    speaks_loss_objects = True

    def __init__(self, transport, batch, *, cache=True):
        self.transport = transport
        self.batch = int(batch)
        self._cache_wanted = bool(cache)
        self._cache = None
        replies = _ask(transport, {"protocol": PROTOCOL_VERSION, "op": "describe",
                                   "batch": self.batch})
        n_features = {int(r["n_features"]) for r in replies}
        if len(n_features) != 1:
            raise ValueError(f"sites disagree on the number of features: {sorted(n_features)}")
        self.n_features = n_features.pop()
        self._labels = None if any("labels" not in r for r in replies) else [
            label for r in replies for label in r["labels"]]
        self.site_names = [r["site"] for r in replies]
        self.n_sites = len(replies)
        self.rounds = self.floats_sent = 0
        # every site holds its own 'local-tree' / 'local-blt' stream
        self.holds_noise_streams = all(r.get("holds_noise_stream") for r in replies)
        # 'local-gaussian' needs every site to noise its own summaries
        self.noises_summaries = all(r.get("private") and not r.get("holds_noise_stream")
                                    for r in replies)
        # the inference summary and the correction's moments are raw sums:
        # non-private sites only
        self.offers_inference = self.offers_second_order = not any(
            r.get("private") for r in replies)

    def labels(self):
        """The sites' labels, or None when a site is private (it does not
        release its label set)."""
        return self._labels

    def prepare(self, classes, *, fit_intercept, class_weight=None, clip_norm=None):
        """Send the batch's settings to the sites; they reply with their
        weight sums and, unless private, which sides their rows are on."""
        self.fit_intercept = bool(fit_intercept)
        self._base = {
            "protocol": PROTOCOL_VERSION, "batch": self.batch,
            "classes": np.asarray(classes).tolist(), "fit_intercept": self.fit_intercept,
        }
        if class_weight is not None:
            self._base["class_weight"] = [float(v) for v in class_weight]
        if clip_norm is not None:
            self._base["clip_norm"] = float(clip_norm)
        self._cache = {} if self._cache_wanted and clip_norm is None else None
        replies = self._ask(op="prepare")
        self.weight_sum = float(sum(r["weight_sum"] for r in replies))
        n_models = count_models(classes)
        if any("has_positive" not in r for r in replies):
            # private sites do not say which sides their rows are on
            self.two_sided = np.ones(n_models, dtype=bool)
            return
        has_positive = np.any([r["has_positive"] for r in replies], axis=0)
        has_negative = np.any([r["has_negative"] for r in replies], axis=0)
        self.two_sided = has_positive & has_negative

    @property
    def n_requests(self):
        return self.rounds + 1 if hasattr(self, "weight_sum") else 0

    def _ask(self, **request):
        """Every site's reply to one request of this batch; counted as a round
        (``prepare`` excepted) with the numbers one site sent back."""
        replies = _ask(self.transport, {**self._base, **request})
        if request["op"] != "prepare":
            self.rounds += 1
            self.floats_sent += sum(int(np.size(v)) for k, v in replies[0].items()
                                    if k not in ("site", "std"))
        return replies

    def summaries(self, Theta, loss, with_curvature):
        """Sum of the sites' summaries at ``Theta`` (loss, gradient, and the
        curvature of every model, or of the models flagged in
        ``with_curvature``)."""
        flags = np.broadcast_to(np.asarray(with_curvature, dtype=bool), Theta.shape[1:])
        loss = as_loss(loss)
        cached = self._cached(Theta, loss)
        if cached is None:
            # with the cache every model's curvature comes along, smoothed and
            # V_q'' itself (the products of either kind then cost no round);
            # else only the models flagged
            ask = True if self._cache is not None or flags.all() else (
                np.asarray(flags, dtype=float) if flags.any() else False)
            request = dict(op="summary", theta=np.asarray(Theta, dtype=float),
                           with_curvature=ask, **loss_entries(loss))
            if self._cache is not None:
                request["exact_curvature"] = True
            replies = self._ask(**request)
            total = sum(np.asarray(r["loss"]) for r in replies)
            grad = sum(np.asarray(r["grad"]) for r in replies)
            curvature = (sum(np.asarray(r["curvature"]) for r in replies)
                         if "curvature" in replies[0] else None)
            if self._cache is None:
                return total, grad, curvature
            exact = sum(np.asarray(r["exact_curvature"]) for r in replies)
            cached = (total, grad, curvature, exact)
            self._cache = {self._key(Theta, loss): cached}
        return cached[0], cached[1], cached[2][flags] if flags.any() else None

    @staticmethod
    def _key(Theta, loss):
        return (np.asarray(Theta, dtype=float).tobytes(), Theta.shape, loss)

    def _cached(self, Theta, loss):
        """The summaries (curvature included) at ``Theta``, if cached."""
        if self._cache is None:
            return None
        return self._cache.get(self._key(Theta, as_loss(loss)))

    def gram(self):
        """``Σ_i w_i x̄_i x̄_iᵀ``: the sum of the sites' Gram matrices (one
        ``gram`` request)."""
        return sum(np.asarray(r["gram"], dtype=float) for r in self._ask(op="gram"))

    def majorizer(self, loss):
        """``c Σ_i w_i x̄_i x̄_iᵀ`` from the sites' Gram matrices, ``c`` the
        loss's ``curvature_bound``."""
        return as_loss(loss).curvature_bound * self.gram()

    def line_losses(self, Theta, S, steps, loss):
        """Summed losses at ``Theta + t S`` for each ``t`` in ``steps``, one round.

        With the cache, a single step is asked as a full summary: if the
        step is taken, the next request (at that point) needs no round.
        """
        steps = [float(t) for t in steps]
        if self._cache is not None and len(steps) == 1:
            return np.array([self.summaries(Theta + steps[0] * S, loss, False)[0]])
        replies = self._ask(op="line_losses", theta=np.asarray(Theta, dtype=float),
                            s=np.asarray(S, dtype=float), steps=steps, **loss_entries(loss))
        return sum(np.asarray(r["value"]) for r in replies)

    def curvature_product(self, Theta, V, loss, exact=None):
        """Summed curvature-vector products at ``Theta`` (``V_q''`` itself for
        the models in ``exact``), one round (none when the curvature at
        ``Theta`` is cached)."""
        exact = np.zeros(V.shape[1], dtype=bool) if exact is None else np.asarray(exact, bool)
        cached = self._cached(Theta, loss)
        if cached is not None:
            matrices = np.where(exact[:, None, None], cached[3], cached[2])
            return np.einsum("kij,jk->ik", matrices, V)
        request = dict(op="curvature_product", theta=np.asarray(Theta, dtype=float),
                       v=np.asarray(V, dtype=float), **loss_entries(loss))
        if exact.any():
            request["exact"] = exact.astype(float)
        replies = self._ask(**request)
        return sum(np.asarray(r["value"]) for r in replies)

    def noised_summary(self, kind, Theta, loss, std, random_state=None):
        """Sum of the sites' noised summaries (each site draws its own noise,
        ``random_state`` is not used).

        Every site reports the noise std it used, computed from its own
        privacy parameters; it must be the ``std`` the server's
        post-processing assumes.
        """
        replies = self._ask(op="noised", kind=kind, theta=np.asarray(Theta, dtype=float),
                            **loss_entries(loss))
        for r in replies:
            if not np.isclose(float(r["std"]), std, rtol=1e-9, atol=0.0):
                raise RuntimeError(
                    f"site {r['site']} adds noise of std {float(r['std']):.6g} to its {kind}, "
                    f"the server expects {std:.6g}: site and server privacy parameters differ."
                )
        return sum(np.asarray(r["value"]) for r in replies)


    def continual_summary(self, Theta, q, noise, step):
        """Sum of the sites' releases of step ``step`` (batch ``step`` of every
        site): each site's ``(a_b, J_b)`` at ``Theta`` plus its own stream's
        increment (:class:`~skfedpriv.federated.ContinualSitePrivacy`).

        The request names the stream the server's post-processing assumes
        (factorization, horizon, σ); a site whose own differ refuses, and a
        reply naming another σ is refused here.
        """
        if int(step) != self.batch:
            raise ValueError(
                f"step {step} of a 'local-tree' / 'local-blt' stream reads batch {step} of "
                f"every site (its own schedule), not batch {self.batch}.")
        replies = self._ask(op="continual", theta=np.asarray(Theta, dtype=float),
                            n_batches=int(noise.factorization.n_rounds),
                            factorization=repr(noise.factorization), sigma=float(noise.sigma),
                            **loss_entries(q))
        for r in replies:
            if not np.isclose(float(r["sigma"]), noise.sigma, rtol=1e-9, atol=0.0):
                raise RuntimeError(
                    f"site {r['site']} draws its stream with sigma {float(r['sigma']):.6g}, the "
                    f"server expects {noise.sigma:.6g}: site and server privacy parameters differ.")
        return (sum(np.asarray(r["linear"], dtype=float) for r in replies),
                sum(np.asarray(r["curvature"], dtype=float) for r in replies))

    def inference_summary(self, Theta, derivative, curvature):
        """Summed :class:`~skfedpriv.linear_model._inference_sites.InferenceSummary`
        of the sites at ``Theta`` (non-private sites only: raw sums).

        ``derivative`` and ``curvature`` are the bound methods of a loss of
        the registry (the request names the loss, the sites rebuild it).
        """
        loss = getattr(derivative, "__self__", None)
        if loss is None or getattr(curvature, "__self__", None) is not loss or (
                derivative != loss.derivative or curvature != loss.curvature):
            raise ValueError("remote sites compute the inference summary of a registry loss: "
                             "pass its derivative and curvature methods.")
        if not self.offers_inference:
            raise NotImplementedError(
                "private remote sites send no inference summary (it is a raw sum).")
        replies = self._ask(op="inference_summary", theta=np.asarray(Theta, dtype=float),
                            **loss_entries(loss))
        total = None
        for r in replies:
            part = InferenceSummary(*(np.asarray(r[k], dtype=float) for k in _INFERENCE_FIELDS))
            total = part if total is None else total + part
        return total


    def second_order_summary(self, Theta, cov, loss):
        """The batch's summed moments of the second-order correction
        (:meth:`~skfedpriv.linear_model.DWDSites.second_order_summary`;
        non-private sites only: raw sums). Two requests: ``gram`` (the
        batch's Gram matrix, for the smoothing widths), then
        ``second_order_summary`` at ``Theta`` with those widths."""
        if not self.offers_second_order:
            raise NotImplementedError(
                "private remote sites send no second-order moments (raw sums).")
        widths = smoothing_widths(self.gram(), np.asarray(cov, dtype=float), self.weight_sum)
        replies = self._ask(op="second_order_summary", theta=np.asarray(Theta, dtype=float),
                            widths=widths, **loss_entries(loss))
        return tuple(sum(np.asarray(r[k], dtype=float) for r in replies)
                     for k in SECOND_ORDER_FIELDS)


#: The reply entries of ``inference_summary``, in :class:`InferenceSummary`'s order.
_INFERENCE_FIELDS = ("curvature", "score_outer", "score_sum", "weight_sq_sum")
#: The reply entries of ``second_order_summary``, in
#: :func:`~skfedpriv.linear_model._second_order.site_second_order_moments`' order.
SECOND_ORDER_FIELDS = ("third", "outer_derivative", "fourth")


def runs_on_summary_sites(estimator):
    """Whether ``estimator`` fits on summary sites (:class:`DWDSite` behind
    :class:`RemoteSites`): a ``DWDClassifier``, or a ``LogisticRegression``
    with ``solver='newton'``; else (``'auto'``, ``'local-steps'``) on
    :class:`LogisticSite` learners (:class:`RemoteLearners`)."""
    return not isinstance(estimator, LogisticRegression) or estimator.solver == "newton"


def federated_fit(estimator, transport, batch=0, classes=None):
    """``estimator.fit`` on rows that stay at the sites.

    ``DWDClassifier`` and ``LogisticRegression(solver='newton')``: their
    ``fit_sites`` on the :class:`RemoteSites` of batch ``batch`` (the sites,
    :class:`DWDSite`, compute every sum over rows of the estimator's loss;
    ``n_requests_`` records the requests it took). Another
    ``LogisticRegression``: a new stream of ``n_rounds`` rounds on
    :class:`LogisticSite` learners, round ``r`` on batch ``batch + r`` of
    every learner (as ``fit`` splits each learner's rows into ``n_rounds``
    blocks). ``classes`` (default: the labels the sites report) is required
    when a site or learner is private: it does not report its labels.
    Returns the fitted estimator.
    """
    if not runs_on_summary_sites(estimator):
        return _logistic_fit(estimator, transport, batch, classes)
    return _on_remote_sites(estimator, transport, batch, classes, new_stream=True)


def federated_partial_fit(estimator, transport, batch, classes=None):
    """``estimator.partial_fit`` on batch ``batch`` held at the sites.

    On summary sites (:func:`runs_on_summary_sites`): ``partial_fit_sites``
    on the :class:`RemoteSites` of the batch. On learners
    (``LogisticRegression`` of the local-steps protocol): one communication
    round on batch ``batch``.
    """
    if not runs_on_summary_sites(estimator):
        return _logistic_partial_fit(estimator, transport, batch, classes)
    return _on_remote_sites(estimator, transport, batch, classes, new_stream=False)


def _on_remote_sites(estimator, transport, batch, classes, *, new_stream):
    """``fit_sites`` (new stream) or ``partial_fit_sites`` on the batch's
    :class:`RemoteSites`; ``n_requests_`` records the requests it took."""
    sites = RemoteSites(transport, batch)
    fit = estimator.fit_sites if new_stream else estimator.partial_fit_sites
    fit(sites, classes=classes)
    estimator.n_requests_ = sites.n_requests
    return estimator


# -- the logistic protocol ------------------------------------------------------


class RemoteLearners(LogisticLearners):
    """The learners of a :class:`~skfedpriv.LogisticRegression`, reached through a transport.

    Each :class:`~skfedpriv.federated.LogisticSite` runs its local steps and,
    with a :class:`~skfedpriv.federated.LearnerPrivacy`, adds the increments of
    its own noise stream (``holds_noise``): the server never holds noise.

    Parameters
    ----------
    transport : callable
    batch : int, default=0
        Batch of the first round asked; round ``k`` of the call asks batch
        ``batch + k``.
    """

    holds_noise = True

    def __init__(self, transport, batch=0):
        self.transport = transport
        self.batch = int(batch)

    def describe(self, n_rounds):
        replies = _ask(self.transport, {
            "protocol": PROTOCOL_VERSION, "op": "describe",
            "batches": [self.batch + k for k in range(int(n_rounds))],
        })
        n_features = {int(r["n_features"]) for r in replies}
        if len(n_features) != 1:
            raise ValueError(f"sites disagree on the number of features: {sorted(n_features)}")
        private = any(r.get("private") for r in replies)  # private learners keep their labels
        labels = None if private else [label for r in replies for label in r["labels"]]
        return n_features.pop(), labels

    def local_updates(self, request):
        """Send ``x^r``; return the present learners' names and messages (in name order)."""
        theta = request.theta
        d = theta.size
        replies = _ask(self.transport, {
            "protocol": PROTOCOL_VERSION, "op": "round", "batch": self.batch + request.step,
            "round": int(request.index), "theta": theta, "classes": request.classes.tolist(),
            **logistic_request_params(request.settings),
        })
        private = request.settings.mechanism is not None
        for r in replies:
            if private and "std" not in r and r["present"]:
                raise RuntimeError(f"site {r['site']} sent no noise std: it is not private.")
            if private and "std" in r and not np.isclose(float(r["std"]), request.noise_scale,
                                                         rtol=1e-9, atol=0.0):
                raise RuntimeError(
                    f"site {r['site']} adds noise of std {float(r['std']):.6g}, the server expects "
                    f"{request.noise_scale:.6g}: learner and server privacy parameters differ."
                )
        present = [r for r in replies if r["present"]]
        messages = np.zeros((len(present), d))
        for row, r in enumerate(present):
            message = np.asarray(r["message"], dtype=float).reshape(-1)
            if message.shape != (d,) or not np.all(np.isfinite(message)):
                raise RuntimeError(f"site {r['site']} sent a message of shape {message.shape}, not ({d},).")
            messages[row] = message
        labels = np.empty(len(present), dtype=object)
        labels[:] = [r["site"] for r in present]
        return labels, messages


def _logistic_fit(est, transport, batch, classes):
    return est.fit_sites(RemoteLearners(transport, batch), classes=classes)


def _logistic_partial_fit(est, transport, batch, classes):
    return est.partial_fit_sites(RemoteLearners(transport, batch), classes=classes)


__all__ = ["LocalTransport", "RemoteLearners", "RemoteSites", "federated_fit",
           "federated_partial_fit", "runs_on_summary_sites"]
