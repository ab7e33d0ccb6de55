"""Flower apps: a ClientApp per site and a ServerApp holding the estimator.

Flower is imported inside the functions, so ``import skfedpriv.flower``
works without it.
"""

import os
import pickle
import time

import numpy as np

from ..federated import (
    DWDSite,
    LogisticSite,
    SitePrivacy,
    SiteRefusal,
    federated_fit,
    federated_partial_fit,
)
from ..federated._refusal import REFUSED
from ..federated._server import runs_on_summary_sites

#: Site class of each protocol of :func:`make_client_app`.
PROTOCOLS = {"dwd": DWDSite, "logistic": LogisticSite}

#: Flower message type of every request (``ClientApp.query("skfedpriv")``).
MESSAGE_TYPE = "query.skfedpriv"


def encode(payload):
    """dict of arrays and scalars -> Flower ``RecordDict``."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

    arrays, config = {}, {}
    for key, value in payload.items():
        if isinstance(value, np.ndarray):
            arrays[key] = Array(np.ascontiguousarray(value))
        elif isinstance(value, (np.generic,)):
            config[key] = value.item()
        elif value is not None:
            config[key] = value
    return RecordDict({"arrays": ArrayRecord(arrays), "config": ConfigRecord(config)})


def decode(content):
    """Flower ``RecordDict`` -> dict of arrays and scalars."""
    payload = dict(content.config_records["config"])
    payload.update({k: v.numpy() for k, v in content.array_records["arrays"].items()})
    return payload


def make_client_app(load_batch, privacy=None, *, protocol="dwd"):
    """A Flower ``ClientApp`` that answers for one site.

    Parameters
    ----------
    load_batch : callable ``(context, batch) -> (X, y)`` or ``(X, y, sample_weight)``
        Reads this site's rows of a batch, typically from a path in
        ``context.node_config`` (set with ``flower-supernode --node-config``).
        It runs in the ClientApp process, which Flower starts for every
        message: keep it cheap.
    privacy : SitePrivacy, ContinualSitePrivacy, LearnerPrivacy, callable ``context -> ... or None``, or None
        The site's own privacy parameters (``SitePrivacy`` or
        ``ContinualSitePrivacy`` for ``'dwd'``, ``LearnerPrivacy`` for
        ``'logistic'``). With them, the site only ever sends noised
        summaries (DWD) or noised messages ``ĝ_i^r`` (logistic); its
        release counts and its noise stream live in its
        ledger file (``ledger_path``, held across runs and processes), and
        every refusal is sent as a fixed text
        (:class:`~skfedpriv.flower.SiteRefusal`; the reason goes to the
        site's log). A site whose privacy cannot be built refuses every
        request the same way.
    protocol : {'dwd', 'logistic'}, default='dwd'
        The protocol of the estimator the server fits: ``'dwd'`` (the site
        is a :class:`DWDSite` sending sums: ``DWDClassifier``, or
        ``LogisticRegression(solver='newton')``) or ``'logistic'`` (a
        :class:`LogisticSite`, one learner of a ``LogisticRegression`` of
        the local-steps protocol).

    The site's name is ``node_config['site-id']`` (else the node id); the
    server sums replies in order of names.
    """
    from flwr.app import Error, Message
    from flwr.clientapp import ClientApp

    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {sorted(PROTOCOLS)}, got {protocol!r}.")
    site_class = PROTOCOLS[protocol]
    app = ClientApp()

    @app.query("skfedpriv")
    def answer(message, context):
        trusted = False  # until the site is known not to be private
        try:
            site_privacy = privacy(context) if callable(privacy) else privacy
            trusted = site_privacy is None
            name = context.node_config.get("site-id", context.node_id)
            site = site_class(lambda batch: load_batch(context, batch), site_privacy, name=str(name))
            reply = site.handle(decode(message.content))
            return Message(encode(reply), reply_to=message)
        except Exception as exc:  # noqa: BLE001 - the server gets a reason, never data
            reason = f"{type(exc).__name__}: {exc}"
            if not trusted and not isinstance(exc, SiteRefusal):
                reason = f"SiteRefusal: {REFUSED}"
            return Message(Error(code=1, reason=reason), reply_to=message)

    return app


class GridTransport:
    """Send a request to every site through a Flower ``Grid`` and wait for all replies.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    node_ids : list of int
    timeout : float
        Seconds to wait for the replies of one request.
    poll : float
        Seconds between pulls (Flower's own ``send_and_receive`` waits 3 s).
    """

    def __init__(self, grid, node_ids, timeout=120.0, poll=0.05):
        self.grid, self.node_ids = grid, list(node_ids)
        self.timeout, self.poll = float(timeout), float(poll)
        self.n_round_trips = 0

    def __call__(self, request):
        from flwr.app import Message

        messages = [Message(encode(request), dst_node_id=node, message_type=MESSAGE_TYPE)
                    for node in self.node_ids]
        ids = [i for i in self.grid.push_messages(messages) if i]
        if len(ids) != len(messages):
            raise RuntimeError("Flower did not accept every message.")
        replies, deadline = {}, time.monotonic() + self.timeout
        while len(replies) < len(ids):
            # pull only what is still pending: a reply is deleted once pulled
            pending = [i for i in ids if i not in replies]
            for reply in self.grid.pull_messages(pending):
                if reply.metadata.reply_to_message_id in pending:
                    replies[reply.metadata.reply_to_message_id] = reply
            if len(replies) == len(ids):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(ids) - len(replies)} sites did not answer in {self.timeout} s.")
            time.sleep(self.poll)
        self.n_round_trips += 1
        out = []
        for message_id in ids:
            reply = replies[message_id]
            if reply.has_error():
                raise RuntimeError(f"site error: {reply.error.reason}")
            out.append(decode(reply.content))
        return out


def wait_for_nodes(grid, n_sites, timeout=60.0, poll=0.2):
    """Node ids once ``n_sites`` SuperNodes are connected (bounded wait)."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n_sites:
            return nodes
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(nodes)} of {n_sites} sites connected after {timeout} s.")
        time.sleep(poll)


def make_server_app(make_estimator, *, n_sites=None, classes=None, timeout=120.0):
    """A Flower ``ServerApp`` that fits a DWDClassifier or LogisticRegression on the sites' rows.

    Parameters
    ----------
    make_estimator : callable ``context -> DWDClassifier or LogisticRegression``
        The server's (unfitted) estimator, e.g. built from
        ``context.run_config``. Its type chooses the protocol (the clients
        must run the same one, see :func:`make_client_app`): ``'dwd'`` for a
        ``DWDClassifier`` or a ``LogisticRegression(solver='newton')``,
        ``'logistic'`` for another ``LogisticRegression``.
    n_sites : int or None
        Sites to wait for; ``None`` reads ``run_config['n-sites']``.
    classes : array-like or None
        Known classes; ``None`` takes them from the estimator's ``classes``
        hyperparameter or, without a privacy mechanism, from the sites'
        labels (as ``fit`` does from ``y``). A private estimator needs a
        declared label set (here or as its hyperparameter).
    timeout : float
        Seconds to wait for the sites to connect, and for each reply.

    Run config keys: ``n-sites``, ``n-batches``, ``model-path`` (where the
    fitted estimator's :meth:`release` is pickled; optional: the training
    state never leaves the server process). DWD: batch 0 is ``fit`` (with
    ``classes``: ``partial_fit``), batches ``1 .. n-batches - 1`` are
    ``partial_fit`` (default ``n-batches`` 1); the same for a
    ``LogisticRegression(solver='newton')``. Logistic learners: batches
    ``0 .. n_rounds - 1`` are the rounds of ``fit``; ``n-batches`` is
    ignored.
    """
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid, context):
        config = context.run_config
        count = int(config["n-sites"]) if n_sites is None else int(n_sites)
        nodes = wait_for_nodes(grid, count, timeout)
        transport = GridTransport(grid, nodes[:count], timeout=timeout)
        estimator = make_estimator(context)
        summary_sites = runs_on_summary_sites(estimator)
        if not summary_sites:
            federated_fit(estimator, transport, 0, classes=classes)
        elif classes is None:
            federated_fit(estimator, transport, 0)
        else:
            federated_partial_fit(estimator, transport, 0, classes=classes)
        if summary_sites:
            for batch in range(1, int(config.get("n-batches", 1))):
                federated_partial_fit(estimator, transport, batch)
        estimator.n_round_trips_ = transport.n_round_trips
        path = config.get("model-path")
        if path:
            tmp = f"{path}.tmp{os.getpid()}"
            with open(tmp, "wb") as fh:
                # the release only: the training state (noise streams, raw
                # curvature) never leaves the server process
                pickle.dump(estimator.release(), fh)
            os.replace(tmp, path)

    return app


__all__ = ["GridTransport", "SitePrivacy", "encode", "decode", "make_client_app",
           "make_server_app", "wait_for_nodes"]
