"""DWD at scikit-learn speed (issue #11): the timing table, one run.

Every ratio compares two methods timed in the same run, on the same rows,
with one BLAS thread (threadpoolctl), as the median over repetitions that
alternate the methods (a shared machine slows both alike).

* Offline ``fit`` against scikit-learn's ``LogisticRegression`` (lbfgs) on
  the pooled rows, two Gaussian classes, 10 sites, alpha = 1e-3, for
  q in {0.5, 1, 4}: time, ratio, the relative objective gap at the
  returned point (default tol = 1e-12; the gap to the same solver run at
  tol = 1e-15, whose optimum the tests check against L-BFGS-B), rounds of
  messages and the numbers one site sent over the fit. The time of forming the curvature matrix at
  the optimum (the renewable state ``curvature_``, ``O(n p²)``) is shown
  apart. The private mechanisms' one-batch fit at the first size too.
* ``partial_fit`` per batch against numpy forming the batch's XᵀDX alone
  (10 000-row batches), its fixed cost (100-row batches, p = 10, beside
  scikit-learn's ``SGDClassifier.partial_fit`` on the same rows), and the
  peak memory (tracemalloc) of 100- and 1000-batch streams.
* Offline ``fit`` on scikit-learn's bundled datasets (breast cancer, digits,
  wine, iris; all rows and a 70 % split, standardized, 3 sites) beside
  ``LogisticRegression``: time, Newton steps and rounds (nearly separable
  rows make the path long), converged at the default ``max_iter`` and at
  the old default 100; and rows repeated under conflicting labels (rows
  next to genDWD's kink at the optimum; factored and dense path) beside
  LogisticRegression and LinearSVC, with the gap to L-BFGS-B.
* Many sites (10 to 10 000) on ``n_jobs=None`` against ``n_jobs=2``.
* Few rows, many features (``--parts fewrows``, not in the default): n in
  {100, 400}, p in {2 000, 10 000, 20 000}, DWD's factored curvature (its
  steps in the span of the rows) beside LinearSVC and LogisticRegression
  (time, peak traced memory, accuracy, the gap to L-BFGS-B on the same
  objective), the factored path without the span, the first step along the
  gradient (before the piled start), every factor in float64 (before the
  float32 early factors), the Gram matrix and the copy of the rows alone
  and, up to p = 2 000, the dense path.
* Where the fit's time goes (``--parts profile``, not in the default):
  timers around the solver's steps (:mod:`_dwd_profile`) on the wide rows
  and digits: passes over the rows, L-BFGS iterations and their Python
  cost, extra line-search rounds, Newton steps after the hand-over,
  curvature matrices and Cholesky factors, time outside the solver.
* ``LogisticRegression`` and ``DecentralizedLogisticRegression`` beside
  ``SGDClassifier(loss="log_loss")`` on the same rows: time and accuracy.

    python -m skfedpriv bench dwd-speed            # full (minutes)
    python -m skfedpriv bench dwd-speed --quick    # smaller sizes

Writes ``dwd_speed.md`` (``dwd_speed_quick.md``) into ``--output-dir``
(default ``benchmarks/results``) and prints its path.
"""

import contextlib
import os
import platform
import sys
import time
import tracemalloc
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.linear_model import SGDClassifier
from threadpoolctl import threadpool_limits

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)

from skfedpriv import DecentralizedLogisticRegression, DWDClassifier, LogisticRegression
from skfedpriv.datasets import make_federated_gaussians
from skfedpriv._loss import GenDWDLoss
from skfedpriv._losses import gendwd_smoothed_curvature
from skfedpriv.linear_model._dwd_solver import augmented_gram, site_summary

from _output import benchmark_parser, output_dir, wrote


