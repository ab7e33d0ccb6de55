"""Private DWD: accuracy against ε.

Two data sets: the Table 1 balanced setting of the genDWD paper (M=10 sites,
b=100 batches of 10 rows per site, p=50, μ=0.2) and scikit-learn's breast
cancer data split into 4 non-IID sites and streamed in 8 batches. For each ε
in 0.05..10: 'laplace' and 'gaussian' (Algorithm 2, one release per batch,
per-release guarantee) and 'local-gaussian' (guarantee over the whole
stream, against the server), beside the non-private stream. diffprivlib's
central ε-DP LogisticRegression on pooled rows is added from
``dwd_epsilon_diffprivlib.csv`` of the output folder when that file exists (it needs
scikit-learn <= 1.7 and runs in its own environment:
``bench_diffprivlib.py``).

    python benchmarks/bench_dwd_epsilon.py [--quick]

Writes dwd_epsilon.csv, .md and .png (``*_quick`` files with ``--quick``)
into ``--output-dir`` (default ``benchmarks/results``) and prints their paths.

Breast cancer is standardized with statistics of the training rows; that
step reads the data and is outside every guarantee (see docs).
"""

import csv
import os
import warnings

import numpy as np
from sklearn.model_selection import train_test_split

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv import DWDClassifier
from skfedpriv._progress import progress
from skfedpriv.datasets import load_breast_cancer_sites, make_federated_gaussians

from _output import benchmark_parser, output_dir, wrote

EPSILONS = [0.05, 0.1, 0.2, 0.5, 0.8, 1.0, 2.0, 5.0, 10.0]


def gaussian_task(seed):
    X, y, g, b = make_federated_gaussians(n_sites=10, n_batches=100, n_per_batch=10,
                                          n_features=50, random_state=seed)
    Xt, yt, _, _ = make_federated_gaussians(n_sites=10, n_batches=20, n_per_batch=10,
                                            n_features=50, random_state=1000 + seed)
    return X, y, g, b, Xt, yt, float(np.sqrt(1 + 1.5 * 50))


def cancer_task(seed):
    X, y, g = load_breast_cancer_sites(n_sites=4, random_state=seed)
    X, Xt, y, yt, g, _ = train_test_split(X, y, g, test_size=0.3, stratify=y, random_state=seed)
    mean, std = X.mean(0), X.std(0)
    X, Xt = (X - mean) / std, (Xt - mean) / std
    b = np.repeat(np.arange(8), int(np.ceil(len(y) / 8)))[: len(y)]
    return X, y, g, b, Xt, yt, float(np.sqrt(1 + 30))


def stream(clf, X, y, g, b):
    classes = np.unique(y)
    for k in np.unique(b):
        m = b == k
        clf.partial_fit(X[m], y[m], sample_group=g[m], classes=classes)
    return clf


TASKS = (("gaussian T1", gaussian_task), ("breast cancer", cancer_task))


def sweep_design(description):
    """Repetitions, ε grid, file tag and output folder from the command line
    (``--quick``, ``--output-dir``), shared with bench_diffprivlib.py so both
    sweeps run on the same splits."""
    parser = benchmark_parser(description)
    args = parser.parse_args()
    quick = args.quick or os.environ.get("SKFEDPRIV_QUICK") == "1"
    results = output_dir(args.output_dir)
    # quick runs write *_quick files, so they never replace the full results
    return (2, [0.1, 1.0, 10.0], "_quick", results) if quick else (10, EPSILONS, "", results)


def main():
    reps, epsilons, tag, results = sweep_design(__doc__)
    rows = []
    for task_name, task in TASKS:
        for rep in progress(range(reps), label=task_name):
            X, y, g, b, Xt, yt, clip = task(rep)
            base = stream(DWDClassifier(), X, y, g, b).score(Xt, yt)
            rows.append(dict(task=task_name, method="non-private stream", epsilon="inf",
                             rep=rep, accuracy=base))
            for eps in epsilons:
                for mech in ("laplace", "gaussian", "local-gaussian"):
                    clf = DWDClassifier(mechanism=mech, epsilon=eps, delta=1e-5, clip_norm=clip,
                                        online_steps=1, random_state=rep)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        try:
                            acc = stream(clf, X, y, g, b).score(Xt, yt)
                        except ValueError:  # no valid calibration at this ε
                            acc = float("nan")
                    rows.append(dict(task=task_name, method=mech, epsilon=eps, rep=rep, accuracy=acc))
        print("done", task_name, flush=True)
    with open(results / f"dwd_epsilon{tag}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    wrote(results / f"dwd_epsilon{tag}.csv")
    extra = results / f"dwd_epsilon_diffprivlib{tag}.csv"
    if extra.exists():
        with open(extra) as fh:
            rows += [dict(r, accuracy=float(r["accuracy"])) for r in csv.DictReader(fh)]
    summary = {}
    for r in rows:
        summary.setdefault((r["task"], r["method"], str(r["epsilon"])), []).append(float(r["accuracy"]))
    lines = ["| task | method | ε | accuracy (mean ± sd) |", "|---|---|---|---|"]
    for (task, method, eps), accs in summary.items():
        lines.append(f"| {task} | {method} | {eps} | {np.nanmean(accs):.3f} ± {np.nanstd(accs):.3f} |")
    text = "\n".join(lines) + "\n"
    (results / f"dwd_epsilon{tag}.md").write_text(text)
    print(text)
    wrote(results / f"dwd_epsilon{tag}.md")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, task in zip(axes, ("gaussian T1", "breast cancer")):
        for method in ("laplace", "gaussian", "local-gaussian", "diffprivlib LogisticRegression (central, pooled)"):
            pts = sorted((float(e), np.nanmean(a)) for (t, m, e), a in summary.items()
                         if t == task and m == method)
            if pts:
                ax.plot(*zip(*pts), marker="o", label=method)
        base = [np.mean(a) for (t, m, e), a in summary.items() if t == task and m == "non-private stream"]
        ax.axhline(base[0], color="k", ls="--", label="non-private stream")
        ax.set_xscale("log")
        ax.set_xlabel("ε")
        ax.set_ylabel("test accuracy")
        ax.set_title(task)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(results / f"dwd_epsilon{tag}.png", dpi=110)
    wrote(results / f"dwd_epsilon{tag}.png")


if __name__ == "__main__":
    main()
