"""Sparse CSR rows (issue #25): time and peak memory of a fit on a text-like matrix.

A random CSR matrix (scipy.sparse.random, values in [0, 1), n = 20 000
rows, 50 stored values a row on average: density 1e-3 at p = 50 000,
2.5e-2 at p = 2 000; labels of a sparse linear rule plus noise, 10 sites),
a 70/30 split. On the training rows as CSR: skfedpriv's DWDClassifier and
LogisticRegression (Newton) fits, beside scikit-learn's LogisticRegression
(lbfgs) and LinearSVC, measured in the same run: time (median of
--repetitions), peak memory of the fit (tracemalloc, a separate run:
numpy and Python allocations; liblinear's own C buffers, LinearSVC's,
are not seen), and test accuracy. The dense rows would take n p 8 bytes
(the column "dense rows MB", not allocated).

p = 2 000 for every method, at n = 20 000 and 60 000 (the peak of a fit
that does not densify its rows does not grow with n); p = 50 000 for
scikit-learn's only: both skfedpriv Newton paths keep dense (p + 1) x
(p + 1) curvature matrices (the renewable state and the solver's; the
column "(p+1)² MB" is one of them), 20 GB each at p = 50 000.

    python benchmarks/bench_sparse.py            # about a minute
    python benchmarks/bench_sparse.py --quick    # n = 2 000, p = 500

Writes sparse.md (sparse_quick.md) into --output-dir.
"""

import time
import tracemalloc
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression as SklearnLogisticRegression
from sklearn.svm import LinearSVC
from threadpoolctl import threadpool_limits

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv import DWDClassifier, LogisticRegression

from _output import benchmark_parser, markdown_table, output_dir, wrote

PER_ROW = 50  # stored values a row, on average (a short text's distinct words)


def text_like(n, p, density, seed=0):
    """CSR rows, labels of a sparse linear rule (plus noise) and 10 sites."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, p, density=density, format="csr", random_state=seed, dtype=np.float64)
    w = rng.normal(size=p) * (rng.random(p) < 0.2)
    score = X @ w + 0.1 * rng.normal(size=n)
    y = (score > np.median(score)).astype(int)
    return X, y, rng.integers(10, size=n)


def methods(sites, ours):
    """name -> fit(X, y); ours: skfedpriv's estimators too."""
    fits = {
        "sklearn LogisticRegression (lbfgs)": lambda X, y: SklearnLogisticRegression(
            max_iter=1000).fit(X, y),
        "sklearn LinearSVC": lambda X, y: LinearSVC().fit(X, y),
    }
    if ours:
        fits = {
            "skfedpriv DWDClassifier": lambda X, y: DWDClassifier().fit(
                X, y, sample_group=sites),
            "skfedpriv LogisticRegression (newton)": lambda X, y: LogisticRegression().fit(
                X, y, sample_group=sites),
            **fits,
        }
    return fits


def measure(fit, X, y, repetitions):
    """Median time, peak traced memory (MB) and the fitted model."""
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        model = fit(X, y)
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    try:
        fit(X, y)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return float(np.median(times)), peak / 1e6, model


def rows_for(n, p, repetitions, ours):
    X, y, sites = text_like(n, p, min(1.0, PER_ROW / p))
    n_train = int(0.7 * n)
    X_train, y_train, X_test, y_test = X[:n_train], y[:n_train], X[n_train:], y[n_train:]
    rows = []
    for name, fit in methods(sites[:n_train], ours).items():
        seconds, peak, model = measure(fit, X_train, y_train, repetitions)
        rows.append(dict(
            method=name, n=n_train, p=p, density=X.nnz / (n * p), nnz=X_train.nnz,
            seconds=seconds, peak_mb=peak, dense_mb=n_train * p * 8 / 1e6,
            matrix_mb=(p + 1) ** 2 * 8 / 1e6,
            accuracy=model.score(X_test, y_test)))
    return rows


def _fmt(value):
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def main(argv=None):
    parser = benchmark_parser(__doc__)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    cases = ([(2_000, 500, True)] if args.quick else
             [(20_000, 2_000, True), (60_000, 2_000, True), (20_000, 50_000, False)])
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        rows = [row for n, p, ours in cases
                for row in rows_for(n, p, args.repetitions, ours)]
    columns = ["method", "n", "p", "density", "nnz", "seconds", "peak_mb", "dense_mb",
               "matrix_mb", "accuracy"]
    header = ["method", "n (train)", "p", "density", "nnz", "s", "peak MB", "dense rows MB",
              "(p+1)² MB", "test acc."]
    table = markdown_table(rows, columns, _fmt, header)
    print(table)
    md = output_dir(args.output_dir) / f"sparse{'_quick' if args.quick else ''}.md"
    md.write_text(f"# Fits on sparse CSR rows ({PER_ROW} stored values a row)\n\n"
                  + table + "\n")
    wrote(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