def _data(n, p, seed=0, n_sites=10):
    X, y, g, batch = make_federated_gaussians(
        n_sites=n_sites, n_batches=max(n // (10 * n_sites), 1), n_per_batch=10,
        n_features=p, random_state=seed)
    return X, y, g, batch


def _time(func):
    start = time.perf_counter()
    out = func()
    return out, time.perf_counter() - start


def _time_and_cpu(func):
    """``func()``, its wall time and this process's CPU time (on a shared
    host the CPU time is less moved by other jobs than the wall time)."""
    start, cpu = time.perf_counter(), time.process_time()
    out = func()
    return out, time.perf_counter() - start, time.process_time() - cpu


def _objective(X, y_pm, theta, q, alpha=1e-3):
    """genDWD objective (eq. 5) per unit weight at ``theta`` (intercept first)."""
    loss, _, _ = site_summary(X, y_pm, np.ones(len(X)), theta, q, True, False)
    return float(loss[0] / len(X) + 0.5 * alpha * theta[1:, 0] @ theta[1:, 0])


def _solver_info(func):
    """Run ``func`` and collect the ``info`` of every ``solve_batch`` call."""
    import skfedpriv.linear_model._renewable as dwd_module  # where the update calls it

    infos, original = [], dwd_module.solve_batch

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        infos.append(out[2])
        return out

    dwd_module.solve_batch = spy
    try:
        func()
    finally:
        dwd_module.solve_batch = original
    return infos


def offline_rows(sizes, qs, reps):
    rows = []
    for n, p in sizes:
        X, y, g, _ = _data(n, p)
        y_pm = np.where(y == np.unique(y)[1], 1.0, -1.0)[:, None]
        for q in qs:
            ours, peer, state, cpu_ours, cpu_peer = [], [], [], [], []
            for _ in range(reps):
                clf, t_ours, c_ours = _time_and_cpu(
                    lambda: DWDClassifier(q=q).fit(X, y, sample_group=g))
                lr, t_peer, c_peer = _time_and_cpu(lambda: SkLogisticRegression().fit(X, y))
                cpu_ours.append(c_ours)
                cpu_peer.append(c_peer)
                theta = np.vstack([clf.intercept_, clf.coef_.T])
                row_curvature = gendwd_smoothed_curvature(
                    y_pm[:, 0] * (X @ theta[1:, 0] + theta[0, 0]), q)
                _, t_state = _time(lambda: augmented_gram(X, row_curvature, True))
                ours.append(t_ours)
                peer.append(t_peer)
                state.append(t_state)
            info = _solver_info(lambda: DWDClassifier(q=q).fit(X, y, sample_group=g))[0]
            reference = DWDClassifier(q=q, tol=1e-15, max_iter=300).fit(X, y, sample_group=g)
            best = _objective(X, y_pm, np.vstack([reference.intercept_, reference.coef_.T]), q)
            rows.append(dict(
                n=n, p=p, q=q, dwd=np.median(ours), lr=np.median(peer),
                ratio=np.median(ours) / np.median(peer), state=np.median(state),
                cpu_ratio=np.median(cpu_ours) / np.median(cpu_peer), lr_iters=int(lr.n_iter_[0]),
                gap=(_objective(X, y_pm, theta, q) - best) / best, iters=info["n_iter"],
                rounds=info["rounds"], floats=info["floats_sent"],
                load=os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan"),
            ))
            print(rows[-1], flush=True)
    return rows


def private_rows(n, p, reps):
    X, y, g, _ = _data(n, p)
    clip = float(np.sqrt(1.0 + 1.5 * p))
    rows = []
    for mechanism in ("laplace", "gaussian", "local-gaussian"):
        times, peer = [], []
        for _ in range(reps):
            est = DWDClassifier(mechanism=mechanism, epsilon=1.0, clip_norm=clip,
                                online_steps=1 if mechanism == "local-gaussian" else 10)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _, t = _time(lambda: est.partial_fit(X, y, sample_group=g, classes=np.unique(y)))
            _, t_peer = _time(lambda: SkLogisticRegression().fit(X, y))
            times.append(t)
            peer.append(t_peer)
        rows.append(dict(mechanism=mechanism, n=n, p=p, seconds=np.median(times),
                         lr=np.median(peer)))
    return rows


def _numpy_gram(Xb, p):
    Xbar = np.hstack([np.ones((len(Xb), 1)), Xb])
    d = np.abs(Xbar @ np.ones(p + 1))
    return Xbar.T @ (d[:, None] * Xbar)


def throughput(p, n_batch=10_000, n_batches=30, online_steps=10, passes=3):
    """Per-batch time of partial_fit and of numpy forming XᵀDX alone: the
    median over a stream, the least of ``passes`` (a stream of ours, then
    the peer on every batch, alternated). Not interleaved batch by batch:
    each then runs in the allocator state it leaves itself (the peer's
    page faults depended on ours otherwise)."""
    X, y, g, batch = make_federated_gaussians(
        n_sites=10, n_batches=n_batches, n_per_batch=n_batch // 10, n_features=p,
        random_state=0)
    classes = np.unique(y)
    batches = [(X[m], y[m], g[m]) for m in (batch == b for b in range(n_batches))]
    ours = peer = np.inf
    for _ in range(passes):
        clf = DWDClassifier(online_steps=online_steps)
        clf.partial_fit(*batches[0][:2], sample_group=batches[0][2], classes=classes)
        times = [_time(lambda: clf.partial_fit(Xb, yb, sample_group=gb))[1]
                 for Xb, yb, gb in batches[1:]]
        ours = min(ours, np.median(times))
        times = [_time(lambda: _numpy_gram(Xb, p))[1] for Xb, _, _ in batches[1:]]
        peer = min(peer, np.median(times))
    return ours, peer


def fixed_cost(p=10, n_batch=100, n_batches=300, passes=5):
    """Per-batch time on tiny batches (the part that does not scale with rows),
    beside SGDClassifier.partial_fit on the same rows: the median over a
    stream, the least of ``passes`` streams per method (methods alternated;
    the least filters out the shared host's interruptions)."""
    X, y, g, batch = make_federated_gaussians(
        n_sites=10, n_batches=n_batches, n_per_batch=n_batch // 10, n_features=p,
        random_state=0)
    classes = np.unique(y)
    batches = [(X[m], y[m], g[m]) for m in (batch == b for b in range(n_batches))]
    makers = {
        "DWDClassifier.partial_fit (online_steps=1, eq. 37)":
            lambda: DWDClassifier(online_steps=1),
        "DWDClassifier.partial_fit (default online_steps=10)": lambda: DWDClassifier(),
        "sklearn SGDClassifier.partial_fit": lambda: SGDClassifier(),
    }
    out = {name: np.inf for name in makers}
    for _ in range(passes):
        for name, make in makers.items():
            est = make()
            sgd = isinstance(est, SGDClassifier)
            times = []
            for b, (Xb, yb, gb) in enumerate(batches):
                kwargs = {} if sgd else {"sample_group": gb}
                if b == 0:
                    est.partial_fit(Xb, yb, classes=classes, **kwargs)
                    continue
                _, t = _time(lambda: est.partial_fit(Xb, yb, **kwargs))
                times.append(t)
            out[name] = min(out[name], np.median(times))
    return out


def stream_memory(p=50, n_batch=100, lengths=(100, 1000)):
    """Peak traced memory of a partial_fit stream of each length (rows are
    generated batch by batch, so only the estimator's state could grow)."""
    out = {}
    for length in lengths:
        rng = np.random.default_rng(0)
        clf = DWDClassifier()
        tracemalloc.start()
        for b in range(length):
            y = rng.integers(0, 2, n_batch)
            X = rng.standard_normal((n_batch, p)) + 0.2 * (2 * y[:, None] - 1)
            clf.partial_fit(X, y, sample_group=np.arange(n_batch) % 10, classes=[0, 1])
        out[length] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return out


def _fit_warned(make, X, y, g):
    """A fit and whether it warned that it did not converge."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model = make().fit(X, y, sample_group=g)
    return model, any(issubclass(w.category, ConvergenceWarning) for w in caught)


def bundled_rows(qs, reps, names=("breast_cancer", "digits", "wine", "iris")):
    """Offline fit on scikit-learn's bundled datasets (standardized, rows
    dealt to 3 sites in turn; all rows and the 70 % training split of issue
    #23) beside LogisticRegression: time, Newton steps and rounds, where
    nearly separable rows make the path long, and whether the fit converged
    at the default ``max_iter`` and at the old default 100."""
    from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    loaders = {"breast_cancer": load_breast_cancer, "digits": load_digits, "wine": load_wine,
               "iris": load_iris}
    rows = []
    for load in (loaders[name] for name in names):
        X_all, y_all = load(return_X_y=True)
        train = train_test_split(X_all, y_all, train_size=0.7, random_state=0)
        for split, (X, y) in (("all", (X_all, y_all)), ("70 %", (train[0], train[2]))):
            X = StandardScaler().fit_transform(X)
            g = np.arange(len(y)) % 3
            for q in qs:
                ours, peer, ours_cpu, peer_cpu = [], [], [], []
                for _ in range(reps):
                    _, wall, cpu = _time_and_cpu(
                        lambda: DWDClassifier(q=q).fit(X, y, sample_group=g))
                    ours.append(wall)
                    ours_cpu.append(cpu)
                    _, wall, cpu = _time_and_cpu(
                        lambda: SkLogisticRegression(max_iter=1000).fit(X, y))
                    peer.append(wall)
                    peer_cpu.append(cpu)
                info = _solver_info(lambda: DWDClassifier(q=q).fit(X, y, sample_group=g))[0]
                warned = _fit_warned(lambda: DWDClassifier(q=q), X, y, g)[1]
                warned_100 = _fit_warned(lambda: DWDClassifier(q=q, max_iter=100), X, y, g)[1]
                rows.append(dict(data=f"{load.__name__.replace('load_', '')} ({split})",
                                 n=len(y), p=X.shape[1], classes=len(np.unique(y)), q=q,
                                 dwd=np.median(ours), lr=np.median(peer),
                                 cpu_ratio=np.median(ours_cpu) / np.median(peer_cpu),
                                 load=os.getloadavg()[0] if hasattr(os, "getloadavg")
                                 else float("nan"),
                                 iters=info["n_iter"], rounds=info["rounds"],
                                 floats=info["floats_sent"], converged=not warned,
                                 converged_100=not warned_100))
                print(rows[-1], flush=True)
    return rows


def conflicting_rows(qs, reps, shapes=((40, 2_000, False), (20, 300, True),
                                        (150, 120, True))):
    """Rows repeated under conflicting labels (issue #23's "found, not
    fixed"): ``n`` Gaussian rows, each twice with independent random labels,
    3 sites, intercept; the factored path at p > n (``dense`` False) or the
    dense path. A pair's loss is flat left of genDWD's kink, so at the
    optimum rows sit next to it. DWD beside LogisticRegression and LinearSVC:
    time, Newton steps, rounds, converged at the default ``max_iter``, the
    relative gap to L-BFGS-B on the same objective."""
    from sklearn.svm import LinearSVC

    rows = []
    for n, p, dense in shapes:
        rng = np.random.default_rng(0)
        X = np.vstack([rng.standard_normal((n, p))] * 2)
        y = rng.integers(0, 2, len(X))
        g = np.arange(len(X)) % 3
        for q in qs:
            ours, peer, svc = [], [], []
            for _ in range(reps):
                with _dense_form() if dense else _no_context():
                    clf, seconds = _time(lambda: _fit_warned(lambda: DWDClassifier(q=q),
                                                             X, y, g))
                ours.append(seconds)
                peer.append(_time(lambda: SkLogisticRegression(max_iter=1000).fit(X, y))[1])
                svc.append(_time(lambda: LinearSVC().fit(X, y))[1])
            model, warned = clf
            with _dense_form() if dense else _no_context():
                info = _solver_info(lambda: DWDClassifier(q=q).fit(X, y, sample_group=g))[0]
            rows.append(dict(n=len(X), p=p, path="dense" if dense else "factored", q=q,
                             dwd=np.median(ours), lr=np.median(peer), svc=np.median(svc),
                             iters=info["n_iter"], rounds=info["rounds"],
                             converged=not warned, gap=_lbfgs_gap(model, X, y, q)))
            print(rows[-1], flush=True)
    return rows


def _no_context():
    return contextlib.nullcontext()


def _digits(split):
    """scikit-learn's digits, standardized, all rows or the 70 % training
    split of issue #23, rows dealt to 3 sites in turn."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y = load_digits(return_X_y=True)
    if split != "all":
        X, _, y, _ = train_test_split(X, y, train_size=0.7, random_state=0)
    return StandardScaler().fit_transform(X), y, np.arange(len(y)) % 3


def profile_rows(ps, qs, reps, n=20_000):
    """Where the fit's time goes (:mod:`_dwd_profile`): wide rows at each p
    and digits (all rows, 70 % split), each q; of ``reps`` fits the one of
    median time."""
    from _dwd_profile import breakdown_line, fit_breakdown

    cases = [(f"wide n = {n:.0e}, p = {p}", lambda p=p: _wide_data(n, p)) for p in ps]
    cases += [(f"digits ({split})", lambda split=split: _digits(split))
              for split in ("all", "70 %")]
    lines = []
    for name, data in cases:
        X, y, g = data()
        for q in qs:
            runs = sorted((fit_breakdown(lambda: DWDClassifier(q=q), X, y, g)
                           for _ in range(reps)), key=lambda row: row["fit"])
            lines.append(breakdown_line(f"{name}, q = {q}", runs[len(runs) // 2])
                         + f" {os.getloadavg()[0]:.1f} |")
            print(lines[-1], flush=True)
    return lines


def _few_rows_data(n, p, seed=0, informative=20):
    """A genomics-shaped simulation (no such dataset ships offline): two
    Gaussian classes that differ in the mean of ``informative`` of the ``p``
    features (shift 0.5 each), the rest noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = rng.standard_normal((n, p))
    X[:, :informative] += 0.5 * (2 * y[:, None] - 1)
    return X, y


@contextlib.contextmanager
def _replaced(module, name, replacement):
    """``module.name`` replaced by ``replacement(original)`` while the
    context runs, restored after."""
    original = getattr(module, name)
    setattr(module, name, replacement(original))
    try:
        yield
    finally:
        setattr(module, name, original)


def _dense_form():
    """A context in which every batch takes the dense ``p1 x p1`` path (the
    path before the factored curvature): the form chosen as if rows were
    never wanted."""
    import skfedpriv.linear_model._renewable as renewable

    return _replaced(renewable, "curvature_form", lambda original: (
        lambda sites, prior, p1, **kw: original(sites, prior, p1, **dict(kw, wanted=False))))


def _unreduced():
    """A context in which the factored path does not move its steps into the
    span of the rows (``linear_model/_row_span.py``): the factored path of
    before, every Newton step passing over the ``p`` columns."""
    import skfedpriv.linear_model._newton as newton

    return _replaced(newton, "reduce_to_row_span", lambda original: lambda *a, **k: None)


def _gradient_start():
    """A context in which the few-rows fit's first grid step runs along the
    gradient (the start before ``linear_model/_piled_start.py``)."""
    import skfedpriv.linear_model._newton as newton

    return _replaced(newton, "piled_direction", lambda original: lambda *a, **k: None)


def _float64_factors():
    """A context in which every few-rows factor is float64 (the early
    Newton systems and the piled direction in float32 from
    ``SINGLE_FROM`` rows switched off)."""
    import skfedpriv.linear_model._factored_curvature as factored

    return _replaced(factored, "SINGLE_FROM", lambda original: 10**9)


def _peak(func):
    """``func()`` and the peak memory tracemalloc traced while it ran."""
    tracemalloc.start()
    try:
        out = func()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _lbfgs_gap(clf, X, y, q=1.0, alpha=1e-3):
    """Relative gap of ``clf``'s point to L-BFGS-B on the same objective
    (``tests/_reference.py``'s independent genDWD), started there."""
    from pathlib import Path

    from scipy.optimize import minimize
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from _reference import gendwd_objective

    Xbar = np.hstack([np.ones((len(X), 1)), X])
    theta = np.r_[clf.intercept_, clf.coef_[0]]
    args = (Xbar, np.where(y == clf.classes_[1], 1.0, -1.0), np.ones(len(X)), q, alpha)
    reference = minimize(gendwd_objective, theta, args=args, jac=True, method="L-BFGS-B",
                         options=dict(gtol=1e-13, ftol=1e-16, maxiter=5000))
    return (gendwd_objective(theta, *args)[0] - reference.fun) / reference.fun


def few_rows_rows(shapes, reps, dense_max_p=2_000):
    """Few rows, many features: DWD's fit (the factored curvature) beside
    LinearSVC and LogisticRegression on the same rows (time, test accuracy
    on 2 000 rows of the same simulation), DWD's peak traced memory over the
    data's, its rounds and numbers sent per site, its relative gap to
    L-BFGS-B on the same objective, and in the same run the Gram matrix
    ``X Xᵀ`` alone (the floor of the steps in the span), the factored path
    without the span (``_unreduced``) and, up to ``dense_max_p`` features,
    the dense ``p1 x p1`` path."""
    from sklearn.metrics import roc_auc_score
    from sklearn.svm import LinearSVC

    from skfedpriv.linear_model._factored_curvature import (
        _HUGEPAGE_SWITCH,
        _ORDINARY_PAGES_FROM,
        _private_copy,
    )

    rows = []
    for n, p in shapes:
        X, y = _few_rows_data(n, p)
        X_test, y_test = _few_rows_data(2_000, p, seed=1)
        methods = {"DWD": lambda: DWDClassifier().fit(X, y),
                   "LinearSVC": lambda: LinearSVC().fit(X, y),
                   "LR": lambda: SkLogisticRegression(max_iter=1000).fit(X, y),
                   # weighted DWD (Qiao et al. 2010): DWD's intercept follows
                   # the class sizes in high dimension
                   "DWD balanced": lambda: DWDClassifier(class_weight="balanced").fit(X, y)}
        def unreduced():
            with _unreduced():
                return DWDClassifier().fit(X, y)
        methods["DWD unreduced"] = unreduced

        def gradient_start():
            with _gradient_start():
                return DWDClassifier().fit(X, y)
        methods["DWD gradient start"] = gradient_start

        def float64_factors():
            with _float64_factors():
                return DWDClassifier().fit(X, y)
        methods["DWD float64 factors"] = float64_factors
        # the Gram matrix alone (one syrk): the floor of every step in the span
        methods["X Xᵀ"] = lambda: X @ X.T
        # the private copy of the rows the state keeps (fresh memory), and
        # numpy's (huge pages advised from 4 MiB on)
        methods["X copy"] = lambda: _private_copy(X)
        methods["numpy copy"] = lambda: X.copy()
        if p <= dense_max_p:
            def dense():
                with _dense_form():
                    return DWDClassifier().fit(X, y)
            methods["DWD dense"] = dense
        times = {name: [] for name in methods}
        # CPU time of this process beside the wall time: on a loaded host the
        # wall time adds the waits for a core, which fall on each method alike
        cpu = {name: [] for name in methods}
        # each repetition in its own (seeded) order: a fixed order made the
        # first method (DWD) always run right after the dense path's 32 MB
        # matrices, on caches and pages they had just taken (an order
        # rotated by one keeps that neighbour)
        order = np.random.default_rng(0)
        for _ in range(reps):
            for name in order.permutation(list(methods)):
                run = methods[name]
                start = time.process_time()
                model, seconds = _time(run)
                cpu[name].append(time.process_time() - start)
                times[name].append(seconds)
        fitted = {name: run() for name, run in methods.items()
                  if name not in ("X Xᵀ", "X copy", "numpy copy")}
        accuracy = {name: float(np.mean(model.predict(X_test) == y_test))
                    for name, model in fitted.items()}
        # the direction alone, whatever the intercept
        auc = {name: float(roc_auc_score(y_test, model.decision_function(X_test)))
               for name, model in fitted.items()}
        peaks = {name: _peak(methods[name])[1] for name in ("DWD", "DWD dense", "LinearSVC")
                 if name in methods}
        # without numpy's huge-page switch the state's copy of large rows lives
        # in a memory map tracemalloc does not see
        if _HUGEPAGE_SWITCH is None and X.nbytes >= _ORDINARY_PAGES_FROM:
            peaks["DWD"] += X.nbytes
        infos = _solver_info(methods["DWD"])
        gradient_infos = _solver_info(gradient_start)
        rows.append(dict(n=n, p=p, seconds={k: float(np.median(v)) for k, v in times.items()},
                         cpu={k: float(np.median(v)) for k, v in cpu.items()},
                         accuracy=accuracy, auc=auc, peaks=peaks, data=X.nbytes,
                         rounds=sum(i["rounds"] for i in infos),
                         floats=sum(i["floats_sent"] for i in infos),
                         iters=sum(i["n_iter"] for i in infos),
                         gradient_iters=sum(i["n_iter"] for i in gradient_infos),
                         gap=float(_lbfgs_gap(methods["DWD"](), X, y))))
        print(rows[-1], flush=True)
    return rows


def few_rows_stream(p, n_batch=100, n_batches=4, reps=3):
    """A stream of ``n_batches`` batches of ``n_batch`` rows (``fit`` on the
    first, ``partial_fit`` on the rest): each call's time (median of
    ``reps`` streams, alternated with the factored path without the span,
    ``_unreduced``) and the bytes of the state it leaves, beside the dense
    ``(p+1)²`` matrix's."""
    X, y = _few_rows_data(n_batch * n_batches, p, seed=2)

    def stream(context):
        clf, seconds, states = DWDClassifier(), [], []
        with context:
            for b in range(n_batches):
                rows = slice(b * n_batch, (b + 1) * n_batch)
                call = clf.fit if b == 0 else clf.partial_fit
                seconds.append(_time(lambda: call(X[rows], y[rows]))[1])
                states.append(clf._training_state.curvature.nbytes)
        return seconds, states

    runs = {"span": [], "unreduced": []}
    for _ in range(reps):
        runs["span"].append(stream(contextlib.nullcontext()))
        runs["unreduced"].append(stream(_unreduced()))
    seconds = {k: np.median([r[0] for r in v], axis=0) for k, v in runs.items()}
    states = runs["span"][0][1]
    calls = [dict(rows_seen=(b + 1) * n_batch, seconds=float(seconds["span"][b]),
                  unreduced=float(seconds["unreduced"][b]), state=states[b],
                  dense=8 * (p + 1) ** 2, data=X[:(b + 1) * n_batch].nbytes)
             for b in range(n_batches)]
    return dict(p=p, n_batch=n_batch, calls=calls)


def _wide_data(n, p, seed=0):
    """Non-separable wide rows (issue #23): the paper's two Gaussian classes
    with the mean offset ``0.2 sqrt(50 / p)`` (the separation of p = 50 at
    every p), 10 sites."""
    X, y, g, _ = make_federated_gaussians(
        n_sites=10, n_batches=max(n // 100, 1), n_per_batch=10, n_features=p,
        mu=0.2 * np.sqrt(50.0 / p), random_state=seed)
    return X, y, g


def _dwd_objective_and_gradient(theta, X, y_pm, loss, alpha):
    """genDWD objective (eq. 5) per unit weight and its gradient, intercept
    first: what scipy's L-BFGS-B minimizes (the loss object's elementwise
    code, so both solvers pay the same per-row cost)."""
    scores = X @ theta[1:]
    scores += theta[0]
    value, derivative = loss.value_and_derivative(y_pm * scores)
    residual = y_pm * derivative / len(X)
    grad = np.empty_like(theta)
    grad[0] = residual.sum()
    grad[1:] = X.T @ residual + alpha * theta[1:]
    return value.mean() + 0.5 * alpha * theta[1:] @ theta[1:], grad


def _lbfgs(X, y_pm, q, alpha=1e-3, maxiter=15_000, history=None):
    from scipy.optimize import minimize

    def callback(intermediate_result):  # scipy passes the result object under this name
        history.append(intermediate_result.fun)

    return minimize(_dwd_objective_and_gradient, np.zeros(X.shape[1] + 1),
                    args=(X, y_pm, GenDWDLoss(q=q), alpha), jac=True, method="L-BFGS-B",
                    callback=None if history is None else callback, options=dict(maxiter=maxiter, maxfun=2 * maxiter,
                                                    gtol=0.0, ftol=0.0, maxcor=10))


def _gram_count(func):
    """Run ``func``; the curvature matrices (Grams, one per model and site
    part) it formed and the info of every ``solve_batch`` call."""
    import skfedpriv.linear_model._dwd_solver as solver_module

    original, count = solver_module.augmented_gram, [0]

    def spy(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    solver_module.augmented_gram = spy
    try:
        infos = _solver_info(func)
    finally:
        solver_module.augmented_gram = original
    return count[0], infos


def _float64_passes(func):
    """Run ``func`` with the L-BFGS phase's passes on the rows as given (no
    float32 copy): the fit of before, in the same run."""
    import skfedpriv.linear_model._dwd_solver as solver_module

    original, solver_module._REDUCED_SIZE = solver_module._REDUCED_SIZE, np.inf
    try:
        return func()
    finally:
        solver_module._REDUCED_SIZE = original


def wide_rows(ps, qs, reps, n=20_000):
    """Wide non-separable rows: our fit beside LogisticRegression (default
    tol and tol = 1e-10, "LRt"), LinearSVC and scipy's L-BFGS-B on the same
    genDWD objective, run to the relative gap our fit reached (at least
    1e-13): L-BFGS-B is run once long to find the iterations that reach it,
    then timed with that many iterations."""
    from sklearn.svm import LinearSVC

    rows = []
    for p in ps:
        X, y, g = _wide_data(n, p)
        y_pm = np.where(y == np.unique(y)[1], 1.0, -1.0)
        for q in qs:
            load_start = os.getloadavg()[0]
            grams, infos = _gram_count(lambda: DWDClassifier(q=q).fit(X, y, sample_group=g))
            clf = DWDClassifier(q=q).fit(X, y, sample_group=g)
            theta = np.r_[clf.intercept_, clf.coef_.ravel()]
            tight = DWDClassifier(q=q, tol=1e-15).fit(X, y, sample_group=g)
            history = []
            long_run = _lbfgs(X, y_pm, q, history=history)
            values = [_dwd_objective_and_gradient(t, X, y_pm, GenDWDLoss(q=q), 1e-3)[0]
                      for t in (theta, np.r_[tight.intercept_, tight.coef_.ravel()])]
            best = min(values[1], long_run.fun, min(history))
            gap = (values[0] - best) / best
            target = max(gap, 1e-13)
            reached = np.flatnonzero((np.array(history) - best) / best <= target)
            lbfgs_iters = int(reached[0]) + 1 if len(reached) else len(history)
            methods = {
                "DWD": lambda: DWDClassifier(q=q).fit(X, y, sample_group=g),
                "DWD float64": lambda: _float64_passes(
                    lambda: DWDClassifier(q=q).fit(X, y, sample_group=g)),
                "L-BFGS-B": lambda: _lbfgs(X, y_pm, q, maxiter=lbfgs_iters),
                "LR": lambda: SkLogisticRegression().fit(X, y),
                "LRt": lambda: SkLogisticRegression(tol=1e-10, max_iter=10_000).fit(X, y),
                "LinearSVC": lambda: LinearSVC().fit(X, y),
            }
            times = {name: [] for name in methods}
            times.update(gram=[], dgemm=[])
            row_curvature = gendwd_smoothed_curvature(
                y_pm * (X @ theta[1:] + theta[0]), q)
            square = np.random.default_rng(0).standard_normal((p, p))
            lbfgs_nfev = None
            for _ in range(reps):
                for name, run in methods.items():
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", ConvergenceWarning)
                        out, seconds = _time(run)
                    if name == "L-BFGS-B":
                        lbfgs_nfev = int(out.nfev)
                    times[name].append(seconds)
                # the curvature matrix at the optimum alone, and the machine's
                # DGEMM rate (a p x p product) in the same run
                times["gram"].append(_time(lambda: augmented_gram(X, row_curvature, True))[1])
                times["dgemm"].append(_time(lambda: square @ square)[1])
            info = infos[0]
            rows.append(dict(n=n, p=p, q=q, seconds={k: float(np.median(v))
                                                     for k, v in times.items()},
                             copy_mb=X.nbytes / 2e6, load=os.getloadavg()[0],
                             load_start=load_start,
                             gap=gap, target=target, grams=grams, iters=info["n_iter"],
                             rounds=info["rounds"], floats=info["floats_sent"],
                             lbfgs_iters=lbfgs_iters, lbfgs_nfev=lbfgs_nfev))
            print(rows[-1], flush=True)
    return rows


def logistic_rows(n, p, reps):
    """Federated logistic models beside SGDClassifier on the same rows."""
    X, y, g, _ = _data(n, p)
    X_test, y_test, _, _ = _data(n // 4, p, seed=1)
    methods = {
        # the local steps the figures of benchmarks/README.md were measured
        # with (the default before #21; the Newton path: bench_logistic_newton.py)
        "skfedpriv LogisticRegression (non-private, local steps)": lambda: LogisticRegression(
            solver="local-steps").fit(X, y, sample_group=g),
        "skfedpriv DecentralizedLogisticRegression (non-private)":
            lambda: DecentralizedLogisticRegression().fit(X, y, sample_group=g),
        "sklearn SGDClassifier(log_loss)": lambda: SGDClassifier(loss="log_loss").fit(X, y),
    }
    rows = []
    for name, run in methods.items():
        times, accs = [], []
        for _ in range(reps):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model, t = _time(run)
            times.append(t)
            accs.append(float(np.mean(model.predict(X_test) == y_test)))
        rows.append(dict(method=name, n=n, p=p, seconds=np.median(times),
                         accuracy=np.mean(accs)))
    return rows


def sites_rows(reps, n=100_000, p=20, counts=(10, 1_000, 10_000)):
    """Fit and one 10 000-row ``partial_fit`` batch with many sites, ``n_jobs``
    None against 2 (alternated): the per-site path groups sites per worker task."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, p))
    y = (X[:, 0] + 2.0 * rng.standard_normal(n) > 0).astype(int)  # not separable
    rows = []
    for n_sites in counts:
        g = rng.integers(0, n_sites, n)
        times = {None: ([], []), 2: ([], [])}
        for _ in range(reps):
            for n_jobs in (None, 2):
                clf, seconds = _time(lambda: DWDClassifier(n_jobs=n_jobs).fit(X, y, sample_group=g))
                times[n_jobs][0].append(seconds)
                batch = slice(0, 10_000)
                _, seconds = _time(lambda: clf.partial_fit(X[batch], y[batch],
                                                           sample_group=g[batch]))
                times[n_jobs][1].append(seconds)
        rows.append(dict(n_sites=n_sites, n=n, p=p,
                         fit=[float(np.median(times[j][0])) for j in (None, 2)],
                         batch=[float(np.median(times[j][1])) for j in (None, 2)]))
    return rows


def main():
    parser = benchmark_parser(__doc__)
    parser.add_argument("--repetitions", type=int, default=None)
    parser.add_argument("--parts", default="offline,bundled,private,partial,logistic,sites",
                        help="comma-separated subset of offline,bundled,private,partial,"
                             "logistic,sites, and fewrows (not in the default; the dense "
                             "path of before only up to p = 2000: it needs GBs beyond), wide (n = 2e4, "
                             "non-separable, p in --wide-p), digits (the bundled "
                             "part on digits alone) and profile (where the fit's time goes: "
                             "wide rows at --wide-p and digits, each q)")
    parser.add_argument("--suffix", default="",
                        help="appended to the results file's name (runs kept apart)")
    parser.add_argument("--wide-p", default="500,2000", help="features of the wide part")
    parser.add_argument("--qs", default="0.5,1,4", help="genDWD exponents of the offline table")
    parser.add_argument("--max-p", type=int, default=None,
                        help="offline sizes with at most this many features")
    parser.add_argument("--min-p", type=int, default=None,
                        help="offline sizes with at least this many features")
    args = parser.parse_args()
    results = output_dir(args.output_dir)
    parts = set(args.parts.split(","))
    qs = tuple(float(q) for q in args.qs.split(","))
    quick = args.quick or os.environ.get("SKFEDPRIV_QUICK") == "1"
    reps = args.repetitions or (3 if quick else 5)
    sizes = [(20_000, 50), (5_000, 200)] if quick else [
        (100_000, 50), (20_000, 500), (20_000, 2000)]
    if args.max_p is not None:
        sizes = [size for size in sizes if size[1] <= args.max_p] or sizes[:1]
    if args.min_p is not None:
        sizes = [size for size in sizes if size[1] >= args.min_p] or sizes[-1:]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    offline = bundled = private = logistic = many_sites = few_rows = streams = wide = []
    conflicting = []
    profile = []
    through = fixed = memory = {}
    with threadpool_limits(1):
        if "offline" in parts:
            offline = offline_rows(sizes, qs, reps)
        if "wide" in parts:
            wide = wide_rows([int(p) for p in args.wide_p.split(",")], qs, reps)
        if "profile" in parts:
            profile = profile_rows([int(p) for p in args.wide_p.split(",")], qs, reps)
        if "bundled" in parts:
            bundled = bundled_rows(qs, reps)
            conflicting = conflicting_rows(qs, reps)
        elif "digits" in parts:
            bundled = bundled_rows(qs, reps, names=("digits",))
        if "private" in parts:
            private = private_rows(*sizes[0], reps)
        if "partial" in parts:
            through = {p: throughput(p, n_batches=8 if quick else 30) for p in (10, 50, 200)}
            fixed = fixed_cost(n_batches=60 if quick else 300)
            memory = stream_memory(lengths=(20, 200) if quick else (100, 1000))
        if "logistic" in parts:
            logistic = logistic_rows(5_000 if quick else 20_000, 20, reps)
        if "fewrows" in parts:
            few_rows = few_rows_rows([(n, p) for n in (100, 400)
                                      for p in (2_000, 10_000, 20_000)
                                      if p <= (args.max_p or 20_000)], reps)
            streams = [few_rows_stream(p) for p in (2_000, 10_000)
                       if p <= (args.max_p or 20_000)]
            few_rows_load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        if "sites" in parts:
            many_sites = sites_rows(reps, n=20_000 if quick else 100_000,
                                    counts=(10, 1_000) if quick else (10, 1_000, 10_000))

    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared: load average "
        f"{load:.1f} at the start), Python {platform.python_version()}, one BLAS thread; "
        f"{time.strftime('%Y-%m-%d')}; medians of {reps} repetitions, methods alternated.",
    ]
    if offline:
        lines += [
            "",
            "**Offline fit** (two Gaussian classes, 10 sites, alpha = 1e-3, default tol = 1e-12; "
            "gap to the same solver at tol = 1e-15) vs "
            "scikit-learn LogisticRegression (lbfgs) on the pooled rows, same run:",
            "",
            "| n, p | q | DWD fit s | LR s | ratio | CPU-time ratio | of which: curvature at "
            "optimum s | curvature at optimum / LR | relative objective gap | iterations | "
            "LR iterations | rounds | numbers sent per site | load |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    for r in offline:
        lines.append(
            f"| {r['n']:.0e}, {r['p']} | {r['q']} | {r['dwd']:.3f} | {r['lr']:.3f} | "
            f"{r['ratio']:.2f}× | {r['cpu_ratio']:.2f}× | {r['state']:.3f} | "
            f"{r['state'] / r['lr']:.1f}× | {r['gap']:.1e} | {r['iters']} | {r['lr_iters']} | "
            f"{r['rounds']} | {r['floats']:,} ({8 * r['floats'] / 1e3:.0f} kB) | "
            f"{r['load']:.1f} |")
    if wide:
        lines += ["", "**Wide, non-separable** (two Gaussian classes, mean offset "
                  "0.2 sqrt(50/p), 10 sites, alpha = 1e-3, default tol = 1e-12) beside "
                  "LogisticRegression (default tol; LRt: tol = 1e-10), LinearSVC and scipy "
                  "L-BFGS-B on the same genDWD objective to the relative gap our fit reached "
                  "(at least 1e-13), same run:", "",
                  "| n, p | q | DWD s | DWD float64 passes s | L-BFGS-B s | LR s | LRt s | "
                  "LinearSVC s | DWD / L-BFGS-B | DWD / LRt | DWD minus the matrix s | "
                  "that / L-BFGS-B | that / LRt | matrix alone / LRt | relative gap | curvature "
                  "matrices | Newton steps | rounds | numbers sent per site | L-BFGS-B "
                  "iterations / evaluations | float32 copy MB | curvature matrix alone s "
                  "(GFlop/s: n p1² / s) | DGEMM p³ GFlop/s (2 p³ / s) | load (row's start → end) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
                  "---|---|---|---|---|---|"]
        for r in wide:
            t = r["seconds"]
            # what the fit costs beyond the curvature matrix fit owes the
            # renewable state (the matrix alone timed in the same run)
            rest = t["DWD"] - t["gram"]
            lines.append(
                f"| {r['n']:.0e}, {r['p']} | {r['q']} | {t['DWD']:.3f} | "
                f"{t['DWD float64']:.3f} | {t['L-BFGS-B']:.3f} | "
                f"{t['LR']:.3f} | {t['LRt']:.3f} | {t['LinearSVC']:.3f} | "
                f"{t['DWD'] / t['L-BFGS-B']:.2f}× | {t['DWD'] / t['LRt']:.2f}× | "
                f"{rest:.3f} | {rest / t['L-BFGS-B']:.2f}× | {rest / t['LRt']:.2f}× | "
                f"{t['gram'] / t['LRt']:.2f}× | {r['gap']:.1e} | {r['grams']} | "
                f"{r['iters']} | {r['rounds']} | "
                f"{r['floats']:,} | {r['lbfgs_iters']} / {r['lbfgs_nfev']} | "
                f"{r['copy_mb']:.0f} | {t['gram']:.3f} "
                f"({r['n'] * (r['p'] + 1) ** 2 / t['gram'] / 1e9:.0f}) | "
                f"{2 * r['p'] ** 3 / t['dgemm'] / 1e9:.0f} | "
                f"{r['load_start']:.1f} → {r['load']:.1f} |")
    if profile:
        from _dwd_profile import BREAKDOWN_HEADER

        lines += ["", "**Where the fit's time goes** (timers around the solver's steps, "
                  "one BLAS thread; of the repetitions the fit of median time; last column "
                  "the load average at the end of the row):", "",
                  BREAKDOWN_HEADER[0] + " load |", BREAKDOWN_HEADER[1] + "---|"] + profile
    if bundled:
        lines += ["", "**scikit-learn's bundled datasets** (standardized, 3 sites, "
                  "alpha = 1e-3, one-vs-rest beyond two classes) beside LogisticRegression "
                  "(lbfgs, max_iter = 1000), same run:", "",
                  "| data | n, p, classes | q | DWD fit s | LR s | ratio | CPU-time ratio | "
                  "Newton steps | rounds | numbers sent per site | converged (default "
                  "max_iter) | converged (max_iter = 100) | load |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['data']} | {r['n']}, {r['p']}, {r['classes']} | {r['q']} | "
                  f"{r['dwd']:.4f} | {r['lr']:.4f} | {r['dwd'] / r['lr']:.2f}× | "
                  f"{r['cpu_ratio']:.2f}× | {r['iters']} | "
                  f"{r['rounds']} | {r['floats']:,} | {'yes' if r['converged'] else 'NO'} | "
                  f"{'yes' if r['converged_100'] else 'NO'} | {r['load']:.1f} |"
                  for r in bundled]
    if conflicting:
        lines += ["", "**Rows repeated under conflicting labels** (each of n/2 Gaussian rows "
                  "twice with independent random labels, 3 sites, alpha = 1e-3) beside "
                  "LogisticRegression (max_iter = 1000) and LinearSVC, same run:", "",
                  "| n, p | path | q | DWD fit s | LR s | LinearSVC s | Newton steps | rounds | "
                  "converged | relative gap to L-BFGS-B |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['n']}, {r['p']} | {r['path']} | {r['q']} | {r['dwd']:.3f} | "
                  f"{r['lr']:.3f} | {r['svc']:.3f} | {r['iters']} | {r['rounds']} | "
                  f"{'yes' if r['converged'] else 'NO'} | {r['gap']:.1e} |" for r in conflicting]
    if private:
        lines += ["", f"Private one-batch fit at n={sizes[0][0]}, p={sizes[0][1]} (same run, "
                  "LR beside):", "", "| mechanism | seconds | LR s |", "|---|---|---|"]
        lines += [f"| {r['mechanism']} | {r['seconds']:.3f} | {r['lr']:.3f} |" for r in private]
    if through:
        lines += ["", "**partial_fit**, 10 000-row batches of 10 sites, default online_steps=10 "
                  "(median over a stream, least of 3 streams):",
                  "", "| p | partial_fit ms | numpy XᵀDX alone ms | throughput ratio |",
                  "|---|---|---|---|"]
        for p, (ours, peer) in through.items():
            lines.append(f"| {p} | {1e3 * ours:.2f} | {1e3 * peer:.2f} | {peer / ours:.2f} |")
        lines += ["", "Fixed cost per batch (100-row batches, p = 10; median over a "
                  "stream, least of 5 streams):", ""]
        lines += [f"- {k}: {1e3 * v:.2f} ms" for k, v in fixed.items()]
        lines += ["", "Peak traced memory of a partial_fit stream (100-row batches, p = 50): "
                  + ", ".join(f"{k} batches {v / 1e6:.2f} MB" for k, v in memory.items()) + "."]
    if logistic:
        lines += ["", "**Logistic models** beside SGDClassifier, same rows "
                  f"(n={logistic[0]['n']}, p={logistic[0]['p']}, 10 sites):", "",
                  "| method | seconds | test accuracy |", "|---|---|---|"]
        lines += [f"| {r['method']} | {r['seconds']:.3f} | {r['accuracy']:.3f} |"
                  for r in logistic]
    if many_sites:
        lines += ["", f"**Many sites** (n={many_sites[0]['n']}, p={many_sites[0]['p']}, "
                  "non-separable; a fit, then one 10 000-row partial_fit batch), n_jobs=None "
                  "against n_jobs=2, same run (one BLAS thread each):", "",
                  "| sites | fit s, n_jobs=None | fit s, n_jobs=2 | ratio | batch ms, None | "
                  "batch ms, 2 | ratio |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['n_sites']:,} | {r['fit'][0]:.3f} | {r['fit'][1]:.3f} | "
                  f"{r['fit'][1] / r['fit'][0]:.2f} | {1e3 * r['batch'][0]:.1f} | "
                  f"{1e3 * r['batch'][1]:.1f} | {r['batch'][1] / r['batch'][0]:.2f} |"
                  for r in many_sites]
    if few_rows:
        lines += ["", "**Few rows, many features** (simulation: 20 of p features "
                  "informative; test accuracy on 2 000 rows; DWD with the factored "
                  "curvature and its steps in the span of the rows, the Gram matrix X Xᵀ "
                  "alone, the factored path without the span (every step over the p "
                  "columns), and up to p = 2000 the dense path), same run, the methods in a "
                  "new random order each repetition; "
                  "peak memory traced by tracemalloc (numpy's allocations: liblinear's "
                  "own copy of the rows is not traced; DWD's copy of the rows is, or is "
                  "added where it is made in a memory map):", "",
                  "| n, p | DWD s | DWD gradient start s | X Xᵀ alone s | "
                  "state's copy of X alone s | numpy X.copy() s | DWD unreduced s | "
                  "DWD dense s | LinearSVC s | "
                  "LR s | DWD / LinearSVC | "
                  "DWD peak MB (× data) | dense peak MB | LinearSVC traced MB | "
                  "Newton steps (gradient start) | rounds | numbers sent per site | "
                  "gap to L-BFGS-B | "
                  "accuracy DWD / DWD balanced / LinearSVC / LR | "
                  "test AUC DWD / LinearSVC / LR |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in few_rows:
            t, peaks, mb = r["seconds"], r["peaks"], 1e6
            dense = f"{t['DWD dense']:.3f}" if "DWD dense" in t else "not run"
            dense_peak = f"{peaks['DWD dense'] / mb:.0f}" if "DWD dense" in peaks else "not run"
            lines.append(
                f"| {r['n']}, {r['p']} | {t['DWD']:.4f} | {t['DWD gradient start']:.4f} | "
                f"{t['X Xᵀ']:.4f} | {t['X copy']:.4f} | "
                f"{t['numpy copy']:.4f} | "
                f"{t['DWD unreduced']:.4f} | {dense} | {t['LinearSVC']:.4f} | "
                f"{t['LR']:.4f} | {t['DWD'] / t['LinearSVC']:.2f}× | "
                f"{peaks['DWD'] / mb:.0f} ({peaks['DWD'] / r['data']:.1f}×) | {dense_peak} | "
                f"{peaks['LinearSVC'] / mb:.0f} | {r['iters']} ({r['gradient_iters']}) | "
                f"{r['rounds']} | "
                f"{r['floats']:,} | {r['gap']:.1e} | {r['accuracy']['DWD']:.3f} / "
                f"{r['accuracy']['DWD balanced']:.3f} / "
                f"{r['accuracy']['LinearSVC']:.3f} / {r['accuracy']['LR']:.3f} | "
                f"{r['auc']['DWD']:.3f} / {r['auc']['LinearSVC']:.3f} / {r['auc']['LR']:.3f} |")
        lines += ["", "CPU time of the process (medians, the same fits): the time without "
                  "the waits for a core on a shared host:", "",
                  "| n, p | DWD s | DWD gradient start s | DWD float64 factors s | "
                  "X Xᵀ alone s | LinearSVC s | LR s | "
                  "DWD / LinearSVC | gradient start / LinearSVC | float64 factors / LinearSVC |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['n']}, {r['p']} | {r['cpu']['DWD']:.4f} | "
                  f"{r['cpu']['DWD gradient start']:.4f} | "
                  f"{r['cpu']['DWD float64 factors']:.4f} | {r['cpu']['X Xᵀ']:.4f} | "
                  f"{r['cpu']['LinearSVC']:.4f} | {r['cpu']['LR']:.4f} | "
                  f"{r['cpu']['DWD'] / r['cpu']['LinearSVC']:.2f}× | "
                  f"{r['cpu']['DWD gradient start'] / r['cpu']['LinearSVC']:.2f}× | "
                  f"{r['cpu']['DWD float64 factors'] / r['cpu']['LinearSVC']:.2f}× |"
                  for r in few_rows]
        lines += ["", f"Load average after this part: {few_rows_load:.1f}."]
    if streams:
        lines += ["", "**Few rows, a stream**: `fit` on 100 rows, then `partial_fit` "
                  "batches of 100; the state (`curvature_`) after each call beside the "
                  "dense matrix:", "",
                  "| p | rows seen | call s | call s, unreduced | state MB | dense (p+1)² MB | "
                  "rows seen MB |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['p']} | {c['rows_seen']} | {c['seconds']:.3f} | "
                  f"{c['unreduced']:.3f} | "
                  f"{c['state'] / 1e6:.1f} | {c['dense'] / 1e6:.0f} | {c['data'] / 1e6:.1f} |"
                  for r in streams for c in r["calls"]]
    text = "\n".join(lines) + "\n"
    every = {"offline", "bundled", "private", "partial", "logistic", "sites"}
    suffix = "_quick" if quick else ("" if parts == every else "_" + "_".join(sorted(parts)))
    if args.min_p is not None or args.max_p is not None:
        suffix += f"_p{args.min_p or ''}-{args.max_p or ''}"
    suffix += args.suffix
    (results / f"dwd_speed{suffix}.md").write_text(text)
    print(text)
    wrote(results / f"dwd_speed{suffix}.md")


if __name__ == "__main__":
    main()
