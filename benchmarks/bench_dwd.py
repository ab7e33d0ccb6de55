"""DWD benchmarks: the settings of Tables 1-3 of the genDWD paper.

For each setting, over repetitions: our offline federated ``fit`` (OffWP),
our ``partial_fit`` stream with the published single step (OnWP, eq. 37) and
with the default renewable solve, and scikit-learn's ``LinearSVC`` and
``LogisticRegression`` on the pooled rows, all timed in the same run.
Accuracy on a fresh test set with the training class ratio, and balanced
accuracy. Also the ``partial_fit`` throughput against numpy forming the
batch's XᵀDX, and offline ``fit`` at n = 100 000, p = 50 beside LinearSVC.

    python benchmarks/bench_dwd.py            # full (minutes)
    python benchmarks/bench_dwd.py --quick    # seconds

Writes ``dwd.csv``, ``.md`` and ``.png`` (``dwd_quick.*`` with ``--quick``)
into ``--output-dir`` (default ``benchmarks/results``) and prints their paths.
"""

import os
import platform
import time
import warnings

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score
from sklearn.svm import LinearSVC

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv import DWDClassifier
from skfedpriv._progress import progress
from skfedpriv.datasets import gaussian_bayes_accuracy, make_federated_gaussians

from _output import benchmark_parser, output_dir, wrote


# name, n_sites M, batches b, p, mu, mu_range, sigma_range, ratio
SETTINGS = [
    ("T1 balanced M=10 b=100", 10, 100, 50, 0.2, None, None, 1.0),
    ("T1 balanced M=10 b=1000", 10, 1000, 50, 0.2, None, None, 1.0),
    ("T1 4:1 M=10 b=100", 10, 100, 50, 0.2, None, None, 4.0),
    ("T1 4:1 M=10 b=1000", 10, 1000, 50, 0.2, None, None, 4.0),
    ("T2 balanced M=20 b=100 p=100", 20, 100, 100, 0.2, None, None, 1.0),
    ("T2 4:1 M=20 b=100 p=100", 20, 100, 100, 0.2, None, None, 4.0),
    ("T3 balanced mu~U(0,0.3) sigma~U(0.1,1)", 20, 100, 50, None, (0, 0.3), (0.1, 1), 1.0),
    ("T3 4:1 mu~U(0,0.3) sigma~U(0.1,1)", 20, 100, 50, None, (0, 0.3), (0.1, 1), 4.0),
]


EPS, DELTA = 0.8, 1e-5


def _clip(p):
    """Data-independent clip of (1, x): the design has σ <= 1 and |μ| <= 0.3,
    so E‖x‖² <= 1.09 p; 1.5 p leaves room for the spread."""
    return float(np.sqrt(1.0 + 1.5 * p))


def _stream(clf, X, y, g, batch):
    starts = np.flatnonzero(np.r_[True, batch[1:] != batch[:-1]])
    ends = np.r_[starts[1:], len(batch)]
    for s, e in zip(starts, ends):
        clf.partial_fit(X[s:e], y[s:e], sample_group=g[s:e], classes=[-1, 1])
    return clf


