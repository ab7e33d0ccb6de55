"""DWD coefficient inference: coverage of nominal 95 % Wald intervals.

Simulation study of ``DWDClassifier(inference=True)`` on the genDWD paper's
two-Gaussian design (``make_federated_gaussians``, μ = 0.2, σ = 1, 5 sites,
20 batches; balanced or 4:1 classes), for n in {2 000, 20 000}, p in {5, 20},
q in {1, 4}: the offline ``fit`` on all rows and the 20-batch
``partial_fit`` stream. The target of every interval is the population
minimizer at the same ``alpha`` (``gaussian_gendwd_target``, computed by
quadrature, independent of the estimator). Each cell reports the coverage
pooled over the p + 1 parameters, the smallest and largest coverage of one
parameter, the mean interval width of the coefficients and of the
intercept, the range over parameters of the mean standard error over the
estimates' standard deviation across replications (1 when the variance is
right) and the largest |bias| of an estimate in units of that deviation. With R replications a correct interval's coverage has Monte Carlo
standard error sqrt(0.95 · 0.05 / R) (0.69 % at R = 1 000).

Private cells (ε in {1, 4}): ``mechanism='local-gaussian'`` with
``clip_norm = 2 sqrt(1 + p)`` (above the rows' norms but for a fraction
< 1e-3 at p = 5, so the clip barely moves the target), offline ``fit`` only
(a private stream's later batches carry no covariance yet: listed as not
offered). Each private replication also fits the non-private interval on
the same rows: "width vs non-private" is the mean ratio of the widths.

    python benchmarks/bench_inference.py [--quick] [--reps R] [--n-jobs J] [--private-only] [--features P ...]

Writes inference.csv and inference.md (``*_quick`` with ``--quick``) into
``--output-dir`` (default ``benchmarks/results``); the CSV is rewritten after
each cell, so an interrupted run keeps the cells it finished.
"""

import csv
import itertools
import math
import os
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from joblib import Parallel, delayed  # noqa: E402

from skfedpriv import DWDClassifier  # noqa: E402
from skfedpriv.datasets import gaussian_gendwd_target, make_federated_gaussians  # noqa: E402

from _output import benchmark_parser, output_dir, wrote  # noqa: E402

MU, SIGMA, SITES, BATCHES = 0.2, 1.0, 5, 20
FIELDS = ["n", "p", "q", "classes", "mode", "mechanism", "epsilon", "reps", "coverage",
          "coverage_min", "coverage_max", "mc_se", "width_coef", "width_intercept",
          "width_ratio", "unresolved", "se_ratio_min", "se_ratio_max", "bias_max", "seconds"]


def private_estimator(q, p, epsilon, seed):
    """The private fit of a cell (seeded for a reproducible study)."""
    return DWDClassifier(q=q, inference=True, mechanism="local-gaussian", epsilon=epsilon,
                         clip_norm=2.0 * np.sqrt(1.0 + p), classes=[-1, 1],
                         random_state=10**6 + seed)


