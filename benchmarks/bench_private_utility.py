"""Private models worth using (issue #22): the target rows at their ε.

Three tasks, each at the issue's ε, mean and sd of the test accuracy over
seeds (10; 2 with ``--quick``), every method on the same rows, split and
clip in the same run:

* breast cancer, 4 non-IID sites, a stream of 8 batches, ε = 1;
* the genDWD paper's Table 1 simulation (p = 50, 10 sites, 100 batches of
  100 rows: 10 per site), ε = 1;
* digits, 10 classes, 5 sites, one fit, ε = 4.

A fourth task, LogisticRegression's own (issue #22): the correlated-noise
paper's synthetic stream (``bench_logistic.synthetic``, d = 100) at 1e5
rows, 10 learners x 100 rounds of 100 rows each, rows clipped to the
paper benchmark's C_x = 10 (not standardized), ε = 1.

Methods: the non-private DWD stream, DWD's private mechanisms (each listed
in ``METHODS``), LogisticRegression's (``LR_METHODS``: the non-private
Newton stream, the quadratic solver, the local steps as landed and with
rows clipped), the decentralized estimator on digits and, as the peer, diffprivlib's central ε-DP
LogisticRegression on the pooled rows (a trusted curator: a weaker trust
model than the site-local mechanisms), its ``data_norm`` the same
data-independent bound as our clip. diffprivlib 0.6.6 does not import with
scikit-learn 1.9; pass ``--diffprivlib-python`` the interpreter of an
environment that has it (scikit-learn 1.7.2), which this script runs as a
subprocess on the same rows::

    python -m venv /tmp/dpl && /tmp/dpl/bin/pip install scikit-learn==1.7.2 diffprivlib
    python benchmarks/bench_private_utility.py --diffprivlib-python /tmp/dpl/bin/python

Writes private_utility.csv and .md (``*_quick`` with ``--quick``) into
``--output-dir`` (default ``benchmarks/results``). The majority-class rate
of each task's test rows is reported beside the accuracies. Features are
standardized with the training rows' statistics, outside every guarantee.
"""

import csv
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)

from skfedpriv import DecentralizedLogisticRegression, DWDClassifier  # noqa: E402
from skfedpriv.linear_model._logistic import LogisticRegression  # noqa: E402

from _output import benchmark_parser, output_dir, wrote  # noqa: E402
from bench_dwd_epsilon import cancer_task, gaussian_task, stream  # noqa: E402
from bench_logistic import synthetic  # noqa: E402


def _standardize(X, Xt):
    mean, std = X.mean(0), X.std(0)
    std[std == 0] = 1.0
    return (X - mean) / std, (Xt - mean) / std


def digits(seed):
    X, y = load_digits(return_X_y=True)
    X, Xt, y, yt = train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)
    X, Xt = _standardize(X, Xt)
    g = np.random.default_rng(seed).integers(0, 5, len(y))
    return X, y, g, np.zeros(len(y), dtype=int), Xt, yt, float(np.sqrt(1 + 64))


