"""diffprivlib's central ε-DP LogisticRegression on pooled rows, same tasks
and splits as bench_dwd_epsilon.py.

diffprivlib 0.6.6 does not import with scikit-learn 1.9; run this in its own
environment::

    python -m venv venv-dpl
    venv-dpl/bin/pip install "scikit-learn==1.7.2" diffprivlib
    venv-dpl/bin/pip install --no-deps -e .
    venv-dpl/bin/python benchmarks/bench_diffprivlib.py [--quick]

Writes dwd_epsilon_diffprivlib.csv into ``--output-dir`` (default
``benchmarks/results``), which bench_dwd_epsilon.py run with the same
folder merges into its table and plot. ``data_norm`` is set to the same
data-independent clip bound as our estimators use (minus the intercept's 1),
so diffprivlib does not read it from the data.
"""

import csv
import warnings

import numpy as np

from _output import wrote
from bench_dwd_epsilon import TASKS, sweep_design


def main():
    from diffprivlib.models import LogisticRegression

    reps, epsilons, tag, results = sweep_design(__doc__)
    rows = []
    for task_name, task in TASKS:
        for rep in range(reps):
            X, y, g, b, Xt, yt, clip = task(rep)
            norm = float(np.sqrt(clip**2 - 1))
            X = X * np.minimum(1.0, norm / np.linalg.norm(X, axis=1))[:, None]
            for eps in epsilons:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    clf = LogisticRegression(epsilon=eps, data_norm=norm, random_state=rep)
                    acc = clf.fit(X, y).score(Xt, yt)
                rows.append(dict(task=task_name, method="diffprivlib LogisticRegression (central, pooled)",
                                 epsilon=eps, rep=rep, accuracy=acc))
    with open(results / f"dwd_epsilon_diffprivlib{tag}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    wrote(results / f"dwd_epsilon_diffprivlib{tag}.csv")


if __name__ == "__main__":
    main()
