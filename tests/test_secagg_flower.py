"""'secagg-tree' through Flower's SecAgg+ (``SecAggPlusWorkflow`` with
``secaggplus_mod``), run in this process: an in-memory grid delivers every
message (serialized copies) to three site ClientApps. The server's view is
the masked vectors and their sum; the sum is the sites' integers exactly,
and the models are those of the in-process mechanism on the same shares."""

import copy

import numpy as np
import pytest

pytest.importorskip("flwr")

from skfedpriv.datasets import make_federated_gaussians  # noqa: E402
from skfedpriv.flower._secagg import (  # noqa: E402
    SecAggDWDClient,
    SecAggSiteConfig,
    make_secagg_server_app,
    run_secagg_stream,
    secagg_field,
)
from skfedpriv.linear_model._dwd_secagg import SecAggDWDServer  # noqa: E402
from skfedpriv.linear_model._dwd_sites import prepare_rows  # noqa: E402
from skfedpriv.linear_model._dwd_secagg import site_messages  # noqa: E402
from skfedpriv.privacy._secure_aggregation import SecAggSiteStream  # noqa: E402

N_SITES, N_BATCHES = 3, 2


def _grid(apps):
    """A Flower ``Grid`` delivering each message to a ClientApp in this
    process (see :class:`_InProcessGrid`)."""
    from flwr.serverapp import Grid
    from flwr.supercore.run import Run

    grid = type("InProcessGrid", (_InProcessGrid, Grid), {})(apps)
    grid.set_run(Run.create_empty(1))
    return grid


class _InProcessGrid:
    """A Flower ``Grid`` delivering each message to a ClientApp in this
    process (deep copies both ways, as serialization would) and recording
    every reply: the server's whole view."""

    def __init__(self, apps):
        from flwr.app import Context, RecordDict

        self.apps = apps
        self.contexts = {nid: Context(run_id=1, node_id=nid, node_config={}, state=RecordDict(),
                                      run_config={}) for nid in apps}
        self.replies = []
        self._run = None

    def set_run(self, run):
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        from flwr.app import Message

        return Message(content=content, dst_node_id=dst_node_id, message_type=message_type,
                       group_id=group_id)

    def get_node_ids(self):
        return list(self.apps)

    def get_nodes(self):  # pragma: no cover - not used by the workflows
        raise NotImplementedError

    def push_messages(self, messages):  # pragma: no cover
        raise NotImplementedError

    def pull_messages(self, message_ids):  # pragma: no cover
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for message in messages:
            node = message.metadata.dst_node_id
            reply = copy.deepcopy(self.apps[node](copy.deepcopy(message), self.contexts[node]))
            self.replies.append(reply)
            replies.append(reply)
        return replies