def logistic_stream(seed):
    """The correlated-noise paper's synthetic data at 1e5 rows: 10 learners,
    100 rounds of 100 rows each; 200 test rows per learner; C_x = 10."""
    Xtr, ytr, gtr, Xt, yt = synthetic(100, seed=1000 + seed, n_learners=10, per_round=100)
    n_learners, n_train, d = Xtr.shape
    b = np.tile(np.arange(n_train) // 100, n_learners)
    return (Xtr.reshape(-1, d), ytr.ravel(), gtr.ravel(), b, Xt, yt, float(np.sqrt(1 + 10.0**2)))


#: task name -> (data of a seed, ε)
TASKS = {
    "breast cancer, 4 sites x 8 batches": (cancer_task, 1.0),
    "Table 1, 10 sites x 100 batches of 100": (gaussian_task, 1.0),
    "digits, 10 classes, 5 sites, one fit": (digits, 4.0),
    "LR stream, 1e5 rows, 10 learners x 100 rounds": (logistic_stream, 1.0),
}

#: method name -> DWDClassifier parameters (None: the non-private stream;
#: ``horizon=True``: ``n_batches`` is the task's number of batches)
METHODS = {
    "DWD non-private stream": None,
    "DWD local-gaussian": dict(mechanism="local-gaussian", online_steps=1),
    "DWD local-tree": dict(mechanism="local-tree", horizon=True),
    "DWD local-blt": dict(mechanism="local-blt", horizon=True),
    # distributed DP under secure aggregation: integer shares, the modular sum
    "DWD secagg-tree": dict(mechanism="secagg-tree", horizon=True),
    # Algorithm 2 as published: a per-release claim only (see docs/privacy.md)
    "DWD gaussian (Algorithm 2)": dict(mechanism="gaussian", online_steps=1),
}


def run_dwd(params, data, eps, seed):
    X, y, g, b, Xt, yt, clip = data
    if params is None:
        clf = DWDClassifier()
    else:
        params = dict(params)
        if params.pop("horizon", False):
            params["n_batches"] = len(np.unique(b))
        clf = DWDClassifier(epsilon=eps, delta=1e-5, clip_norm=clip, random_state=seed, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return stream(clf, X, y, g, b).score(Xt, yt)


#: method name -> LogisticRegression parameters (None: the non-private Newton
#: stream). ``feature_clip_norm`` is the task's row clip; ``n_rounds`` its
#: number of batches, or the default 100 rounds of ``fit`` on one batch for
#: the local steps.
LR_METHODS = {
    "LogisticRegression non-private (Newton stream)": None,
    "LogisticRegression quadratic blt": dict(solver="quadratic", mechanism="blt"),
    "LogisticRegression quadratic tree (Honaker)": dict(solver="quadratic", mechanism="honaker"),
    "LogisticRegression local-steps blt (landed defaults)": dict(mechanism="blt", clip_rows=False),
    "LogisticRegression local-steps blt, rows clipped": dict(mechanism="blt"),
}


def run_lr(params, data, eps, seed):
    X, y, g, b, Xt, yt, clip = data
    classes = np.unique(y)
    n_batches = len(np.unique(b))
    if params is None:
        return stream(LogisticRegression(), X, y, g, b).score(Xt, yt)
    params = dict(params)
    if params.pop("clip_rows", True):
        params["feature_clip_norm"] = float(np.sqrt(clip**2 - 1))
    quadratic = params.get("solver") == "quadratic"
    if quadratic or n_batches > 1:
        params["n_rounds"] = n_batches
    clf = LogisticRegression(epsilon=eps, delta=1e-5, classes=classes, random_state=seed,
                             **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if n_batches == 1:
            return clf.fit(X, y, sample_group=g).score(Xt, yt)
        return stream(clf, X, y, g, b).score(Xt, yt)


def run_decentralized(data, eps, seed):
    """The decentralized estimator's private default (Laplace tree, PD-FTGL)
    on a one-fit task (it warns before spending when the noise dominates)."""
    X, y, g, b, Xt, yt, clip = data
    clf = DecentralizedLogisticRegression(mechanism="laplace", epsilon=eps,
                                          classes=np.unique(y), random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return clf.fit(X, y, sample_group=g).score(Xt, yt)


_DIFFPRIVLIB = """
import json, sys, warnings
import numpy as np
from diffprivlib.models import LogisticRegression
out = []
for path, eps, seed in json.load(open(sys.argv[1])):
    d = np.load(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = LogisticRegression(epsilon=eps, data_norm=float(d["norm"]), random_state=seed)
        out.append(float(clf.fit(d["X"], d["y"]).score(d["Xt"], d["yt"])))
print(json.dumps(out))
"""


def run_diffprivlib(python, cases):
    """Accuracy of diffprivlib's LogisticRegression on each case (rows
    pre-clipped to ``data_norm``), in the interpreter ``python``."""
    with tempfile.TemporaryDirectory() as tmp:
        jobs = []
        for i, (data, eps, seed) in enumerate(cases):
            X, y, g, b, Xt, yt, clip = data
            norm = float(np.sqrt(clip**2 - 1))
            X = X * np.minimum(1.0, norm / np.linalg.norm(X, axis=1))[:, None]
            path = os.path.join(tmp, f"{i}.npz")
            np.savez(path, X=X, y=y, Xt=Xt, yt=yt, norm=norm)
            jobs.append((path, eps, seed))
        with open(os.path.join(tmp, "jobs.json"), "w") as fh:
            json.dump(jobs, fh)
        done = subprocess.run([python, "-c", _DIFFPRIVLIB, os.path.join(tmp, "jobs.json")],
                              capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main():
    parser = benchmark_parser(__doc__)
    parser.add_argument("--diffprivlib-python", default=os.environ.get("SKFEDPRIV_DIFFPRIVLIB_PYTHON"),
                        help="interpreter of an environment with diffprivlib (scikit-learn <= 1.7); "
                        "default: $SKFEDPRIV_DIFFPRIVLIB_PYTHON")
    args = parser.parse_args()
    quick = args.quick or os.environ.get("SKFEDPRIV_QUICK") == "1"
    results = output_dir(args.output_dir)
    tag, reps = ("_quick", 2) if quick else ("", 10)
    rows, peer_cases = [], []
    for task, (make, eps) in TASKS.items():
        for seed in range(reps):
            data = make(seed)
            yt = data[5]
            majority = max(np.mean(yt == c) for c in np.unique(yt))
            for method, params in METHODS.items():
                acc = run_dwd(params, data, eps, seed)
                rows.append(dict(task=task, method=method, epsilon=eps if params else "inf",
                                 seed=seed, accuracy=acc, majority=majority))
            for method, params in LR_METHODS.items():
                acc = run_lr(params, data, eps, seed)
                rows.append(dict(task=task, method=method, epsilon=eps if params else "inf",
                                 seed=seed, accuracy=acc, majority=majority))
            if len(np.unique(data[3])) == 1:
                rows.append(dict(task=task, method="DecentralizedLogisticRegression laplace "
                                 "(ftgl)", epsilon=eps, seed=seed,
                                 accuracy=run_decentralized(data, eps, seed), majority=majority))
            peer_cases.append((task, data, eps, seed, majority))
        print("done", task, flush=True)
    if args.diffprivlib_python:
        accs = run_diffprivlib(args.diffprivlib_python, [c[1:4] for c in peer_cases])
        rows += [dict(task=t, method="diffprivlib LogisticRegression (central, pooled)",
                      epsilon=eps, seed=seed, accuracy=acc, majority=maj)
                 for (t, _, eps, seed, maj), acc in zip(peer_cases, accs)]
    with open(results / f"private_utility{tag}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    wrote(results / f"private_utility{tag}.csv")
    summary = {}
    for r in rows:
        summary.setdefault((r["task"], r["method"], str(r["epsilon"])), []).append(
            (r["accuracy"], r["majority"]))
    lines = [f"seeds: {reps}; diffprivlib: "
             + ("run" if args.diffprivlib_python else "not run (no --diffprivlib-python)"), "",
             "| task | method | ε | accuracy (mean ± sd) | min | majority rate |",
             "|---|---|---|---|---|---|"]
    for (task, method, eps), pairs in summary.items():
        accs = np.array([a for a, _ in pairs])
        lines.append(f"| {task} | {method} | {eps} | {accs.mean():.3f} ± {accs.std():.3f} "
                     f"| {accs.min():.3f} | {np.mean([m for _, m in pairs]):.3f} |")
    text = "\n".join(lines) + "\n"
    (results / f"private_utility{tag}.md").write_text(text)
    print(text)
    wrote(results / f"private_utility{tag}.md")


if __name__ == "__main__":
    sys.exit(main())
