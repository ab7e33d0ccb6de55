"""LogisticRegression(solver='newton') beside scikit-learn's LogisticRegression.

On scikit-learn's bundled datasets (standardized, a 70/30 split, the
training rows in 3 sites), at scikit-learn's default C = 1 (alpha =
1 / (n C)): the federated Newton fit (time, Newton steps, rounds, test
accuracy, the largest coefficient gap to scikit-learn relative to the
largest coefficient), its renewable partial_fit over 5 batches, the old
default (solver='local-steps', 100 rounds of clipped local SGD), and
scikit-learn's lbfgs (default tol) and newton-cholesky (tol 1e-12, the
reference optimum) on the same rows, measured in the same run.
"""

import time

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.linear_model import LogisticRegression as SklearnLogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv import LogisticRegression

from _output import benchmark_parser, markdown_table, output_dir, wrote

DATASETS = {"breast_cancer": load_breast_cancer, "iris": load_iris, "wine": load_wine,
            "digits": load_digits}


def _timed(func, repetitions):
    """The fitted result of ``func`` and its median wall-clock time."""
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        out = func()
        times.append(time.perf_counter() - start)
    return out, float(np.median(times))


def _gap(coef, reference):
    return float(np.abs(coef - reference).max() / np.abs(reference).max())


def rows_for(name, loader, repetitions):
    X, y = loader(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.3, random_state=0, stratify=y)
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    sites = np.arange(len(y_train)) % 3
    n, C = len(y_train), 1.0
    alpha = 1.0 / (n * C)
    reference = SklearnLogisticRegression(C=C, solver="newton-cholesky", tol=1e-12,
                                          max_iter=1000).fit(X_train, y_train)
    fits = {
        "skfedpriv newton fit": lambda: LogisticRegression(alpha=alpha).fit(
            X_train, y_train, sample_group=sites),
        "skfedpriv newton partial_fit x5": lambda: _stream(X_train, y_train, sites, alpha),
        "skfedpriv local-steps (old default)": lambda: LogisticRegression(
            solver="local-steps").fit(X_train, y_train, sample_group=sites),
        "sklearn lbfgs (default)": lambda: SklearnLogisticRegression(C=C).fit(
            X_train, y_train),
        "sklearn newton-cholesky tol=1e-12": lambda: SklearnLogisticRegression(
            C=C, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(X_train, y_train),
    }
    rows = []
    for method, fit in fits.items():
        model, seconds = _timed(fit, repetitions)
        rows.append(dict(
            dataset=name, n=n, p=X.shape[1], classes=len(np.unique(y)), method=method,
            seconds=seconds, newton_steps=getattr(model, "n_iter_", ""),
            rounds=getattr(model, "n_rounds_seen_", ""),
            accuracy=model.score(X_test, y_test),
            coef_gap=_gap(model.coef_, reference.coef_),
        ))
    return rows


def _stream(X, y, sites, alpha):
    est = LogisticRegression(alpha=alpha)
    for rows in np.array_split(np.arange(len(y)), 5):
        est.partial_fit(X[rows], y[rows], sample_group=sites[rows], classes=np.unique(y))
    return est


def _fmt(value):
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e-2 or abs(value) >= 1e3 else f"{value:.4f}"
    if isinstance(value, np.ndarray):
        return str(int(value.max()))
    return str(value)


def main(argv=None):
    parser = benchmark_parser(__doc__)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    names = ["breast_cancer", "iris"] if args.quick else list(DATASETS)
    rows = [row for name in names for row in rows_for(name, DATASETS[name], args.repetitions)]
    columns = ["dataset", "n", "p", "classes", "method", "seconds", "newton_steps", "rounds",
               "accuracy", "coef_gap"]
    table = markdown_table(rows, columns, _fmt)
    print(table)
    folder = output_dir(args.output_dir)
    suffix = "_quick" if args.quick else ""
    csv = folder / f"logistic_newton{suffix}.csv"
    csv.write_text("\n".join([",".join(columns)] + [
        ",".join(_fmt(row[c]) for c in columns) for row in rows]) + "\n")
    wrote(csv)
    md = folder / f"logistic_newton{suffix}.md"
    md.write_text("# LogisticRegression(solver='newton') vs scikit-learn\n\n" + table + "\n")
    wrote(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