def run_setting(setting, n_per_batch, repetitions, seed):
    name, M, b, p, mu, mu_range, sigma_range, ratio = setting
    rows = []
    for rep in progress(range(repetitions), label=name[:28]):
        kwargs = dict(n_sites=M, n_batches=b, n_per_batch=n_per_batch, n_features=p, ratio=ratio)
        if mu is None:
            kwargs.update(mu_range=mu_range, sigma_range=sigma_range)
        else:
            kwargs.update(mu=mu)
        # sites draw their (mu, sigma) from the same seed for train and test
        X, y, g, batch = make_federated_gaussians(random_state=seed + rep, **kwargs)
        X_test, y_test, _, _ = make_federated_gaussians(random_state=seed + rep, **{
            **kwargs, "n_batches": max(b // 4, 10)})
        if mu is not None:  # fresh draws for fixed (mu, sigma)
            X_test, y_test, _, _ = make_federated_gaussians(
                random_state=10_000 + seed + rep, **{**kwargs, "n_batches": max(b // 4, 10)})
        methods = {
            "OffWP (fit)": lambda: DWDClassifier().fit(X, y, sample_group=g),
            "OnWP published (online_steps=1)": lambda: _stream(
                DWDClassifier(online_steps=1), X, y, g, batch),
            "OnWP renewable (default)": lambda: _stream(DWDClassifier(), X, y, g, batch),
            "OnWDP laplace (Alg. 2)": lambda: _stream(DWDClassifier(
                mechanism="laplace", epsilon=EPS, clip_norm=_clip(p), random_state=rep), X, y, g, batch),
            "OnWDP gaussian (Alg. 2)": lambda: _stream(DWDClassifier(
                mechanism="gaussian", epsilon=EPS, delta=DELTA, clip_norm=_clip(p),
                random_state=rep), X, y, g, batch),
            "OnWDP local-gaussian (stream-wide)": lambda: _stream(DWDClassifier(
                mechanism="local-gaussian", epsilon=EPS, delta=DELTA, clip_norm=_clip(p),
                online_steps=1, random_state=rep), X, y, g, batch),
            "sklearn LinearSVC pooled": lambda: LinearSVC().fit(X, y),
            "sklearn LogisticRegression pooled": lambda: LogisticRegression().fit(X, y),
        }
        for method, run in methods.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                model = run()
                seconds = time.perf_counter() - start
            pred = model.predict(X_test)
            rows.append(dict(
                setting=name, method=method, rep=rep, n_train=len(y),
                accuracy=float(np.mean(pred == y_test)),
                balanced_accuracy=float(balanced_accuracy_score(y_test, pred)),
                seconds=seconds,
            ))
    return rows


def throughput(p=50, n_batch=10_000, n_batches=50, seed=0):
    """partial_fit time per batch vs numpy forming the batch's XᵀDX."""
    X, y, g, batch = make_federated_gaussians(
        n_sites=10, n_batches=n_batches, n_per_batch=n_batch // 10, n_features=p, random_state=seed)
    clf = DWDClassifier()
    clf.partial_fit(X[batch == 0], y[batch == 0], sample_group=g[batch == 0], classes=[-1, 1])
    ours, numpy_only = [], []
    for b in range(1, n_batches):
        m = batch == b
        Xb, yb, gb = X[m], y[m], g[m]
        start = time.perf_counter()
        clf.partial_fit(Xb, yb, sample_group=gb)
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        Xbar = np.hstack([np.ones((len(Xb), 1)), Xb])
        d = np.abs(Xbar @ np.ones(p + 1))
        _ = Xbar.T @ (d[:, None] * Xbar)
        numpy_only.append(time.perf_counter() - start)
    return float(np.median(ours)), float(np.median(numpy_only))


def large_fit(n=100_000, p=50, seed=0):
    X, y, g, _ = make_federated_gaussians(
        n_sites=10, n_batches=n // 100, n_per_batch=10, n_features=p, random_state=seed)
    out = {}
    for name, run in {
        "DWDClassifier.fit (10 sites)": lambda: DWDClassifier().fit(X, y, sample_group=g),
        "sklearn LinearSVC": lambda: LinearSVC().fit(X, y),
    }.items():
        start = time.perf_counter()
        run()
        out[name] = time.perf_counter() - start
    return out


def main():
    parser = benchmark_parser(__doc__)
    parser.add_argument("--repetitions", type=int, default=None)
    parser.add_argument("--timing-only", action="store_true",
                        help="only the throughput and the n=100 000 fit (run on an idle machine)")
    args = parser.parse_args()
    results = output_dir(args.output_dir)
    if args.timing_only:
        ours, numpy_only = throughput()
        big = large_fit()
        text = (f"partial_fit on a 10 000-row batch, p=50, 10 sites: {ours * 1e3:.1f} ms; numpy "
                f"forming XᵀDX alone: {numpy_only * 1e3:.1f} ms; ratio {numpy_only / ours:.2f}.\n"
                "Offline fit on n=100000 rows, p=50: "
                + ", ".join(f"{k} {v:.3f} s" for k, v in big.items()) + ".\n")
        (results / "dwd_timing.md").write_text(text)
        print(text)
        wrote(results / "dwd_timing.md")
        return
    quick = args.quick or os.environ.get("SKFEDPRIV_QUICK") == "1"
    tag = "_quick" if quick else ""  # quick runs never replace the full results
    reps = args.repetitions or (2 if quick else 10)
    settings = SETTINGS[:1] + SETTINGS[2:3] if quick else SETTINGS
    n_per_batch = 10
    rows = []
    for setting in settings:
        rows += run_setting(setting, n_per_batch, reps, seed=0)
        print(f"done: {setting[0]}", flush=True)
    import csv

    with open(results / f"dwd{tag}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    wrote(results / f"dwd{tag}.csv")

    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; date {time.strftime('%Y-%m-%d')}; "
        f"{reps} repetitions, {n_per_batch} rows per site per batch.",
        "",
        "| setting | method | accuracy % (sd) | balanced acc. % | time s |",
        "|---|---|---|---|---|",
    ]
    keys = []
    for r in rows:
        if (r["setting"], r["method"]) not in keys:
            keys.append((r["setting"], r["method"]))
    for setting, method in keys:
        sel = [r for r in rows if r["setting"] == setting and r["method"] == method]
        acc = np.array([r["accuracy"] for r in sel]) * 100
        bal = np.array([r["balanced_accuracy"] for r in sel]) * 100
        sec = np.array([r["seconds"] for r in sel])
        lines.append(f"| {setting} | {method} | {acc.mean():.2f} ({acc.std():.2f}) | "
                     f"{bal.mean():.2f} | {sec.mean():.3f} |")
    lines += ["", "Bayes accuracy, p=50, mu=0.2: balanced "
              f"{100 * gaussian_bayes_accuracy(50, 0.2, 1, 1):.2f}%, 4:1 "
              f"{100 * gaussian_bayes_accuracy(50, 0.2, 1, 4):.2f}%; p=100: balanced "
              f"{100 * gaussian_bayes_accuracy(100, 0.2, 1, 1):.2f}%, 4:1 "
              f"{100 * gaussian_bayes_accuracy(100, 0.2, 1, 4):.2f}%."]
    ours, numpy_only = throughput(n_batches=5 if quick else 50)
    lines += ["", f"partial_fit on a 10 000-row batch, p=50, 10 sites: {ours * 1e3:.1f} ms; "
              f"numpy forming XᵀDX alone: {numpy_only * 1e3:.1f} ms; "
              f"throughput ratio (numpy time / ours) = {numpy_only / ours:.2f}."]
    big = large_fit(n=20_000 if quick else 100_000)
    lines += ["", "Offline fit on n={} rows, p=50: ".format(20_000 if quick else 100_000)
              + ", ".join(f"{k} {v:.3f} s" for k, v in big.items()) + "."]
    text = "\n".join(lines) + "\n"
    (results / f"dwd{tag}.md").write_text(text)
    print(text)
    wrote(results / f"dwd{tag}.md")
    plot(rows, keys, results / f"dwd{tag}.png")


def plot(rows, keys, path):
    """Accuracy of every method in every setting (mean ± sd over repetitions)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    settings = list(dict.fromkeys(k[0] for k in keys))
    methods = list(dict.fromkeys(k[1] for k in keys))
    fig, ax = plt.subplots(figsize=(12, 5.5))
    width = 0.8 / len(methods)
    for j, method in enumerate(methods):
        means, sds = [], []
        for setting in settings:
            acc = [100 * r["accuracy"] for r in rows
                   if r["setting"] == setting and r["method"] == method]
            means.append(np.mean(acc))
            sds.append(np.std(acc))
        ax.bar(np.arange(len(settings)) + j * width, means, width, yerr=sds, label=method)
    ax.set_xticks(np.arange(len(settings)) + 0.4 - width / 2)
    ax.set_xticklabels(settings, rotation=15, ha="right", fontsize=7)
    ax.set_ylim(50, 100)
    ax.set_ylabel("test accuracy %")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.28))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    wrote(path)


if __name__ == "__main__":
    main()
