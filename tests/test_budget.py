"""PrivacyBudget: exact composition, SQLite-file budgets shared by processes and
runs, in-memory budgets that refuse in other processes (issue #10, points 4, 5b)."""

import copy
import gc
import hashlib
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from skfedpriv import DWDClassifier, PrivacyBudget, PrivacyBudgetError
from skfedpriv.privacy import gaussian_epsilon, gaussian_sigma

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting import pld, rdp  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _file_bytes(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _budgets(tmp_path, epsilon, delta=0.0):
    return [PrivacyBudget(epsilon, delta), PrivacyBudget(epsilon, delta, path=tmp_path / "b.sqlite")]


# ---------------------------------------------------------------------------
# exact composition
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_gaussian_spends_compose_exactly_as_dp_accounting(tmp_path, kind):
    budget = _budgets(tmp_path, 10.0, 1e-3)[kind == "file"]
    sigma = gaussian_sigma(1.0, 1e-5, 1.0)
    for i in range(7):
        budget.spend(1.0, 1e-5, f"fit {i}", mechanism="gaussian", sigma=sigma, sensitivity=1.0)
    eps, delta = budget.spent
    assert delta == pytest.approx(7e-5)
    # Independent accountant: privacy loss distributions of 7 Gaussians.
    accountant = pld.PLDAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(sigma), 7)
    assert eps == pytest.approx(accountant.get_epsilon(7e-5), abs=1e-6)
    assert eps == pytest.approx(2.61, abs=5e-3)  # not 7 = basic composition
    # and it is one Gaussian with sensitivity sqrt(7)
    assert eps == pytest.approx(gaussian_epsilon(sigma, 7e-5, 7**0.5), rel=1e-12)
    assert budget.remaining == pytest.approx((10.0 - eps, 1e-3 - 7e-5))


def test_gaussian_spends_of_different_sigma_and_sensitivity_compose_exactly():
    budget = PrivacyBudget(20.0, 1e-2)
    events = [(2.0, 1.0), (5.0, 3.0), (1.5, 0.5), (4.0, 2.0)]  # (sigma, sensitivity)
    for sigma, sens in events:
        budget.spend(gaussian_epsilon(sigma, 1e-6, sens), 1e-6, mechanism="gaussian",
                     sigma=sigma, sensitivity=sens)
    accountant = pld.PLDAccountant()
    for sigma, sens in events:
        accountant.compose(dp_accounting.GaussianDpEvent(sigma / sens))
    eps, delta = budget.spent
    assert delta == pytest.approx(4e-6)
    assert eps == pytest.approx(accountant.get_epsilon(4e-6), abs=1e-5)
    # RDP is a looser valid bound: ours must not exceed it
    r = rdp.RdpAccountant()
    for sigma, sens in events:
        r.compose(dp_accounting.GaussianDpEvent(sigma / sens))
    assert eps <= r.get_epsilon(4e-6)


