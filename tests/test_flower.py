"""Federated DWD over Flower: sites as ClientApps in their own processes.

The protocol tests run the site and server code in one process through
``LocalTransport`` (exact, fast); the ``flower``-marked test starts a
SuperLink and three SuperNodes on 127.0.0.1 and runs the same protocol
across processes.
"""

import math
import os
import pickle
import shutil
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

from skfedpriv import DWDClassifier  # noqa: E402
from skfedpriv.flower import (  # noqa: E402
    DWDSite,
    LocalTransport,
    SitePrivacy,
    federated_fit,
    federated_partial_fit,
)
from skfedpriv.flower._apps import decode, encode  # noqa: E402
from skfedpriv.linear_model._dwd_private import (  # noqa: E402
    clip_augmented_rows,
    gradient_sensitivity,
    local_gaussian_releases,
    local_gaussian_sigma,
)
from skfedpriv.linear_model._dwd_solver import site_summary  # noqa: E402

N_SITES = 3


def make_data(n=240, p=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = (X[:, 0] - X[:, 1] + 0.8 * rng.normal(size=n) > 0).astype(int)
    sites = np.arange(n) % N_SITES
    batch = (np.arange(n) >= n // 2).astype(int)
    return X, y, sites, batch


def local_sites(X, y, g, b, privacy=None):
    return [
        DWDSite(lambda k, s=s: (X[(g == s) & (b == k)], y[(g == s) & (b == k)]),
                None if privacy is None else privacy(s), name=f"s{s}")
        for s in range(N_SITES)
    ]


@pytest.mark.parametrize("params", [dict(), dict(q=0.5, alpha=1e-2), dict(q=2.0, fit_intercept=False)])
def test_protocol_matches_in_process_fit_and_stream(params):
    X, y, g, b = make_data()
    transport = LocalTransport(local_sites(X, y, g, b))
    remote = federated_fit(DWDClassifier(**params), transport)
    local = DWDClassifier(**params).fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-8, rtol=0)
    np.testing.assert_allclose(remote.intercept_, local.intercept_, atol=1e-8, rtol=0)
    federated_partial_fit(remote, transport, 1)
    local.partial_fit(X[b == 1], y[b == 1], sample_group=g[b == 1])
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-8, rtol=0)
    np.testing.assert_allclose(remote.curvature_, local.curvature_, rtol=1e-10, atol=1e-9)
    assert remote.n_samples_seen_ == local.n_samples_seen_
    assert remote.n_batches_ == 2
    np.testing.assert_array_equal(remote.predict(X), local.predict(X))


def test_protocol_multiclass_and_class_weight():
    X, _, g, b = make_data()
    y = np.digitize(X[:, 0], [-0.5, 0.5])
    cw = {0: 2.0, 2: 0.5}
    transport = LocalTransport(local_sites(X, y, g, np.zeros_like(b)))
    remote = federated_fit(DWDClassifier(class_weight=cw), transport)
    local = DWDClassifier(class_weight=cw).fit(X, y, sample_group=g)
    np.testing.assert_array_equal(remote.classes_, local.classes_)
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-8, rtol=0)


def test_server_only_receives_sums():
    """Every reply is a fixed-size sum: nothing grows with the site's rows."""
    X, y, g, b = make_data()
    transport = LocalTransport(local_sites(X, y, g, b))
    federated_fit(DWDClassifier(), transport)
    p1 = X.shape[1] + 1
    for _, replies in transport.log:
        for reply in replies:
            for value in reply.values():
                assert np.size(value) <= p1 * p1


def private_estimator(**kw):
    return DWDClassifier(mechanism="local-gaussian", epsilon=2.0, clip_norm=3.0,
                         online_steps=2, random_state=0, **kw)


def test_private_sites_send_noise_of_the_calibrated_scale():
    """What the server receives minus the raw site sums is Gaussian noise of
    the std the site's own calibration gives (checked over many sites)."""
    n_sites = 60
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20 * n_sites, 3))
    y = (X[:, 0] > 0).astype(int)
    g = np.arange(len(y)) % n_sites
    est = private_estimator()
    sites = [DWDSite(lambda k, s=s: (X[g == s], y[g == s]),
                     SitePrivacy.from_estimator(est, random_state=100 + s), name=f"{s:03d}")
             for s in range(n_sites)]
    transport = LocalTransport(sites)
    federated_fit(est, transport)
    sigma = local_gaussian_sigma(2.0, 1e-5, local_gaussian_releases(1, 2, True), "analytic")
    expected = sigma * gradient_sensitivity(3.0)
    residuals = []
    for request, replies in transport.log:
        assert request["op"] in ("describe", "prepare", "noised")  # never raw sums
        if request["op"] != "noised" or request["kind"] != "gradient":
            continue
        for site, reply in zip(sorted(range(n_sites), key=lambda s: f"{s:03d}"), replies):
            assert reply["std"] == pytest.approx(expected, rel=1e-12)
            Xs = clip_augmented_rows(X[g == site], 3.0, True)
            Ys = np.where(y[g == site] == 1, 1.0, -1.0)[:, None]
            _, raw, _ = site_summary(Xs, Ys, np.ones(len(Ys)), request["theta"], 1.0, True, False)
            residuals.append((reply["value"] - raw).ravel())
    residuals = np.concatenate(residuals)
    n = residuals.size  # 2 gradient releases x 60 sites x 4 coordinates
    assert n == 2 * n_sites * 4
    ratio = np.mean(residuals**2) / expected**2
    assert abs(ratio - 1) < 5 * math.sqrt(2 / n)  # chi-square: sd of the ratio is sqrt(2/n)
    assert abs(np.mean(residuals)) < 5 * expected / math.sqrt(n)


