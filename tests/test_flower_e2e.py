"""Federated DWD and logistic regression over Flower itself (needs ``flwr``).

Flower's message types (the request encoding), the ClientApp's replies and
the ``flower_e2e``-marked tests, which start a SuperLink and three SuperNodes
on 127.0.0.1 and run the protocol across processes (minutes; only with
``SKFEDPRIV_FLOWER_E2E=1``). The protocol itself is tested in one process,
without Flower, in ``test_flower.py``.
"""

import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from skfedpriv import DWDClassifier, LogisticRegression  # noqa: E402
from skfedpriv.flower import (  # noqa: E402
    ContinualSitePrivacy,
    LocalTransport,
    federated_fit,
    federated_partial_fit,
)
from skfedpriv.flower._apps import decode, encode  # noqa: E402
from _ledgers import new_ledger  # noqa: E402
from test_flower import (  # noqa: E402
    N_SITES,
    R_LOG,
    in_process_stream,
    learner_privacy,
    local_sites,
    logistic_sites,
    logistic_stream_data,
    make_data,
    private_estimator,
    private_logistic,
    site_privacy,
)


def test_message_encoding_round_trip():
    payload = {"op": "summary", "theta": np.arange(6.0).reshape(3, 2), "classes": ["a", "b"],
               "q": 1.0, "with_curvature": True, "batch": 2, "skip": None, "present": True,
               "param-mechanism": "toeplitz"}
    out = decode(encode(payload))
    np.testing.assert_array_equal(out["theta"], payload["theta"])
    assert out["classes"] == ["a", "b"] and out["batch"] == 2 and "skip" not in out
    assert out["present"] is True and out["param-mechanism"] == "toeplitz"


def _client_app_reply(app, request):
    """What the server gets back from a ClientApp for ``request`` (in this process)."""
    from flwr.app import Context, RecordDict
    from flwr.app.message.message import make_message
    from flwr.app.metadata import Metadata

    from skfedpriv.flower._apps import MESSAGE_TYPE

    metadata = Metadata(run_id=1, message_id="m", src_node_id=0, dst_node_id=1,
                        reply_to_message_id="", group_id="", created_at=time.time(), ttl=60.0,
                        message_type=MESSAGE_TYPE)
    context = Context(run_id=1, node_id=1, node_config={"site-id": "s0"}, state=RecordDict(),
                      run_config={})
    reply = app(make_message(metadata, encode(request)), context)
    return reply.error.reason if reply.has_error() else decode(reply.content)


def test_client_app_sends_a_private_sites_refusals_as_fixed_texts(ledger_dir):
    """The reason a private site's ClientApp sends is its fixed refusal text,
    the same on neighbouring data sets (row 0 with a label of its own), also
    when its privacy parameters cannot be built; a site that trusts the
    server sends the reason itself."""
    from skfedpriv.flower import SitePrivacy, make_client_app
    from skfedpriv.federated._refusal import MISMATCH, RAW_SUMS, REFUSED
    from skfedpriv.federated._site import PROTOCOL_VERSION

    X = np.array([[1.0, 0.5], [0.2, -1.0], [0.3, 0.4]])
    base = {"protocol": PROTOCOL_VERSION, "batch": 0, "fit_intercept": True, "clip_norm": 3.0}
    requests = {
        MISMATCH: {**base, "op": "prepare", "classes": [0, 1]},
        RAW_SUMS: {**base, "op": "summary", "classes": [0, 1, 2], "theta": np.zeros((3, 3)),
                   "q": 1.0, "with_curvature": True},
    }
    for labels in ([0, 1, 1], [2, 1, 1]):
        app = make_client_app(
            lambda context, batch, y=np.array(labels): (X, y),
            lambda context: SitePrivacy(1.0, 1e-5, 3.0, classes=[0, 1, 2],
                                        ledger_path=new_ledger(ledger_dir / "s.sqlite")))
        for text, request in requests.items():
            assert _client_app_reply(app, request) == f"SiteRefusal: {text}"
        assert _client_app_reply(app, {**base, "op": "describe"})["n_rows"] == 3
    unbuilt = make_client_app(lambda context, batch: (X, np.array([0, 1, 2])),
                              lambda context: SitePrivacy(1.0, 1e-5, 3.0, classes=[0, 1]))
    assert _client_app_reply(unbuilt, {**base, "op": "describe"}) == f"SiteRefusal: {REFUSED}"
    trusting = make_client_app(lambda context, batch: (X, np.array([0, 1, 2])))
    assert "not in classes" in _client_app_reply(trusting, requests[MISMATCH])


