"""What the default second-order stream correction costs in time (issue #24).

``DWDClassifier(inference=True)`` with ``shift_correction='auto'`` (the
default) against ``shift_correction=None`` (the first-order stream), on the
same rows of the coverage study's design (paper two-Gaussian, 4:1 classes,
5 sites): the offline ``fit`` (which computes the correction's state for a
continuation) and a 20-batch ``partial_fit`` stream, for n = 20 000 and
p in {5, 20}; the median of ``--repeats`` timings of each, in one process,
interleaved. scikit-learn's ``LogisticRegression`` (lbfgs, pooled rows,
no intervals) is timed on the same rows as the peer's reference point.
Writes ``shift_correction_time[_quick].csv`` / ``.md``.
"""

import csv
import os
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from sklearn.linear_model import LogisticRegression as SkLogisticRegression  # noqa: E402

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv import DWDClassifier  # noqa: E402
from skfedpriv.datasets import make_federated_gaussians  # noqa: E402

from _output import benchmark_parser, output_dir, wrote  # noqa: E402

FIELDS = ["n", "p", "what", "first_order_s", "default_s", "ratio", "sklearn_s", "repeats"]


def _fit(option, X, y, g, b, stream):
    clf = DWDClassifier(inference=True, shift_correction=option)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not stream:
            return clf.fit(X, y, sample_group=g)
        for k in np.unique(b):
            rows = b == k
            clf.partial_fit(X[rows], y[rows], sample_group=g[rows], classes=[-1, 1])
    return clf


def _seconds(func):
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def time_cell(n, p, repeats):
    """The median times of the offline fit and the stream, both options."""
    X, y, g, b = make_federated_gaussians(n_sites=5, n_batches=20, n_per_batch=n // 100,
                                          n_features=p, mu=0.2, ratio=4.0, random_state=0)
    rows = []
    for what, stream in (("offline fit", False), ("20-batch stream", True)):
        times = {None: [], "auto": [], "sklearn": []}
        for _ in range(repeats):
            for option in (None, "auto"):
                times[option].append(_seconds(lambda: _fit(option, X, y, g, b, stream)))
            times["sklearn"].append(_seconds(lambda: SkLogisticRegression().fit(X, y)))
        first, default = np.median(times[None]), np.median(times["auto"])
        rows.append(dict(n=n, p=p, what=what, first_order_s=first, default_s=default,
                         ratio=default / first, sklearn_s=np.median(times["sklearn"]),
                         repeats=repeats))
        print(rows[-1], flush=True)
    return rows


def markdown(rows):
    lines = ["| n | p | what | first order (s) | default 'auto' (s) | ratio | "
             "sklearn LogisticRegression (s) | repeats |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['n']} | {r['p']} | {r['what']} | {r['first_order_s']:.3f} | "
              f"{r['default_s']:.3f} | {r['ratio']:.1f}x | {r['sklearn_s']:.3f} | "
              f"{r['repeats']} |" for r in rows]
    return "\n".join(lines) + "\n"


def main():
    parser = benchmark_parser(__doc__)
    parser.add_argument("--repeats", type=int, default=None,
                        help="timings per cell and option (default 7, 2 with --quick)")
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 7)
    sizes = [(2000, 5)] if args.quick else [(20000, 5), (20000, 20)]
    rows = [row for n, p in sizes for row in time_cell(n, p, repeats)]
    folder = output_dir(args.output_dir)
    stem = "shift_correction_time" + ("_quick" if args.quick else "")
    with open(folder / f"{stem}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    (folder / f"{stem}.md").write_text(markdown(rows))
    wrote(folder / f"{stem}.csv")
    wrote(folder / f"{stem}.md")


if __name__ == "__main__":
    main()
