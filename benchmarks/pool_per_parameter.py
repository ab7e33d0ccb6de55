"""Pool the per-parameter coverage of ``bench_inference.py`` runs over
disjoint seeds, and split each miss into bias, spread and tails.

Reads the ``*_raw.npz`` files that ``bench_inference.py --save-raw`` writes
(one cell, runs over disjoint ``--first-seed`` ranges) and, optionally, the
``*_per_parameter.csv`` of earlier runs of the same cell without raw files
(``--earlier``, their rows of that cell and ``--earlier-mode``): those add
their coverage counts and intervals wholly above / below the target (exact:
the CSV's rates times its data sets) to the pooled columns only.

Per parameter: the pooled coverage over all data sets with its 95 % Monte
Carlo (Wilson) interval and the share of intervals wholly above / below the
target; over the raw data sets only, bias / SD and SE / SD (as
``bench_inference.py``), the coverage a normal estimate with that bias and
SE / SD would have, ``Φ(z r − b) − Φ(−z r − b)`` (``r`` = SE / SD, ``b`` =
bias / SD, ``z`` = 1.96), the coverage of the fixed-width interval
``estimate ± z mean(SE)`` (it differs from the normal figure by the tails
of the estimate's error; the excess kurtosis of the estimates is printed
too), and the coefficient of variation of the standard errors over data
sets (what separates the fixed-width coverage from the measured one: the
spread of the standard error itself).

    python benchmarks/pool_per_parameter.py RAW.npz [RAW.npz ...] --cell KEY
        [--earlier CSV --earlier-mode MODE] [--tag TAG]

``KEY`` is a key stem of the raw files, e.g.
``n20000_p20_q1_r4_stream-default``. Writes
``inference_pooled_KEY[_TAG].csv`` / ``.md`` into ``--output-dir``.
"""

import csv
import pathlib
import re

import numpy as np
from scipy import stats

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv.datasets import gaussian_gendwd_target

from _output import benchmark_parser, output_dir, wrote
from bench_inference import MU, SIGMA, markdown_table, wilson_interval, write_rows

Z = 1.959963984540054
FIELDS = ["parameter", "reps", "reps_raw", "coverage", "wilson_low", "wilson_high", "above",
          "below", "coverage_raw", "bias_sd", "se_sd", "normal_coverage", "kurtosis",
          "fixed_coverage", "se_cv"]


def cell_target(key):
    """``(n, p, q, ratio)`` of a raw key stem and its parameters' target."""
    n, p, q, ratio = re.match(r"n(\d+)_p(\d+)_q([\d.]+)_r([\d.]+)_", key).groups()
    intercept, coef = gaussian_gendwd_target(int(p), MU, SIGMA, float(ratio), q=float(q))
    return (int(n), int(p), float(q), float(ratio)), np.r_[intercept, coef]


def load_raw(paths, key):
    """The intervals ``(R, p + 1, 2)`` and estimates ``(R, p + 1)`` of
    ``key`` in the raw files, concatenated."""
    files = [np.load(path) for path in paths]
    return (np.concatenate([f[key + "_intervals"] for f in files]),
            np.concatenate([f[key + "_estimates"] for f in files]))


def earlier_counts(path, cell, mode, n_params):
    """Data sets and per-parameter counts (covered, above, below) of the
    earlier run's rows of ``cell`` in mode ``mode``."""
    n, p, q, ratio = cell
    classes = "balanced" if ratio == 1 else "4:1"
    with open(path) as handle:
        rows = [r for r in csv.DictReader(handle)
                if (int(r["n"]), int(r["p"]), float(r["q"]), r["classes"], r["mode"])
                == (n, p, q, classes, mode)]
    if len(rows) != n_params:
        raise ValueError(f"{path}: {len(rows)} rows of the cell, expected {n_params}")
    reps = int(rows[0]["reps"])
    counts = np.array([[round(float(r[k]) * reps) for k in ("coverage", "above", "below")]
                       for r in rows])
    return reps, counts