# -- across processes ----------------------------------------------------------

APP_MODULE = '''
import numpy as np
from skfedpriv import DWDClassifier, LogisticRegression
from skfedpriv.flower import ContinualSitePrivacy, SitePrivacy, make_client_app, make_server_app


def load_batch(context, batch):
    data = np.load(context.node_config["data-path"])
    return data[f"X{batch}"], data[f"y{batch}"]


def site_privacy(context):
    # Test convenience: the run chooses the mode; the parameters and the
    # noise seed are the site's own (node config). A real site fixes both.
    mechanism, node = context.run_config["mechanism"], context.node_config
    if mechanism in ("local-tree", "local-blt"):
        return ContinualSitePrivacy(mechanism, float(node["epsilon"]), 1e-5,
                                    float(node["clip-norm"]), n_batches=2,
                                    random_state=int(node["noise-seed"]), classes=[0, 1],
                                    ledger_path=node[f"{mechanism}-ledger"])
    if mechanism != "local-gaussian":
        return None
    return SitePrivacy(float(node["epsilon"]), 1e-5, float(node["clip-norm"]),
                       online_steps=2, random_state=int(node["noise-seed"]), classes=[0, 1],
                       ledger_path=node["dwd-ledger"])


def make_estimator(context):
    config = context.run_config
    mechanism = config["mechanism"]
    if mechanism == "local-gaussian":
        return DWDClassifier(mechanism="local-gaussian", epsilon=2.0, clip_norm=3.0,
                             online_steps=2, random_state=0, classes=[0, 1])
    if mechanism in ("local-tree", "local-blt"):
        return DWDClassifier(mechanism=mechanism, epsilon=2.0, clip_norm=3.0, n_batches=2,
                             classes=[0, 1])
    if mechanism == "inference-logistic":
        return LogisticRegression(solver="newton", inference=True)
    return DWDClassifier(alpha=0.1, online_steps=2, max_iter=int(config["max-iter"]),
                         inference=mechanism == "inference-dwd")


client_app = make_client_app(load_batch, site_privacy)
server_app = make_server_app(make_estimator)
'''

LOGISTIC_APP_MODULE = '''
import numpy as np
from skfedpriv import LogisticRegression
from skfedpriv.flower import LearnerPrivacy, make_client_app, make_server_app


def load_batch(context, batch):
    data = np.load(context.node_config["data-path"])
    return data[f"LX{batch}"], data[f"Ly{batch}"]


def make_estimator(context):
    mechanism = context.run_config["mechanism"]
    return LogisticRegression(n_rounds=6, local_steps=3, learning_rate=0.4, epsilon=4.0,
                              delta=1e-4, feature_clip_norm=2.0, solver="local-steps",
                              mechanism=None if mechanism == "none" else mechanism)


def learner_privacy(context):
    # Test convenience: the run chooses the mode; the noise seed is the site's own.
    if context.run_config["mechanism"] == "none":
        return None
    estimator = make_estimator(context)
    node = context.node_config
    return LearnerPrivacy.from_estimator(estimator, random_state=int(node["noise-seed"]),
                                         classes=[0, 1], ledger_path=node["logistic-ledger"])


client_app = make_client_app(load_batch, learner_privacy, protocol="logistic")
server_app = make_server_app(make_estimator, classes=[0, 1])
'''

PYPROJECT = '''
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "1.0.0"
description = "skfedpriv federated DWD test app"
license = "BSD-3-Clause"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "skfedpriv"

[tool.flwr.app.components]
serverapp = "{name}:server_app"
clientapp = "{name}:client_app"

[tool.flwr.app.config]
n-sites = {n_sites}
n-batches = 2
mechanism = "none"
max-iter = 4
model-path = ""
'''


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    pytest.fail(f"the SuperLink did not listen on 127.0.0.1:{port} within {timeout} s")