def one_replication(seed, n, p, q, ratio, mode, epsilon=None):
    """The 95 % intervals of every parameter, and (private cells) the
    non-private intervals on the same rows."""
    X, y, g, b = make_federated_gaussians(
        n_sites=SITES, n_batches=BATCHES, n_per_batch=n // (SITES * BATCHES), n_features=p,
        mu=MU, sigma=SIGMA, ratio=ratio, random_state=seed)
    if epsilon is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            private = private_estimator(q, p, epsilon, seed).fit(X, y, sample_group=g)
        public = DWDClassifier(q=q, inference=True).fit(X, y, sample_group=g)
        estimate = np.r_[private.intercept_, private.coef_[0]]
        return np.stack([private.confint(0.95)[0], public.confint(0.95)[0],
                         np.column_stack([estimate, estimate])])
    clf = DWDClassifier(q=q, inference=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "offline":
            clf.fit(X, y, sample_group=g)
        else:
            for k in range(BATCHES):
                rows = b == k
                clf.partial_fit(X[rows], y[rows], sample_group=g[rows], classes=[-1, 1])
    interval = clf.confint(0.95)[0]
    return np.stack([interval, interval, interval])


def replications(seeds, *cell):
    return [one_replication(int(seed), *cell) for seed in seeds]


def run_cell(n, p, q, ratio, mode, epsilon, reps, n_jobs):
    intercept, coef = gaussian_gendwd_target(p, MU, SIGMA, ratio, q=q)
    target = np.r_[intercept, coef]
    start = time.perf_counter()
    chunks = np.array_split(np.arange(reps), max(1, n_jobs * 4))
    results = Parallel(n_jobs=n_jobs)(
        delayed(replications)(chunk, n, p, q, ratio, mode, epsilon) for chunk in chunks)
    both = np.array([r for chunk in results for r in chunk])  # (reps, 3, p+1, 2)
    intervals = both[:, 0]
    public_width = both[:, 1, :, 1] - both[:, 1, :, 0]
    width = intervals[..., 1] - intervals[..., 0]
    # coverage of the published intervals (a fit whose covariance is NaN
    # publishes none: counted apart, as "NaN SE")
    published = ~np.isnan(width).any(axis=1)
    covered = ((intervals[..., 0] <= target) & (target <= intervals[..., 1]))[published]
    per_parameter = covered.mean(axis=0) if len(covered) else np.full(p + 1, np.nan)
    # the estimate, its standard error the half-width / z (over published fits)
    estimates = both[:, 2].mean(axis=-1)
    spread = estimates[published].std(axis=0, ddof=1) if published.sum() > 1 else np.nan
    se_ratio = np.nanmean(width, axis=0) / (2 * 1.959963984540054) / spread
    bias = np.abs(estimates.mean(axis=0) - target) / estimates.std(axis=0, ddof=1)
    return dict(
        n=n, p=p, q=q, classes="balanced" if ratio == 1 else "4:1", mode=mode,
        mechanism="none" if epsilon is None else "local-gaussian",
        epsilon=math.inf if epsilon is None else epsilon,
        reps=reps, coverage=covered.mean() if len(covered) else np.nan,
        coverage_min=per_parameter.min(),
        coverage_max=per_parameter.max(), mc_se=np.sqrt(0.95 * 0.05 / reps),
        width_coef=np.nanmean(width[:, 1:]), width_intercept=np.nanmean(width[:, 0]),
        width_ratio=np.nanmean(width / public_width),
        unresolved=1.0 - published.mean(),
        se_ratio_min=se_ratio.min(), se_ratio_max=se_ratio.max(), bias_max=bias.max(),
        seconds=time.perf_counter() - start)


def cells(quick, private_only=False):
    """``(n, p, q, ratio, mode, epsilon)`` of every cell to run (epsilon None:
    non-private)."""
    if quick:
        public = [(2000, 5, 1.0, 1.0, mode, None) for mode in ("offline", "stream")]
        private = [(20000, 5, 1.0, 1.0, "offline", eps) for eps in (4.0, 1.0)]
    else:
        # the n = 20 000 cells first (the targets' main figures), then n = 2 000
        grid = list(itertools.product((20000, 2000), (5, 20), (1.0, 4.0), (1.0, 4.0)))
        public = [cell + (mode, None) for cell in grid for mode in ("offline", "stream")]
        # p = 5 before p = 20 (the private curvature is cheaper to resolve there)
        private = [cell + ("offline", eps) for cell in sorted(grid, key=lambda c: c[1])
                   for eps in (4.0, 1.0)]
    return private if private_only else public + private


def markdown(rows):
    lines = ["| n | p | q | classes | fit | ε | coverage (pooled) | min–max over parameters | "
             "mean width coef / intercept | width vs non-private | NaN SE (no interval) | SE / SD | max bias / SD | "
             "reps |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        eps = "–" if r["mechanism"] == "none" else f"{r['epsilon']:g}"
        lines.append(
            f"| {r['n']} | {r['p']} | {r['q']:g} | {r['classes']} | {r['mode']} | {eps} | "
            f"{100 * r['coverage']:.1f} % | {100 * r['coverage_min']:.1f}–"
            f"{100 * r['coverage_max']:.1f} % | {r['width_coef']:.4f} / "
            f"{r['width_intercept']:.4f} | {r['width_ratio']:.2f} | "
            f"{100 * r['unresolved']:.0f} % | "
            f"{r['se_ratio_min']:.2f}–{r['se_ratio_max']:.2f} | "
            f"{r['bias_max']:.2f} | {r['reps']} |")
    lines.append("| 2000, 20000 | 5, 20 | 1, 4 | both | stream | 1, 4 | not offered (a private "
                 "stream's later batches carry no covariance yet) | | | | | | | |")
    return "\n".join(lines) + "\n"


def main():
    parser = benchmark_parser(__doc__)
    parser.add_argument("--reps", type=int, default=None,
                        help="replications per cell (default 1000, 100 with --quick)")
    parser.add_argument("--n-jobs", type=int, default=1, help="joblib processes")
    parser.add_argument("--private-only", action="store_true",
                        help="run the private (epsilon in {1, 4}) cells only")
    parser.add_argument("--features", type=int, nargs="*", default=None,
                        help="run the cells of these p only (default: all)")
    args = parser.parse_args()
    reps = args.reps or (100 if args.quick else 1000)
    folder = output_dir(args.output_dir)
    stem = "inference_quick" if args.quick else "inference"
    if args.private_only:
        stem += "_private"
    rows = []
    if args.features:
        stem += "_p" + "_".join(map(str, args.features))
    chosen = [c for c in cells(args.quick, args.private_only)
              if not args.features or c[1] in args.features]
    for n, p, q, ratio, mode, epsilon in chosen:
        row = run_cell(n, p, q, ratio, mode, epsilon, reps, args.n_jobs)
        rows.append(row)
        print(" ".join(f"{k}={row[k]:.4g}" if isinstance(row[k], float) else f"{k}={row[k]}"
                       for k in FIELDS), flush=True)
        with open(folder / f"{stem}.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)
    (folder / f"{stem}.md").write_text(markdown(rows))
    wrote(folder / f"{stem}.csv")
    wrote(folder / f"{stem}.md")


if __name__ == "__main__":
    main()