@pytest.fixture
def task_identity():
    """Flower's process-wide task identity, as a SuperLink would set it."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


def _batches():
    X, y, g, b = make_federated_gaussians(n_sites=N_SITES, n_batches=N_BATCHES, n_per_batch=90,
                                          n_features=4, mu=0.5, random_state=0)
    codes = np.unique(g, return_inverse=True)[1]
    return {(s, k): (X[(codes == s) & (b == k)], y[(codes == s) & (b == k)])
            for s in range(N_SITES) for k in range(N_BATCHES)}, X, y


def _sites(config, rows, seeds):
    """The SecAgg+ node id -> site client, each with a copy of its generator."""
    return {10 + s: SecAggDWDClient(config, lambda k, s=s: rows[s, k], copy.deepcopy(seeds[s]))
            for s in range(N_SITES)}


def _context():
    from flwr.app import Context, RecordDict

    return Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})


def test_secagg_plus_carries_the_sites_integers_and_the_server_sees_only_masked_vectors(
        task_identity):
    rows, _, _ = _batches()
    batch_rows = [sum(len(rows[s, k][1]) for s in range(N_SITES)) for k in range(N_BATCHES)]
    config = SecAggSiteConfig(n_sites=N_SITES, n_features=4, classes=(-1, 1),
                              n_batches=N_BATCHES, n_rows=sum(batch_rows), clip_norm=3.0)
    seeds = [np.random.default_rng(100 + s) for s in range(N_SITES)]
    sites = _sites(config, rows, seeds)
    grid = _grid({nid: site.client_app() for nid, site in sites.items()})
    field, _ = secagg_field(N_SITES)
    # the ServerApp, as a SuperLink would run it; then the same stream again
    # (same generators) through run_secagg_stream, to read the server's state
    final = []
    make_secagg_server_app(config, batch_rows, num_shares=N_SITES, reconstruction_threshold=2,
                           on_model=final.append)(grid, _context())
    strategy = run_secagg_stream(
        _grid({nid: site.client_app() for nid, site in _sites(config, rows, seeds).items()}),
        _context(), config, batch_rows, num_shares=N_SITES, reconstruction_threshold=2)
    np.testing.assert_array_equal(final[0], strategy.theta)

    # the same sites in process: same generators, the modular sum of 'secagg-tree'
    plan = config.plan()
    C = np.asarray(plan.factorization.C)
    streams = [SecAggSiteStream(C, plan.gamma, plan.sigma, plan.dim, copy.deepcopy(seeds[s]))
               for s in range(N_SITES)]
    server = SecAggDWDServer(plan)
    theta, plain = np.zeros(config.layout), []
    for k in range(N_BATCHES):
        messages = []
        for s, stream in enumerate(streams):
            Xs, Ys, _ = prepare_rows(*rows[s, k], np.ones(len(rows[s, k][1])), np.array([-1, 1]),
                                     fit_intercept=True, clip_norm=3.0)
            messages.append(site_messages(stream, (Xs, Ys), theta, plan.scales, q=1.0,
                                          fit_intercept=True))
        plain += [np.concatenate([m[n] for n in sorted(m)]) for m in messages]
        theta, _ = server.update(batch_rows[k], sum(batch_rows[:k + 1]), alpha=1e-3,
                                 fit_intercept=True, messages=messages)
    np.testing.assert_allclose(strategy.theta, theta, rtol=1e-9, atol=1e-12)
    # SecAgg+'s sum is the modular sum of the sites' integers, exactly, node by node
    assert strategy.server.aggregate.nodes.keys() == server.aggregate.nodes.keys()
    for node, value in server.aggregate.nodes.items():
        np.testing.assert_array_equal(strategy.server.aggregate.nodes[node], value)
    assert all(site.clipped == 0 for site in sites.values())
    assert max(site.clip_probability for site in sites.values()) < 1e-20
    assert max(np.abs(v).max() for v in plain) < field["clipping_range"]

    # the server's view: every array a site sent (the masked vectors and the
    # key shares, decoded), none equal to a site's integers or their quantization
    from flwr.common import bytes_to_ndarray
    from flwr.common.secure_aggregation.secaggplus_constants import Key

    masked = []
    for reply in grid.replies:
        for record in reply.content.config_records.values():
            masked += [bytes_to_ndarray(b) for b in record.get(Key.MASKED_PARAMETERS, [])]
    assert len(masked) == 2 * N_SITES * N_BATCHES  # (the weight factor, the vector) per site
    vectors = [m for m in masked if m.size > 1]
    assert len(vectors) == N_SITES * N_BATCHES
    for values in plain:
        for vector in vectors:
            assert not np.array_equal(vector, values)
            assert not np.array_equal(vector, values + field["clipping_range"])
    # the masks cancel only in the sum: the masked vectors look uniform on the field
    pooled = np.concatenate(vectors).astype(float) / field["modulus_range"]
    assert 0.4 < pooled.mean() < 0.6 and pooled.std() > 0.25


def test_the_site_enforces_its_horizon_and_the_model_shape_from_its_own_config():
    """Past ``n_batches`` the site refuses; a model of another shape or with
    NaN is refused before the site's stream moves; the node values it sends
    are integers within SecAgg+'s range."""
    rows, _, _ = _batches()
    config = SecAggSiteConfig(n_sites=N_SITES, n_features=4, classes=(-1, 1),
                              n_batches=N_BATCHES, n_rows=600, clip_norm=3.0)
    site = SecAggDWDClient(config, lambda k: rows[0, k], np.random.default_rng(0))
    for bad in (np.zeros((4, 1)), np.full((5, 1), np.nan)):
        with pytest.raises(ValueError, match="model"):
            site.fit([bad], {})
        assert site.stream.step == 0
    half = secagg_field(N_SITES)[0]["clipping_range"]
    for _ in range(N_BATCHES):
        (vector,), weight, _ = site.fit([np.zeros((5, 1))], {})
        assert weight == 1 and np.all(vector == np.rint(vector)) and np.abs(vector).max() < half
    from skfedpriv.privacy import HorizonExceededError

    with pytest.raises(HorizonExceededError):
        site.fit([np.zeros((5, 1))], {})