def _flower_env(home):
    env = dict(os.environ)
    env.update(FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1", FLWR_HOME=str(home),
               FLWR_SUPEREXEC_TASK_POLL_INTERVAL="0.05", PYTHONUNBUFFERED="1",
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    return env


def _bin(name):
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        pytest.skip(f"{name} is not installed beside {sys.executable}")
    return str(path)


@pytest.fixture
def flower_deployment(tmp_path):
    """A SuperLink and N_SITES SuperNodes on 127.0.0.1, each in its own process group."""
    home = tmp_path / "flwr-home"
    home.mkdir()
    link_port = _free_port()
    (home / "config.toml").write_text(textwrap.dedent(f'''
        [superlink]
        default = "skfedpriv-test"

        [superlink.skfedpriv-test]
        address = "127.0.0.1:{link_port}"
        insecure = true
    '''))
    env = _flower_env(home)
    X, y, g, b = make_data()
    LX, Ly, Lg, Lr = logistic_stream_data(n_learners=N_SITES)
    Lr[(Lg == 2) & (Lr < 2)] += 2  # learner 2 joins in round 2; learner 1 misses round 3
    processes, logs = [], []

    def start(args, log_name):
        log = open(tmp_path / log_name, "w")
        logs.append(log)
        processes.append(subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True))

    try:
        start([_bin("flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port",
               str(link_port), "--disable-runtime-dependency-installation"], "superlink.log")
        _wait_for_port(link_port)
        for s in range(N_SITES):
            path = tmp_path / f"site{s}.npz"
            rows = {f"{k}{batch}": v[(g == s) & (b == batch)]
                    for batch in (0, 1) for k, v in (("X", X), ("y", y))}
            rows.update({f"{k}{r}": v[(Lg == s) & (Lr == r)]
                         for r in range(R_LOG) for k, v in (("LX", LX), ("Ly", Ly))})
            np.savez(path, **rows)
            ledgers = {kind: new_ledger(tmp_path / f"{kind}{s}.sqlite")
                       for kind in ("dwd", "logistic", "local-tree", "local-blt")}
            node_config = (f'site-id="s{s}" data-path="{path}" epsilon=2.0 clip-norm=3.0 '
                           f'noise-seed={10 + s} '
                           + " ".join(f'{kind}-ledger="{ledger}"' for kind, ledger in ledgers.items()))
            start([_bin("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link_port}",
                   "--host", "127.0.0.1", "--port", str(_free_port()), "--max-retries", "20",
                   "--max-wait-time", "60", "--node-config", node_config], f"supernode{s}.log")
        apps = {}
        for name, module in (("dwdtestapp", APP_MODULE), ("logtestapp", LOGISTIC_APP_MODULE)):
            apps[name] = tmp_path / name
            apps[name].mkdir()
            (apps[name] / "pyproject.toml").write_text(PYPROJECT.format(n_sites=N_SITES, name=name))
            (apps[name] / f"{name}.py").write_text(module)
        yield dict(app=apps["dwdtestapp"], logistic_app=apps["logtestapp"], env=env, tmp=tmp_path,
                   data=(X, y, g, b), logistic_data=(LX, Ly, Lg, Lr))
    finally:
        for proc in processes:  # the whole group: SuperExec and app processes too
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        for proc in processes:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        for log in logs:
            log.close()


def _flwr_run(deployment, mechanism, timeout=400, app="app"):
    model_path = deployment["tmp"] / f"model-{app}-{mechanism}.pkl"
    overrides = f'mechanism="{mechanism}" model-path="{model_path}"'
    args = [_bin("flwr"), "run", str(deployment[app]), "skfedpriv-test",
            "--run-config", overrides, "--stream"]
    started = time.monotonic()
    proc = subprocess.run(args, env=deployment["env"], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, start_new_session=True)
    elapsed = time.monotonic() - started
    if not model_path.exists():
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                         for p in sorted(deployment["tmp"].glob("*.log")))
        pytest.fail(f"no model after flwr run ({elapsed:.0f} s):\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-3000:]}\n{logs}")
    with open(model_path, "rb") as fh:
        return pickle.load(fh), elapsed


@pytest.mark.flower_e2e
def test_flower_deployment_matches_in_process(flower_deployment):
    X, y, g, b = flower_deployment["data"]
    remote, seconds = _flwr_run(flower_deployment, "none")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter=4 stops early, on both sides alike
        local = DWDClassifier(alpha=0.1, online_steps=2, max_iter=4).fit(
            X[b == 0], y[b == 0], sample_group=g[b == 0])
    local.partial_fit(X[b == 1], y[b == 1], sample_group=g[b == 1])
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-8, rtol=0)
    np.testing.assert_allclose(remote.intercept_, local.intercept_, atol=1e-8, rtol=0)
    assert remote.n_batches_ == 2

    # local-gaussian: noise drawn inside each client; equal to the same protocol
    # run in one process with the same (site-held) seeds
    private, _ = _flwr_run(flower_deployment, "local-gaussian")
    est = private_estimator()
    transport = LocalTransport(local_sites(
        X, y, g, b, lambda s: site_privacy(est, 10 + s, flower_deployment["tmp"])))
    federated_fit(est, transport)
    federated_partial_fit(est, transport, 1)
    np.testing.assert_allclose(private.coef_, est.coef_, atol=1e-8, rtol=0)
    np.testing.assert_allclose(private.intercept_, est.intercept_, atol=1e-8, rtol=0)
    assert private.noise_scale_ == est.noise_scale_


