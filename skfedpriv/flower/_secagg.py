"""'secagg-tree' over Flower's SecAgg+: the sites' integers, masked, summed.

A site (:class:`SecAggDWDClient`, a Flower ``NumPyClient`` to run under
``secaggplus_mod``) sends, per batch, the raw integers of the tree nodes it
completes (node sum of its rounded summaries plus its discrete Gaussian
share, :mod:`skfedpriv.linear_model._dwd_secagg`); SecAgg+ masks them and
the server (:func:`make_secagg_strategy`, the strategy of a
``SecAggPlusWorkflow``) sees only their sum, from which it estimates the
prefix sums and solves as in process.

**Carrying integers exactly.** SecAgg+ quantizes each float ``x`` to
``(clip(x, ±c) + c) Q / (2c)`` with stochastic rounding and sums mod ``M``.
:func:`secagg_field` takes ``Q = 2c`` (quantizer 1: an integer ``x`` within
``±c`` is carried unchanged, stochastic rounding of an integer is the
integer), every site weighs one (``num_examples = max_weight``: no
rescaling) and ``n_sites Q < M = 2^32`` (the sum never wraps), so the
server's aggregate is the exact integer sum divided by the number of sites.
Every site's node values stay within ``±c`` except with the probability
:attr:`SecAggDWDClient.clip_probability` (public, below 1e-20 in the tests
here; the site refuses rows beyond ``n_rows``, the bound it assumes), on
which event the site clips its message: the claim is then
``(ε, δ + (1 + e^ε) p)``-DP with ``p`` the sum of the sites' clip
probabilities (``n_sites`` times one site's: no honest site may clip).

**Enforced by the site.** The site builds its plan (scale, σ, horizon,
clip, field) from its own :class:`SecAggSiteConfig`, never from a request;
the only value it reads from the server is the public model ``θ``, checked
for shape and finiteness. It also fixes its SecAgg+ setup (field, number of
shares, reconstruction threshold: :meth:`SecAggSiteConfig.secagg_setup`)
and refuses, with a fixed text, a setup request that differs or a key
exchange with fewer neighbours than its threshold
(:meth:`SecAggDWDClient.setup_guard`): with ``threshold=1`` and a key list
of the site alone, SecAgg+ would let the server rebuild the site's mask.
A site dropping out mid-round leaves a sum without its share: the other
sites refuse to unmask a sum of fewer sites than their ``honest_sites``
(with the default, every site: any dropout ends the round unanswered).

**What SecAgg+ itself assumes.** Flower's SecAgg+ has no consistency
round (Bonawitz et al. 2017's actively secure variant): a server that
tells some sites that a site dropped out (collecting the shares of its
pairwise key) and others that it is active (collecting the shares of its
self-mask) unmasks that site's message alone. A site cannot see this from
its own messages, so over Flower the claim holds against a server that
follows the SecAgg+ protocol (it may read everything it receives and pick
the model ``θ`` freely), not against one that lies about dropouts. Past its horizon it refuses. Its generator and
raw node sums stay in the client object, which refuses to be copied or
pickled and answers one call at a time (in memory: a restarted site
process would start a new noise stream, so a deployment keeps the client
alive for the stream, and charges a file ``budget`` per stream, so a
restart that starts a new stream is charged again).
"""

import threading
from dataclasses import dataclass

import numpy as np

from .._losses import count_models
from ..linear_model._dwd_secagg import SecAggDWDServer, SecAggPlan, site_messages
from ..linear_model._dwd_settings import SECAGG
from ..linear_model._dwd_sites import prepare_rows
from ..privacy import HorizonExceededError, make_factorization
from ..privacy._secure_aggregation import (
    MODULUS_BITS,
    SecAggSiteStream,
    wrap_probability,
)

__all__ = ["SecAggDWDClient", "SecAggSiteConfig", "make_secagg_server_app",
           "make_secagg_strategy", "run_secagg_stream", "secagg_field"]