def test_pure_and_approx_spends_stay_additive_next_to_gaussian_ones():
    budget = PrivacyBudget(10.0, 1e-3)
    sigma = gaussian_sigma(1.0, 1e-5, 1.0)
    budget.spend(0.5, 0.0, "counts", mechanism="laplace")
    budget.spend(0.25, 0.0, "pure", mechanism="pure")
    budget.spend(0.3, 2e-6, "approx")
    for _ in range(3):
        budget.spend(1.0, 1e-5, mechanism="gaussian", sigma=sigma, sensitivity=1.0)
    eps_g = gaussian_epsilon(sigma, 3e-5, 3**0.5)
    assert budget.spent == pytest.approx((0.5 + 0.25 + 0.3 + eps_g, 2e-6 + 3e-5), rel=1e-12)


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_spend_admitted_iff_composed_total_fits(tmp_path, kind):
    sigma = gaussian_sigma(1.0, 1e-5, 1.0)
    seven = gaussian_epsilon(sigma, 7e-5, 7**0.5)
    budget = _budgets(tmp_path, seven, 7e-5)[kind == "file"]
    for _ in range(7):  # basic composition would refuse the 2nd spend already
        budget.spend(1.0, 1e-5, mechanism="gaussian", sigma=sigma, sensitivity=1.0)
    with pytest.raises(PrivacyBudgetError, match="composed total"):
        budget.spend(1.0, 1e-5, mechanism="gaussian", sigma=sigma, sensitivity=1.0)
    assert len(budget.ledger) == 7
    # the composed ε fits, but the δ's do not
    tight = PrivacyBudget(100.0, 2e-5)
    tight.spend(1.0, 1e-5, mechanism="gaussian", sigma=sigma, sensitivity=1.0)
    tight.spend(1.0, 1e-5, mechanism="gaussian", sigma=sigma, sensitivity=1.0)
    with pytest.raises(PrivacyBudgetError):
        tight.spend(1.0, 1e-5, mechanism="gaussian", sigma=sigma, sensitivity=1.0)


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_refused_or_invalid_charge_changes_nothing(tmp_path, kind):
    budget = _budgets(tmp_path, 1.0, 1e-5)[kind == "file"]
    budget.spend(0.7, 5e-6, note="first")
    before = (budget.spent, budget.ledger.entries)
    digest = _file_bytes(budget.path) if budget.path else None
    with pytest.raises(PrivacyBudgetError, match="second"):
        budget.check(0.4, 0.0, note="second")
    with pytest.raises(PrivacyBudgetError, match="second"):
        budget.spend(0.4, 0.0, note="second")
    with pytest.raises(PrivacyBudgetError):
        budget.spend(0.1, 6e-6, note="delta over")
    with pytest.raises(ValueError):
        budget.spend(float("nan"))
    with pytest.raises(ValueError):  # a claim below the exact Gaussian ε
        budget.spend(0.01, 1e-6, mechanism="gaussian", sigma=1.0, sensitivity=1.0)
    for mechanism in ("gaussian", "zcdp"):  # a budget's spend always states its ε
        details = dict(sigma=50.0, sensitivity=1.0) if mechanism == "gaussian" else dict(rho=1e-4)
        with pytest.raises(TypeError, match="epsilon must be a real number"):
            budget.check(None, 1e-7, mechanism=mechanism, **details)
        with pytest.raises(TypeError, match="epsilon must be a real number"):
            budget.spend(None, 1e-7, mechanism=mechanism, **details)
    assert (budget.spent, budget.ledger.entries) == before
    if digest is not None:
        assert _file_bytes(budget.path) == digest
    budget.spend(0.3, 5e-6, note="fits exactly")
    assert budget.spent == pytest.approx((1.0, 1e-5))


def test_ledger_is_a_snapshot_that_cannot_charge_around_the_budget():
    budget = PrivacyBudget(1.0)
    budget.spend(0.5, mechanism="laplace")
    snapshot = budget.ledger
    snapshot.record("sneaky", "laplace", epsilon=0.4)
    assert len(budget.ledger) == 1 and budget.spent == (0.5, 0.0)


# ---------------------------------------------------------------------------
# sharing: copies, pickles, processes
# ---------------------------------------------------------------------------


def test_copies_and_clones_share(tmp_path):
    for budget in _budgets(tmp_path, 1.0):
        assert copy.copy(budget) is budget
        assert copy.deepcopy({"b": budget})["b"] is budget
        est = DWDClassifier(mechanism="local-gaussian", clip_norm=3.0, budget=budget)
        assert clone(est).budget is budget


def test_memory_budget_unpickled_without_its_original_refuses():
    budget = PrivacyBudget(1.0)
    budget.spend(0.2)
    data = pickle.dumps(budget)
    assert pickle.loads(data) is budget  # same process, original alive
    del budget
    gc.collect()
    orphan = pickle.loads(data)
    for action in (lambda: orphan.spend(0.1), lambda: orphan.check(0.1),
                   lambda: orphan.spent, lambda: orphan.remaining, lambda: orphan.ledger):
        with pytest.raises(PrivacyBudgetError, match="path="):
            action()
    assert "detached" in repr(orphan)