def pooled_rows(intervals, estimates, target, earlier=(0, 0)):
    """One row per parameter (see the module doc); ``earlier`` the data
    sets and ``(n_params, 3)`` counts of runs without raw files."""
    reps_raw = len(intervals)
    extra_reps, extra = earlier
    low, high = intervals[..., 0], intervals[..., 1]
    covered = (low <= target) & (target <= high)
    counts = np.stack([covered.sum(0), (low > target).sum(0), (high < target).sum(0)], axis=1)
    counts = counts + extra
    reps = reps_raw + extra_reps
    spread = estimates.std(axis=0, ddof=1)
    bias = (estimates.mean(axis=0) - target) / spread
    se = (high - low) / (2 * Z)
    ratio = se.mean(axis=0) / spread
    normal = stats.norm.cdf(Z * ratio - bias) - stats.norm.cdf(-Z * ratio - bias)
    fixed = np.abs(estimates - target) <= Z * se.mean(axis=0)
    rows = []
    for j in range(len(target)):
        c = counts[j, 0] / reps
        wilson_low, wilson_high = wilson_interval(c, reps)
        rows.append(dict(parameter="intercept" if j == 0 else f"coef {j}", reps=reps,
                         reps_raw=reps_raw, coverage=c, wilson_low=wilson_low,
                         wilson_high=wilson_high, above=counts[j, 1] / reps,
                         below=counts[j, 2] / reps, coverage_raw=covered[:, j].mean(),
                         bias_sd=bias[j], se_sd=ratio[j], normal_coverage=normal[j],
                         kurtosis=stats.kurtosis(estimates[:, j]),
                         fixed_coverage=fixed[:, j].mean(),
                         se_cv=se[:, j].std(ddof=1) / se[:, j].mean()))
    return rows


def pooled_markdown(rows):
    return markdown_table(
        ["parameter", "data sets (raw)", "coverage (95 % MC interval)",
         "interval above / below target", "coverage, raw only", "bias / SD", "SE / SD",
         "normal with that bias and SE / SD", "excess kurtosis",
         "fixed width (estimate ± 1.96 mean SE)", "SE's CV"],
        [[r["parameter"], f"{r['reps']} ({r['reps_raw']})",
          f"{100 * r['coverage']:.1f} % ({100 * r['wilson_low']:.1f}–"
          f"{100 * r['wilson_high']:.1f} %)",
          f"{100 * r['above']:.1f} / {100 * r['below']:.1f} %",
          f"{100 * r['coverage_raw']:.1f} %", f"{r['bias_sd']:+.2f}", f"{r['se_sd']:.3f}",
          f"{100 * r['normal_coverage']:.1f} %", f"{r['kurtosis']:+.2f}",
          f"{100 * r['fixed_coverage']:.1f} %", f"{r['se_cv']:.3f}"] for r in rows])


def main():
    parser = benchmark_parser(__doc__)
    parser.add_argument("raw", nargs="+", type=pathlib.Path, help="*_raw.npz files")
    parser.add_argument("--cell", required=True, help="key stem, e.g. n2000_p5_q1_r4_stream-default")
    parser.add_argument("--earlier", type=pathlib.Path, default=None,
                        help="per-parameter CSV of an earlier run of the cell (other seeds)")
    parser.add_argument("--earlier-mode", default="stream-default",
                        help="the mode of the earlier run's rows (default stream-default)")
    parser.add_argument("--tag", default="", help="appended to the result files' names")
    args = parser.parse_args()
    cell, target = cell_target(args.cell)
    intervals, estimates = load_raw(args.raw, args.cell)
    earlier = (earlier_counts(args.earlier, cell, args.earlier_mode, len(target))
               if args.earlier else (0, 0))
    rows = pooled_rows(intervals, estimates, target, earlier)
    stem = f"inference_pooled_{args.cell}" + (f"_{args.tag}" if args.tag else "")
    folder = output_dir(args.output_dir)
    write_rows(folder, stem, FIELDS, rows, pooled_markdown)
    wrote(folder / f"{stem}.csv")
    wrote(folder / f"{stem}.md")


if __name__ == "__main__":
    main()