def test_every_site_stream_is_charged_to_the_sites_budget(tmp_path):
    """A restarted site (a new client object on the same file budget) is
    charged again: two streams at ε = 1 compose (zCDP) to about 1.4, above a
    budget of 1.2."""
    from skfedpriv.privacy import PrivacyBudget, PrivacyBudgetError

    rows, _, _ = _batches()
    config = SecAggSiteConfig(n_sites=N_SITES, n_features=4, classes=(-1, 1),
                              n_batches=N_BATCHES, n_rows=600, clip_norm=3.0)
    path = tmp_path / "site.sqlite"
    site = SecAggDWDClient(config, lambda k: rows[0, k], np.random.default_rng(0),
                           budget=PrivacyBudget(1.2, 1e-4, path=path))
    (entry,) = PrivacyBudget.from_file(path).ledger.entries
    assert entry.mechanism == "zcdp" and entry.rho == pytest.approx(site.plan.rho)
    with pytest.raises(PrivacyBudgetError):
        SecAggDWDClient(config, lambda k: rows[0, k], np.random.default_rng(1),
                        budget=PrivacyBudget.from_file(path))


def test_the_site_refuses_a_secagg_setup_that_is_not_its_own(task_identity):
    """A server choosing a weaker SecAgg+ (threshold 1 instead of the site's
    majority) is refused with a fixed text before the site
    loads a row or draws noise: its stream and generator are untouched."""
    rows, _, _ = _batches()
    batch_rows = [sum(len(rows[s, k][1]) for s in range(N_SITES)) for k in range(N_BATCHES)]
    config = SecAggSiteConfig(n_sites=N_SITES, n_features=4, classes=(-1, 1),
                              n_batches=N_BATCHES, n_rows=sum(batch_rows), clip_norm=3.0)
    sites = _sites(config, rows, [np.random.default_rng(100 + s) for s in range(N_SITES)])
    states = {nid: copy.deepcopy(site.stream.rng.bit_generator.state)
              for nid, site in sites.items()}
    grid = _grid({nid: site.client_app() for nid, site in sites.items()})
    with pytest.raises(ValueError, match="^this site refuses a secure-aggregation setup that "
                                         "is not its own configuration.$"):
        run_secagg_stream(grid, _context(), config, batch_rows, num_shares=N_SITES,
                          reconstruction_threshold=1)
    for nid, site in sites.items():
        assert site.stream.step == 0 and not site.stream._open
        assert site.stream.rng.bit_generator.state == states[nid]


def test_the_site_refuses_a_key_exchange_below_its_threshold(task_identity):
    """A key list of the site alone (SecAgg+ would then let the server
    rebuild its self-mask) is refused even after an accepted setup."""
    from flwr.app import ConfigRecord, Message, RecordDict
    from flwr.common import MessageType

    rows, _, _ = _batches()
    config = SecAggSiteConfig(n_sites=N_SITES, n_features=4, classes=(-1, 1),
                              n_batches=N_BATCHES, n_rows=1000, clip_norm=3.0)
    site = SecAggDWDClient(config, lambda k: rows[0, k], np.random.default_rng(0))
    configs = ConfigRecord({"stage": "share_keys", "10": [b"a", b"b"]})
    msg = Message(content=RecordDict({"secaggplus_configs": configs}), dst_node_id=10,
                  message_type=MessageType.TRAIN)
    with pytest.raises(ValueError, match="fewer neighbours than its reconstruction"):
        site.setup_guard(msg, None, lambda m, c: pytest.fail("passed to SecAgg+"))


class _DroppingGrid(_InProcessGrid):
    """Node 12's masked vector never arrives (it drops out mid-round)."""

    def send_and_receive(self, messages, *, timeout=None):
        kept = [m for m in messages if not (
            m.metadata.dst_node_id == 12
            and m.content.config_records["secaggplus_configs"]["stage"] == "collect_masked_vectors")]
        return super().send_and_receive(kept, timeout=timeout)