def _spend_in_child(budget, queue):
    try:
        budget.spend(0.1, note="child")
        queue.put("spent")
    except PrivacyBudgetError as exc:
        queue.put(f"refused: {exc}")


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_memory_budget_refuses_in_another_process(method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    ctx = multiprocessing.get_context(method)
    budget = PrivacyBudget(1.0)
    queue = ctx.Queue()
    proc = ctx.Process(target=_spend_in_child, args=(budget, queue))
    proc.start()
    answer = queue.get(timeout=120)
    proc.join(120)
    assert answer.startswith("refused") and "path=" in answer
    assert budget.spent == (0.0, 0.0)
    budget.spend(1.0)  # the original still works


def test_file_budget_pickles_as_path_and_totals(tmp_path):
    budget = PrivacyBudget(1.0, 1e-5, path=tmp_path / "b.sqlite")
    budget.spend(0.2, note="parent")
    data = pickle.dumps(budget)
    assert len(data) < 400  # path and totals, no ledger, no connection
    other = pickle.loads(data)
    assert other is not budget and other._conn is None
    other.spend(0.3, note="copy")
    assert budget.spent == pytest.approx((0.5, 0.0))
    assert [e.note for e in budget.ledger.entries] == ["parent", "copy"]


def test_file_records_its_totals(tmp_path):
    path = tmp_path / "b.sqlite"
    PrivacyBudget(2.0, 1e-5, path=path).spend(0.5)
    with pytest.raises(ValueError, match="records totals"):
        PrivacyBudget(3.0, 1e-5, path=path)
    with pytest.raises(ValueError, match="records totals"):
        PrivacyBudget(2.0, 0.0, path=path)
    reopened = PrivacyBudget.from_file(path)
    assert (reopened.epsilon, reopened.delta) == (2.0, 1e-5)
    assert reopened.spent == (0.5, 0.0)
    with pytest.raises(PrivacyBudgetError, match="no budget file"):
        PrivacyBudget.from_file(tmp_path / "missing.sqlite")


def _charge_many(path, k, epsilon, queue):
    budget = PrivacyBudget(0.5, path=path)
    ok = refused = 0
    for i in range(k):
        try:
            budget.spend(epsilon, note=f"pid {os.getpid()} #{i}", mechanism="pure")
            ok += 1
        except PrivacyBudgetError:
            refused += 1
    queue.put((ok, refused))


def test_concurrent_processes_charge_exactly(tmp_path):
    path = str(tmp_path / "b.sqlite")
    PrivacyBudget(0.5, path=path)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    n_procs, k = 4, 20  # 80 charges of 0.01 against 0.5: exactly 50 fit
    procs = [ctx.Process(target=_charge_many, args=(path, k, 0.01, queue)) for _ in range(n_procs)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert sum(ok for ok, _ in results) == 50
    assert sum(refused for _, refused in results) == 30
    budget = PrivacyBudget.from_file(path)
    assert len(budget.ledger) == 50
    assert budget.spent[0] == pytest.approx(0.5)
    assert len({e.note for e in budget.ledger.entries}) == 50


def test_budget_file_survives_a_restart(tmp_path):
    path = str(tmp_path / "b.sqlite")
    writer = textwrap.dedent(f"""
        from skfedpriv import PrivacyBudget
        b = PrivacyBudget(3.0, 1e-4, path={path!r})
        b.spend(1.0, 0.0, "run 1", mechanism="laplace")
        b.spend(0.5, 1e-5, "run 1 again")
    """)
    subprocess.run([sys.executable, "-c", writer], check=True, env=_env(), timeout=120)
    reader = textwrap.dedent(f"""
        from skfedpriv import PrivacyBudget, PrivacyBudgetError
        b = PrivacyBudget.from_file({path!r})
        print(b.spent[0], b.spent[1], len(b.ledger), [e.note for e in b.ledger.entries])
        try:
            b.spend(1.6, note="run 2")
        except PrivacyBudgetError:
            print("refused")
        b.spend(1.5, note="run 2")
    """)
    out = subprocess.run([sys.executable, "-c", reader], check=True, env=_env(), timeout=120,
                         capture_output=True, text=True).stdout.splitlines()
    assert out[0] == "1.5 1e-05 2 ['run 1', 'run 1 again']"
    assert out[1] == "refused"
    assert PrivacyBudget(3.0, 1e-4, path=path).spent == pytest.approx((3.0, 1e-5))


# ---------------------------------------------------------------------------
# GridSearchCV with joblib's default process backend (loky)
# ---------------------------------------------------------------------------


def _private_dwd(budget):
    params = dict(mechanism="local-gaussian", clip_norm=3.0, epsilon=1.0, delta=1e-6,
                  budget=budget)
    if "classes" in DWDClassifier().get_params():
        return DWDClassifier(classes=[0, 1], **params)

    class DeclaredDWD(DWDClassifier):  # local: loky's cloudpickle sends it by value
        def fit(self, X, y):
            return self.partial_fit(X, y, classes=[0, 1])

    return DeclaredDWD(**params)


def _toy_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    return X, (X[:, 0] > 0).astype(int)


def test_grid_search_process_backend_charges_every_fit_to_a_file_budget(tmp_path):
    budget = PrivacyBudget(100.0, 1e-3, path=tmp_path / "b.sqlite")
    gs = GridSearchCV(_private_dwd(budget), {"q": [0.5, 1.0]}, cv=3, n_jobs=2,
                      error_score="raise")
    gs.fit(*_toy_data())
    n_fits = 2 * 3 + 1  # candidates x splits + refit
    entries = budget.ledger.entries
    assert len(entries) >= n_fits and len(entries) % n_fits == 0
    assert gs.best_estimator_.budget is budget


def test_grid_search_process_backend_refuses_an_in_memory_budget():
    budget = PrivacyBudget(100.0, 1e-3)
    with pytest.raises(PrivacyBudgetError, match="path="):
        GridSearchCV(_private_dwd(budget), {"q": [0.5, 1.0]}, cv=3, n_jobs=2,
                     error_score="raise").fit(*_toy_data())
    # with the default error_score every fit fails, so the search fails loudly
    with pytest.raises(ValueError, match="fits failed"):
        GridSearchCV(_private_dwd(budget), {"q": [0.5, 1.0]}, cv=3, n_jobs=2).fit(*_toy_data())
    assert len(budget.ledger) == 0


# -- a missing budget file is an error, never a new empty ledger (#20, 7) ----


def test_deleted_budget_file_is_never_recreated(tmp_path):
    """Fails on the code before #20: the pickled copy recreated the file empty
    and accepted the charge; the original raised sqlite3.OperationalError."""
    path = tmp_path / "b.sqlite"
    budget = PrivacyBudget(1.0, path=path)
    budget.spend(0.9, mechanism="pure")
    data = pickle.dumps(budget)
    os.remove(path)
    with pytest.raises(PrivacyBudgetError, match="deleted or replaced"):
        budget.spend(0.9, mechanism="pure")
    with pytest.raises(PrivacyBudgetError, match="no budget file"):
        pickle.loads(data).spend(0.9, mechanism="pure")  # a worker's copy
    with pytest.raises(PrivacyBudgetError, match="no budget file"):
        PrivacyBudget.from_file(path)
    assert not path.exists()
    # only the constructor creates one, and says so by being called
    assert PrivacyBudget(1.0, path=path).spent == (0.0, 0.0)


def test_replaced_budget_file_is_refused(tmp_path):
    path = tmp_path / "b.sqlite"
    budget = PrivacyBudget(1.0, path=path)
    budget.spend(0.5, mechanism="pure")
    os.remove(path)
    PrivacyBudget(1.0, path=path)  # someone creates a fresh file at the path
    with pytest.raises(PrivacyBudgetError, match="deleted or replaced"):
        budget.spend(0.5, mechanism="pure")


def test_sqlite_failures_are_budget_errors(tmp_path):
    import sqlite3

    with pytest.raises(PrivacyBudgetError) as info:
        PrivacyBudget(1.0, path=tmp_path / "no-such-dir" / "b.sqlite")
    assert isinstance(info.value.__cause__, sqlite3.Error)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database, " * 100)
    for opener in (lambda: PrivacyBudget.from_file(junk), lambda: PrivacyBudget(1.0, path=junk)):
        with pytest.raises(PrivacyBudgetError) as info:
            opener()
        assert isinstance(info.value.__cause__, sqlite3.Error)


def test_budget_file_advances_each_stream_position_once(tmp_path):
    path = tmp_path / "b.sqlite"
    budget = PrivacyBudget(1.0, path=path)
    assert budget.advance_stream("s", 0)
    other = pickle.loads(pickle.dumps(budget))  # another opener of the file
    assert not other.advance_stream("s", 0)  # the position was taken
    assert other.advance_stream("s", 1) and budget.advance_stream("t", 5)
    assert not budget.advance_stream("s", 1) and budget.advance_stream("s", 2)
    assert budget.stream_at("s", 3) and not budget.stream_at("s", 2)
    assert budget.stream_at("new", 7)  # a stream the file has not seen
    with pytest.raises(PrivacyBudgetError):
        PrivacyBudget(1.0).advance_stream("s", 0)