@pytest.mark.flower_e2e
def test_flower_deployment_logistic_matches_in_process(flower_deployment):
    """The logistic protocol with each learner a ClientApp in its own process:
    equal to the in-process estimator without noise; with a mechanism, equal
    to the same protocol in one process with the same learner seeds (so each
    learner's stream, its missed increment and its late start survived the
    ClientApp processes in ``context.state``)."""
    X, y, g, rnd = flower_deployment["logistic_data"]
    remote, seconds = _flwr_run(flower_deployment, "none", app="logistic_app")
    # both sides pin the local steps ('auto' is Newton in process, with its alpha)
    local = LogisticRegression(n_rounds=R_LOG, local_steps=3, learning_rate=0.4,
                               feature_clip_norm=2.0, solver="local-steps")
    in_process_stream(local, X, y, g, rnd, [0, 1])
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-10, rtol=0)
    np.testing.assert_allclose(remote.intercept_, local.intercept_, atol=1e-10, rtol=0)
    assert remote.n_round_trips_ == 1 + R_LOG

    private, _ = _flwr_run(flower_deployment, "toeplitz", app="logistic_app")
    est = private_logistic("toeplitz")
    transport = LocalTransport(logistic_sites(
        X, y, g, rnd, lambda s: learner_privacy(est, 10 + s, flower_deployment["tmp"])))
    federated_fit(est, transport, classes=[0, 1])
    assert private.noise_scale_ == est.noise_scale_ > 0
    np.testing.assert_allclose(private.coef_, est.coef_, atol=1e-10, rtol=0)
    np.testing.assert_allclose(private.intercept_, est.intercept_, atol=1e-10, rtol=0)
    assert np.abs(private.coef_ - remote.coef_).max() > 1e-3  # the noise is there


@pytest.mark.flower_e2e
def test_flower_deployment_continual_and_inference_match_in_process(flower_deployment):
    """'local-tree' / 'local-blt' with each site's stream in its ClientApp
    processes (one per message; the stream lives in the site's ledger file):
    equal to the same protocol in one process with the same site seeds.
    inference=True (non-private): the covariance of the in-process fit."""
    X, y, g, b = flower_deployment["data"]
    for mechanism in ("local-tree", "local-blt"):
        remote, _ = _flwr_run(flower_deployment, mechanism)
        est = DWDClassifier(mechanism=mechanism, epsilon=2.0, clip_norm=3.0, n_batches=2,
                            classes=[0, 1])
        ledgers = flower_deployment["tmp"] / f"in-process-{mechanism}"
        ledgers.mkdir()
        transport = LocalTransport(local_sites(X, y, g, b, lambda s: ContinualSitePrivacy.from_estimator(
            est, random_state=10 + s, ledger_path=new_ledger(ledgers / f"s{s}.sqlite"))))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the noise dominates these few rows
            federated_fit(est, transport)
            federated_partial_fit(est, transport, 1)
        assert remote.noise_scale_ == est.noise_scale_ > 0
        np.testing.assert_allclose(remote.coef_, est.coef_, atol=1e-8, rtol=0)
        np.testing.assert_allclose(remote.intercept_, est.intercept_, atol=1e-8, rtol=0)

    for mechanism, local in (
            ("inference-dwd", DWDClassifier(alpha=0.1, online_steps=2, max_iter=4,
                                            inference=True)),
            ("inference-logistic", LogisticRegression(solver="newton", inference=True))):
        remote, _ = _flwr_run(flower_deployment, mechanism)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # max_iter=4 stops early, on both sides alike
            local.fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
        local.partial_fit(X[b == 1], y[b == 1], sample_group=g[b == 1])
        np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-8, rtol=0)
        np.testing.assert_allclose(remote.coef_se_, local.coef_se_, rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(remote.coef_cov_, local.coef_cov_, rtol=1e-7, atol=1e-12)