def secagg_field(n_sites, bits=MODULUS_BITS):
    """The ``SecAggPlusWorkflow`` parameters that carry each site's integers
    within ``±c`` exactly, and the bits of a site's range.

    Returns
    -------
    params : dict
        ``clipping_range``, ``quantization_range``, ``modulus_range``,
        ``max_weight`` for ``SecAggPlusWorkflow``.
    site_bits : int
        ``c = 2^(site_bits - 1)``: the plan's field (:class:`SecAggPlan`).
    """
    if n_sites < 2:
        raise ValueError("secure aggregation needs at least two sites.")
    site_bits = bits - int(n_sites).bit_length()  # n_sites 2^site_bits < 2^bits
    quantization = 2**site_bits
    return dict(clipping_range=float(quantization // 2), quantization_range=quantization,
                modulus_range=2**bits, max_weight=1.0), site_bits


@dataclass(frozen=True)
class SecAggSiteConfig:
    """A 'secagg-tree' stream's public settings, fixed at every site and at
    the server (never taken from a request).

    ``n_rows`` is the public bound on the stream's rows the scale is sized
    for; ``classes`` the declared labels.
    """

    n_sites: int
    n_features: int
    classes: tuple
    n_batches: int
    n_rows: int
    clip_norm: float
    epsilon: float = 1.0
    delta: float = 1e-5
    q: float = 1.0
    alpha: float = 1e-3
    fit_intercept: bool = True
    honest_sites: object = None
    num_shares: object = None
    reconstruction_threshold: object = None

    def secagg_setup(self):
        """The SecAgg+ setup this site accepts (its own, never a request's):
        every site's field, ``share_num`` (default every site) and
        ``threshold`` (default a majority of the sites)."""
        field, _ = secagg_field(self.n_sites)
        shares = self.n_sites if self.num_shares is None else int(self.num_shares)
        threshold = (self.n_sites // 2 + 1 if self.reconstruction_threshold is None
                     else int(self.reconstruction_threshold))
        return {"sample_num": self.n_sites, "share_num": shares, "threshold": threshold,
                "clipping_range": field["clipping_range"],
                "target_range": field["quantization_range"],
                "mod_range": field["modulus_range"], "max_weight": field["max_weight"]}

    @property
    def layout(self):
        return self.n_features + int(self.fit_intercept), count_models(np.asarray(self.classes))

    def plan(self):
        """The stream's :class:`SecAggPlan` in the SecAgg+ field."""
        _, site_bits = secagg_field(self.n_sites)
        honest = self.n_sites if self.honest_sites is None else int(self.honest_sites)
        factorization = make_factorization(SECAGG["secagg-tree"], self.n_batches)
        return SecAggPlan(factorization, self.n_sites, honest, *self.layout, self.q,
                          self.clip_norm, self.n_rows, self.epsilon, self.delta, bits=site_bits)


class SecAggDWDClient:
    """One site of a 'secagg-tree' stream (wrap with :meth:`to_client` for a
    Flower ``ClientApp`` with ``secaggplus_mod``).

    Parameters
    ----------
    config : SecAggSiteConfig
        The site's own settings.
    load_batch : callable ``step -> (X, y)``
        This site's rows of batch ``step``.
    rng : numpy.random.Generator
        The site's own generator (fresh OS entropy for a real stream).
    budget : PrivacyBudget or None, default=None
        The site's budget (a file budget persists across restarts): every
        new stream, i.e. every client object, is charged once, as one
        ρ-zCDP release, before any noise is drawn; a restarted site that
        starts a new stream on the same rows is charged again.
    """

    def __init__(self, config, load_batch, rng, budget=None):
        self.config = config
        self.load_batch = load_batch
        self.plan = config.plan()
        if budget is not None:
            budget.spend(self.plan.epsilon, config.delta, mechanism="zcdp", rho=self.plan.rho,
                         note=f"secagg-tree site stream of {config.n_batches} batches")
        self.half = secagg_field(config.n_sites)[0]["clipping_range"]
        self.stream = SecAggSiteStream(np.asarray(self.plan.factorization.C), self.plan.gamma,
                                       self.plan.sigma, self.plan.dim, rng)
        # a node value beyond ±c: its own rows' bound plus its share's tail
        self.clip_probability = wrap_probability(
            self.plan.gamma * config.n_rows * self.plan.row_bound + 0.5 * config.n_batches,
            self.plan.sigma, self.plan.factorization.n_noise * self.plan.dim,
            secagg_field(config.n_sites)[1])
        self.clipped = 0
        self.rows = 0  # this site's rows so far (at most config.n_rows)
        self._busy = threading.Lock()

    def get_parameters(self, config):
        return [np.zeros(self.config.layout)]

    def __reduce__(self):
        raise TypeError("a secure-aggregation site holds its noise stream: it cannot be "
                        "copied or pickled (a copy would draw the same shares again).")

    def fit(self, parameters, config):
        """Answer one batch: the masked-to-be integers of the completed
        nodes, in node order, as floats (exact below 2^53). One call at a
        time (a concurrent or nested call is refused: it would answer the
        same step twice)."""
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("this site is answering another batch.")
        try:
            return self._fit(parameters)
        finally:
            self._busy.release()

    def _fit(self, parameters):
        if self.stream.step >= self.config.n_batches:
            raise HorizonExceededError("this site's stream has reached its horizon.")
        theta = np.asarray(parameters[0], dtype=float)
        if theta.shape != self.config.layout or not np.all(np.isfinite(theta)):
            raise ValueError("the model sent to this site has the wrong shape or values.")
        X, y = self._domain_rows(*self.load_batch(self.stream.step))
        classes = np.asarray(self.config.classes)
        X, Y, _ = prepare_rows(X, y, np.ones(len(y)), classes,
                               fit_intercept=self.config.fit_intercept,
                               clip_norm=self.config.clip_norm)
        if self.rows + len(X) > self.config.n_rows:  # the bound clip_probability assumes
            raise ValueError("this site's rows exceed the stream's n_rows.")
        self.rows += len(X)
        messages = site_messages(self.stream, (X, Y), theta, self.plan.scales,
                                 q=self.config.q, fit_intercept=self.config.fit_intercept)
        vector = np.concatenate([messages[node] for node in sorted(messages)])
        self.clipped += int(np.sum(np.abs(vector) > self.half))
        return [np.clip(vector, -self.half, self.half).astype(float)], 1, {}

    def _domain_rows(self, X, y):
        """The batch's rows if they are in the declared domain (finite
        features of the configured count, labels among ``classes``), else a
        ValueError whose text names no data value (a Flower error reply
        reaches the server)."""
        try:
            X, y = np.asarray(X, dtype=float), np.asarray(y)
        except (TypeError, ValueError):
            X = None
        if (X is None or X.ndim != 2 or X.shape[1] != self.config.n_features or y.shape != (len(X),)
                or not np.all(np.isfinite(X)) or not np.all(np.isin(y, self.config.classes))):
            raise ValueError("this site's rows are outside its declared domain.")
        return X, y

    def evaluate(self, parameters, config):  # pragma: no cover - not asked
        return 0.0, 0, {}

    def to_client(self):
        """This site as a Flower ``Client``."""
        from flwr.client import NumPyClient

        site = self

        class _Client(NumPyClient):
            def get_parameters(self, config):
                return site.get_parameters(config)

            def fit(self, parameters, config):
                return site.fit(parameters, config)

        return _Client().to_client()

    def client_app(self):
        """A Flower ``ClientApp`` answering for this site under
        ``secaggplus_mod`` (the same client object for every message, so its
        stream state persists)."""
        from flwr.client import ClientApp
        from flwr.client.mod import secaggplus_mod

        def client_fn(context):
            return self.to_client()

        return ClientApp(client_fn=client_fn, mods=[self.setup_guard, secaggplus_mod])

    def setup_guard(self, msg, ctxt, call_next):
        """A Flower mod (outside ``secaggplus_mod``): refuses, with a fixed
        text, a SecAgg+ setup whose parameters are not this site's own
        (:meth:`SecAggSiteConfig.secagg_setup`) and a key exchange with fewer
        neighbours than its threshold, before the site loads a row or draws
        noise (a server choosing ``threshold=1`` and a key list of the site
        alone could otherwise unmask its integers); and refuses to help
        unmask a sum of fewer active sites than its ``honest_sites`` (sites
        that dropped out mid-round took their shares with them)."""
        configs = msg.content.config_records.get("secaggplus_configs")
        if configs is not None:
            expected = self.config.secagg_setup()
            stage = configs.get("stage")
            if stage == "setup" and any(configs.get(key) != value
                                        for key, value in expected.items()):
                raise ValueError("this site refuses a secure-aggregation setup that is "
                                 "not its own configuration.")
            if stage == "share_keys" and len(configs) - 1 < expected["threshold"]:
                raise ValueError("this site refuses a key exchange with fewer neighbours "
                                 "than its reconstruction threshold.")
            if stage == "unmask" and len(configs.get("active_nids", [])) < self.plan.honest_sites:
                raise ValueError("this site refuses to unmask a sum of fewer sites than "
                                 "its honest_sites.")
        return call_next(msg, ctxt)


def make_secagg_strategy(config, batch_rows, **fedavg):
    """A Flower strategy (``FedAvg`` underneath) whose ``aggregate_fit``
    turns SecAgg+'s aggregate into the next model: the server of a
    'secagg-tree' stream. ``batch_rows[b]`` is the public row count of batch
    ``b``."""
    from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAvg

    server = SecAggDWDServer(config.plan())

    class SecAggDWDStrategy(FedAvg):
        """See :func:`make_secagg_strategy`."""

        theta = np.zeros(config.layout)
        n_seen = 0

        def aggregate_fit(self, server_round, results, failures):
            if not results:
                return None, {}
            mean = parameters_to_ndarrays(results[0][1].parameters)[0]
            summed = np.rint(mean * len(results)).astype(np.int64)
            step = server.aggregate.step
            ending = np.flatnonzero(server.ends == step)
            sums = dict(zip(ending.tolist(), np.split(summed, len(ending))))
            n_rows = batch_rows[step]
            self.n_seen += n_rows
            self.theta, _ = server.update(n_rows, self.n_seen, alpha=config.alpha,
                                          fit_intercept=config.fit_intercept, sums=sums)
            return ndarrays_to_parameters([self.theta]), {}

    strategy = SecAggDWDStrategy(
        initial_parameters=ndarrays_to_parameters([np.zeros(config.layout)]), **fedavg)
    strategy.server = server
    return strategy



def run_secagg_stream(grid, context, config, batch_rows, *, num_shares,
                      reconstruction_threshold, timeout=None):
    """Run a whole 'secagg-tree' stream (``config.n_batches`` SecAgg+ rounds,
    every site in each) on ``grid``; returns the strategy (``.theta`` is the
    last model, ``.server`` the server's state).

    Parameters
    ----------
    grid : flwr Grid
    context : flwr Context
        The ServerApp's context.
    config : SecAggSiteConfig
        The stream's public settings, as at the sites.
    batch_rows : sequence of int
        Public row count of each batch.
    num_shares, reconstruction_threshold : int
        SecAgg+'s secret sharing (see ``SecAggPlusWorkflow``).
    timeout : float or None
    """
    from flwr.server import LegacyContext, ServerConfig
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    field, _ = secagg_field(config.n_sites)
    strategy = make_secagg_strategy(config, batch_rows, min_fit_clients=config.n_sites,
                                    min_available_clients=config.n_sites, fraction_evaluate=0.0)
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=config.n_batches),
                           strategy=strategy)
    workflow = SecAggPlusWorkflow(num_shares=num_shares,
                                  reconstruction_threshold=reconstruction_threshold,
                                  timeout=timeout, **field)
    DefaultWorkflow(fit_workflow=workflow)(grid, legacy)
    return strategy


def make_secagg_server_app(config, batch_rows, *, num_shares, reconstruction_threshold,
                           on_model=None, timeout=None):
    """A Flower ``ServerApp`` running :func:`run_secagg_stream`;
    ``on_model(theta)`` receives the final model (e.g. to save it)."""
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid, context):
        strategy = run_secagg_stream(grid, context, config, batch_rows, num_shares=num_shares,
                                     reconstruction_threshold=reconstruction_threshold,
                                     timeout=timeout)
        if on_model is not None:
            on_model(strategy.theta)

    return app