def test_the_sites_refuse_to_unmask_a_sum_of_fewer_than_their_honest_sites(task_identity):
    """A site dropping out after the key exchange leaves a sum of two shares;
    with ``honest_sites`` = 3 (the default) the others refuse to help unmask
    it, with a fixed text; with ``honest_sites=2`` they accept."""
    from flwr.serverapp import Grid
    from flwr.supercore.run import Run

    rows, _, _ = _batches()
    batch_rows = [sum(len(rows[s, k][1]) for s in range(N_SITES)) for k in range(N_BATCHES)]
    for honest in (None, 2):
        config = SecAggSiteConfig(n_sites=N_SITES, n_features=4, classes=(-1, 1),
                                  n_batches=1, n_rows=sum(batch_rows), clip_norm=3.0,
                                  honest_sites=honest)
        sites = _sites(config, rows, [np.random.default_rng(100 + s) for s in range(N_SITES)])
        grid = type("DroppingGrid", (_DroppingGrid, Grid), {})(
            {nid: site.client_app() for nid, site in sites.items()})
        grid.set_run(Run.create_empty(1))
        if honest is None:
            with pytest.raises(ValueError, match="^this site refuses to unmask a sum of fewer "
                                                 "sites than its honest_sites.$"):
                run_secagg_stream(grid, _context(), config, batch_rows, num_shares=N_SITES,
                                  reconstruction_threshold=2)
        else:
            run_secagg_stream(grid, _context(), config, batch_rows, num_shares=N_SITES,
                              reconstruction_threshold=2)


def test_the_site_refuses_rows_beyond_the_bound_its_clip_probability_assumes():
    """``clip_probability`` bounds a node value from ``n_rows``: a site whose
    batches hold more rows than that is refused (fixed text) before any
    noise is drawn."""
    rows, _, _ = _batches()
    per_batch = len(rows[0, 0][1])
    config = SecAggSiteConfig(n_sites=N_SITES, n_features=4, classes=(-1, 1),
                              n_batches=N_BATCHES, n_rows=per_batch + 1, clip_norm=3.0)
    site = SecAggDWDClient(config, lambda k: rows[0, 0], np.random.default_rng(0))
    site.fit([np.zeros((5, 1))], {})
    state = copy.deepcopy(site.stream.rng.bit_generator.state)
    with pytest.raises(ValueError, match="^this site's rows exceed the stream's n_rows.$"):
        site.fit([np.zeros((5, 1))], {})
    assert site.stream.step == 1 and site.stream.rng.bit_generator.state == state


def test_a_site_client_cannot_be_copied_or_answer_two_batches_at_once():
    """A copy (pickle, deep copy) of a site would draw its shares again from
    the same generator state, and a call inside another would answer one
    step twice: both refused with fixed texts, the stream untouched."""
    import pickle

    rows, _, _ = _batches()
    config = SecAggSiteConfig(n_sites=N_SITES, n_features=4, classes=(-1, 1),
                              n_batches=N_BATCHES, n_rows=1000, clip_norm=3.0)
    site = SecAggDWDClient(config, lambda k: rows[0, k], np.random.default_rng(0))
    for copier in (copy.deepcopy, copy.copy, pickle.dumps):
        with pytest.raises(TypeError, match="^a secure-aggregation site holds its noise stream"):
            copier(site)
    inner = []

    def load_batch(k):
        with pytest.raises(RuntimeError, match="^this site is answering another batch.$"):
            site.fit([np.zeros((5, 1))], {})
        inner.append(site.stream.step)
        return rows[0, k]

    site.load_batch = load_batch
    site.fit([np.zeros((5, 1))], {})
    assert inner == [0] and site.stream.step == 1


@pytest.mark.parametrize("bad", ["nan", "label", "shape", "text"])
def test_the_site_refuses_rows_outside_its_domain_with_a_fixed_text(bad):
    """A non-finite feature (its rounded integer is arbitrary: no sensitivity
    bound), a label outside ``classes`` or a wrong feature count is refused
    before any noise is drawn; the text names no data value (a Flower
    error reply reaches the server)."""
    rows, _, _ = _batches()
    X, y = rows[0, 0]
    X, y = X.copy(), y.copy()
    if bad == "nan":
        X[3, 1] = np.nan
    elif bad == "label":
        y[3] = 7
    elif bad == "shape":
        X = X[:, :3]
    else:
        X = X.astype(object)
        X[3, 1] = "secret"
    config = SecAggSiteConfig(n_sites=N_SITES, n_features=4, classes=(-1, 1),
                              n_batches=N_BATCHES, n_rows=1000, clip_norm=3.0)
    site = SecAggDWDClient(config, lambda k: (X, y), np.random.default_rng(0))
    state = copy.deepcopy(site.stream.rng.bit_generator.state)
    with pytest.raises(ValueError, match="^this site's rows are outside its declared domain.$"):
        site.fit([np.zeros((5, 1))], {})
    assert site.stream.step == 0 and site.rows == 0
    assert site.stream.rng.bit_generator.state == state