def test_private_protocol_is_reproducible_and_runs_the_estimators_update():
    """With fixed site seeds the remote private fit is reproducible, and equals the
    estimator's own local-gaussian update fed with the same noised sums."""
    X, y, g, b = make_data()

    def run():
        est = private_estimator()
        transport = LocalTransport(local_sites(
            X, y, g, b, lambda s: SitePrivacy.from_estimator(est, random_state=10 + s)))
        federated_fit(est, transport)
        federated_partial_fit(est, transport, 1)
        return est, transport

    a, transport = run()
    b2, _ = run()
    np.testing.assert_array_equal(a.coef_, b2.coef_)
    local = private_estimator().fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
    local.partial_fit(X[b == 1], y[b == 1], sample_group=g[b == 1])
    assert a.noise_scale_ == local.noise_scale_
    assert a.privacy_spent_ == local.privacy_spent_
    assert np.all(np.isfinite(a.coef_))
    # the site refuses releases past its calibration, and raw sums always
    with pytest.raises(PermissionError, match="calibrated releases"):
        federated_partial_fit(a, transport, 1)
    site = transport.sites[0]
    with pytest.raises(PermissionError, match="noised summaries only"):
        site.handle({"protocol": 1, "op": "summary", "batch": 0, "classes": [0, 1],
                     "fit_intercept": True, "theta": np.zeros((4, 1)), "q": 1.0,
                     "with_curvature": False}, {})


def test_site_noise_scale_mismatch_is_refused():
    X, y, g, b = make_data()
    est = private_estimator()
    # the sites are calibrated for epsilon=1, the server assumes epsilon=2
    transport = LocalTransport(local_sites(
        X, y, g, b, lambda s: SitePrivacy(1.0, 1e-5, 3.0, online_steps=2, random_state=s)))
    with pytest.raises(RuntimeError, match="privacy parameters differ"):
        federated_fit(est, transport)


def test_message_encoding_round_trip():
    payload = {"op": "summary", "theta": np.arange(6.0).reshape(3, 2), "classes": ["a", "b"],
               "q": 1.0, "with_curvature": True, "batch": 2, "skip": None}
    out = decode(encode(payload))
    np.testing.assert_array_equal(out["theta"], payload["theta"])
    assert out["classes"] == ["a", "b"] and out["batch"] == 2 and "skip" not in out


# -- across processes ----------------------------------------------------------

APP_MODULE = '''
import numpy as np
from skfedpriv import DWDClassifier
from skfedpriv.flower import SitePrivacy, make_client_app, make_server_app


def load_batch(context, batch):
    data = np.load(context.node_config["data-path"])
    return data[f"X{batch}"], data[f"y{batch}"]


def site_privacy(context):
    # Test convenience: the run chooses the mode; the parameters and the
    # noise seed are the site's own (node config). A real site fixes both.
    if context.run_config["mechanism"] != "local-gaussian":
        return None
    node = context.node_config
    return SitePrivacy(float(node["epsilon"]), 1e-5, float(node["clip-norm"]),
                       online_steps=2, random_state=int(node["noise-seed"]))


def make_estimator(context):
    config = context.run_config
    if config["mechanism"] == "local-gaussian":
        return DWDClassifier(mechanism="local-gaussian", epsilon=2.0, clip_norm=3.0,
                             online_steps=2, random_state=0)
    return DWDClassifier(alpha=0.1, online_steps=2, max_iter=int(config["max-iter"]))


client_app = make_client_app(load_batch, site_privacy)
server_app = make_server_app(make_estimator)
'''

PYPROJECT = '''
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "dwdtestapp"
version = "1.0.0"
description = "skfedpriv federated DWD test app"
license = "BSD-3-Clause"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "skfedpriv"

[tool.flwr.app.components]
serverapp = "dwdtestapp:server_app"
clientapp = "dwdtestapp:client_app"

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
            np.savez(path, **rows)
            node_config = (f'site-id="s{s}" data-path="{path}" epsilon=2.0 clip-norm=3.0 '
                           f'noise-seed={10 + s}')
            start([_bin("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link_port}",
                   "--host", "127.0.0.1", "--port", str(_free_port()), "--max-retries", "20",
                   "--max-wait-time", "60", "--node-config", node_config], f"supernode{s}.log")
        app = tmp_path / "app"
        app.mkdir()
        (app / "pyproject.toml").write_text(PYPROJECT.format(n_sites=N_SITES))
        (app / "dwdtestapp.py").write_text(APP_MODULE)
        yield dict(app=app, env=env, tmp=tmp_path, data=(X, y, g, b))
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


def _flwr_run(deployment, mechanism, timeout=400):
    model_path = deployment["tmp"] / f"model-{mechanism}.pkl"
    overrides = f'mechanism="{mechanism}" model-path="{model_path}"'
    args = [_bin("flwr"), "run", str(deployment["app"]), "skfedpriv-test",
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


@pytest.mark.flower
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
        X, y, g, b, lambda s: SitePrivacy.from_estimator(est, random_state=10 + s)))
    federated_fit(est, transport)
    federated_partial_fit(est, transport, 1)
    np.testing.assert_allclose(private.coef_, est.coef_, atol=1e-8, rtol=0)
    np.testing.assert_allclose(private.intercept_, est.intercept_, atol=1e-8, rtol=0)
    assert private.noise_scale_ == est.noise_scale_
