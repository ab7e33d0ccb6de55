"""Reproduce section V-A of Zhang, Zhu, Fay, Johansson (LDP online federated
learning with correlated noise) with ``skfedpriv`` LogisticRegression.

Data: the FedProx "synthetic(alpha, beta)" generator turned binary, d = 100,
n = 20 learners, (alpha, beta) = (0.1, 0.1). In FedProx's generator the label
is ``argmax(W_k x + b_k)`` with ``W_k ~ N(u_k, 1)``: the shift ``u_k`` is
added to every class's weights and cancels in the argmax. Here the label is
``sign(w_k . x + b_k)`` with one weight vector ``w_k ~ N(u_k, 1)`` per
learner, so ``u_k ~ N(0, alpha)`` does shift the learners' concepts;
``x ~ N(v_k, diag(j^-1.2))`` with ``v_k ~ N(B_k, 1)``, ``B_k ~ N(0, beta)``.
Each learner serves ``tau * R`` clients (5000 at tau = 5, R = 1000), five per
round; the test set is 200 fresh clients per learner.

Every mechanism runs the same algorithm (tau = 5 clipped local steps, rows
clipped to C_x, gradients to B_g, the same step sizes for all mechanisms as
in the paper's Fig. 3, except that independent noise is also run with a
smaller step, as the paper does); noise is calibrated with the exact
analytic Gaussian. Test accuracy and logistic loss are recorded every
``EVAL_EVERY`` rounds, mean and sd over repetitions.

Also reported: sigma (analytic) against the paper's zCDP conversion (Lemma
IV.8), the time to compute each factorization at R (caches off), and the
time of a full non-private fit against scikit-learn's
``SGDClassifier.partial_fit`` over the same stream.

Run:  python benchmarks/bench_logistic.py [--reps 10] [--rounds 1000] [--quick]
Writes logistic_sigma.csv, logistic_curves.csv, logistic_summary.csv and
logistic.png (``*_quick`` with --quick) into --output-dir (default
benchmarks/results), prints markdown tables and the files' paths
(logistic.md is written by hand from them).
"""

import csv
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from sklearn.linear_model import SGDClassifier  # noqa: E402

from skfedpriv._progress import progress  # noqa: E402
from skfedpriv.linear_model._logistic import LogisticRegression  # noqa: E402
from skfedpriv.privacy import gaussian_sigma  # noqa: E402
from skfedpriv.privacy import make_factorization  # noqa: E402

from _output import benchmark_parser, output_dir, wrote  # noqa: E402

D, N_LEARNERS, TAU = 100, 20, 5
ALPHA_HET, BETA_HET = 0.1, 0.1
BUDGETS = ((0.5, 1e-3), (2.0, 1e-3))
# (label, mechanism, learning-rate factor); "quadratic" labels run
# solver='quadratic' (each learner's rounds' quadratic models as prefix sums;
# no step size)
RUNS = (
    ("none", None, 1.0),
    ("independent", "independent", 1.0),
    ("independent (eta/10)", "independent", 0.1),
    ("tree", "tree", 1.0),
    ("toeplitz", "toeplitz", 1.0),
    ("optimal", "optimal", 1.0),
    ("blt", "blt", 1.0),
    ("quadratic blt", "blt", 1.0),
    ("quadratic tree (Honaker)", "honaker", 1.0),
)
CX = 10.0       # row clip C_x (rows have norm ~10)
CLIP = 1.0      # per-example gradient clip B_g
ETA = 0.05      # local step; regime needs eta <= 8 / (C_x^2 + 1) = 0.079
ETA_G = 1.0
EVAL_EVERY = 25
TEST_PER_LEARNER = 200


def synthetic(n_rounds, seed, n_learners=N_LEARNERS, per_round=TAU):
    """FedProx synthetic(0.1, 0.1), binary with one weight vector per learner;
    ``per_round`` training rows per learner and round."""
    rng = np.random.default_rng(seed)
    n_train = per_round * n_rounds
    cov_sd = np.arange(1, D + 1) ** (-1.2 / 2)
    Xtr, ytr, gtr, Xte, yte = [], [], [], [], []
    for k in range(n_learners):
        u = rng.normal(0, np.sqrt(ALPHA_HET))
        Bk = rng.normal(0, np.sqrt(BETA_HET))
        w = rng.normal(u, 1, size=D)
        b = rng.normal(u, 1)
        v = rng.normal(Bk, 1, size=D)
        n = n_train + TEST_PER_LEARNER
        X = v + rng.normal(size=(n, D)) * cov_sd
        y = (X @ w + b > 0).astype(int)
        Xtr.append(X[:n_train])
        ytr.append(y[:n_train])
        gtr.append(np.full(n_train, k))
        Xte.append(X[n_train:])
        yte.append(y[n_train:])
    return (np.stack(Xtr), np.stack(ytr), np.stack(gtr),
            np.vstack(Xte), np.concatenate(yte))


def round_batch(Xtr, ytr, gtr, r):
    """Rows of round r: 5 consecutive clients of every learner."""
    sl = slice(TAU * r, TAU * (r + 1))
    return (Xtr[:, sl].reshape(-1, D), ytr[:, sl].ravel(), gtr[:, sl].ravel())


def evaluate(clf, Xte, yte):
    p = np.clip(clf.predict_proba(Xte)[:, 1], 1e-12, 1 - 1e-12)
    loss = -np.mean(yte * np.log(p) + (1 - yte) * np.log(1 - p))
    return float(np.mean((p > 0.5) == yte)), float(loss)


def run_one(mechanism, eta, eps, delta, data, n_rounds, seed, solver="local-steps"):
    Xtr, ytr, gtr, Xte, yte = data
    clf = LogisticRegression(
        local_steps=TAU, learning_rate=eta, server_learning_rate=ETA_G,
        n_rounds=n_rounds, mechanism=mechanism, epsilon=eps, delta=delta,
        clip_norm=CLIP, feature_clip_norm=CX, random_state=seed,
        solver=solver,  # the paper's algorithm (local steps) also without noise
    )
    curve = []
    for r in range(n_rounds):
        X, y, g = round_batch(Xtr, ytr, gtr, r)
        clf.partial_fit(X, y, sample_group=g, classes=[0, 1])
        if (r + 1) % EVAL_EVERY == 0 or r == n_rounds - 1:
            curve.append((r + 1,) + evaluate(clf, Xte, yte))
    return clf, curve


def timing(data, n_rounds):
    """Full fit (one pass) vs SGDClassifier.partial_fit over the same stream."""
    Xtr, ytr, gtr, _, _ = data
    batches = [round_batch(Xtr, ytr, gtr, r) for r in range(n_rounds)]
    X_all = np.vstack([b[0] for b in batches])
    y_all = np.concatenate([b[1] for b in batches])
    g_all = np.concatenate([b[2] for b in batches])
    out = {}
    best = np.inf
    for _ in range(3):
        start = time.perf_counter()
        LogisticRegression(local_steps=TAU, learning_rate=ETA, n_rounds=n_rounds,
                           clip_norm=CLIP, feature_clip_norm=CX, solver="local-steps").fit(
            X_all, y_all, sample_group=g_all)
        best = min(best, time.perf_counter() - start)
    out["skfedpriv fit (mechanism=None)"] = best
    for mech in ("tree", "toeplitz", "blt"):
        start = time.perf_counter()
        LogisticRegression(local_steps=TAU, learning_rate=ETA, n_rounds=n_rounds,
                           clip_norm=CLIP, feature_clip_norm=CX, mechanism=mech,
                           epsilon=2.0, delta=1e-3, random_state=0,
                           classes=[0, 1]).fit(
            X_all, y_all, sample_group=g_all)
        out[f"skfedpriv fit (mechanism={mech!r})"] = time.perf_counter() - start
    best = np.inf
    for _ in range(3):
        sgd = SGDClassifier(loss="log_loss", learning_rate="constant", eta0=ETA,
                            alpha=0.0, random_state=0)
        start = time.perf_counter()
        for X, y, _ in batches:
            sgd.partial_fit(X, y, classes=[0, 1])
        best = min(best, time.perf_counter() - start)
    out["sklearn SGDClassifier.partial_fit per round"] = best
    return out


def main():
    parser = benchmark_parser(__doc__, quick_help="2 repetitions, 100 rounds, results tagged _quick")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--tag", default="")
    parser.add_argument("--only", default=None,
                        help="run only the methods whose label starts with this (and 'none')")
    args = parser.parse_args()
    runs = [r for r in RUNS if args.only is None or r[0] == "none" or r[0].startswith(args.only)]
    if args.quick:
        args.reps, args.rounds, args.tag = 2, 100, args.tag or "_quick"
    R = args.rounds
    results = output_dir(args.output_dir)
    tag = args.tag

    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; R={R}, tau={TAU}, d={D}, n={N_LEARNERS}, "
          f"{args.reps} repetitions, eta={ETA}, eta_g={ETA_G}, C_x={CX}, B_g={CLIP}\n")

    # factorization build times (caches off) and sigma analytic vs zCDP
    print("| mechanism | build time s (R, no cache) | max col norm C | "
          "sigma analytic eps=0.5 | sigma zCDP (Lemma IV.8) eps=0.5 | ratio | "
          "sigma analytic eps=2 | sigma zCDP eps=2 | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    sigma_rows = []
    for name in ("independent", "tree", "toeplitz", "optimal", "blt"):
        params = {"cache": False} if name in ("optimal", "blt") else {}
        start = time.perf_counter()
        fact = make_factorization(name, R, **params)
        build = time.perf_counter() - start
        make_factorization(name, R)  # warm the cache for the runs
        sens = fact.sensitivity * 2 * CLIP / TAU
        cells = [name, f"{build:.3f}", f"{fact.sensitivity:.4f}"]
        for eps, delta in BUDGETS:
            a = gaussian_sigma(eps, delta, sens)
            z = gaussian_sigma(eps, delta, sens, method="zcdp")
            cells += [f"{a:.4f}", f"{z:.4f}", f"{z / a:.3f}"]
            sigma_rows.append(dict(mechanism=name, epsilon=eps, delta=delta,
                                   build_seconds=build, sensitivity_C=fact.sensitivity,
                                   sigma_analytic=a, sigma_zcdp=z, ratio=z / a))
        print("| " + " | ".join(cells) + " |")
    with open(results / f"logistic_sigma{tag}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(sigma_rows[0]))
        w.writeheader()
        w.writerows(sigma_rows)
    wrote(results / f"logistic_sigma{tag}.csv")

    # accuracy / loss curves
    rows = []
    t0 = time.perf_counter()
    for rep in progress(range(args.reps), label="repetitions"):
        data = synthetic(R, seed=1000 + rep)
        for eps, delta in BUDGETS:
            for label, mech, factor in runs:
                if mech is None and eps != BUDGETS[0][0]:
                    continue  # no noise: one run serves both budgets
                solver = "quadratic" if label.startswith("quadratic") else "local-steps"
                _, curve = run_one(mech, ETA * factor, eps, delta, data, R, seed=rep,
                                   solver=solver)
                for rnd, acc, loss in curve:
                    budgets = BUDGETS if mech is None else ((eps, delta),)
                    for e, dl in budgets:
                        rows.append(dict(epsilon=e, delta=dl, method=label, rep=rep,
                                         round=rnd, accuracy=acc, loss=loss))
        print(f"  repetition {rep + 1}/{args.reps} done "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    with open(results / f"logistic_curves{tag}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    wrote(results / f"logistic_curves{tag}.csv")

    # summary: final round and mean over the last 20% of rounds
    summary = []
    print("\n| (eps, delta) | method | final test acc % (sd) | final test loss (sd) | "
          "mean acc % over last 20% rounds |")
    print("|---|---|---|---|---|")
    for eps, delta in BUDGETS:
        for label, _, _ in runs:
            sel = [r for r in rows if r["epsilon"] == eps and r["method"] == label]
            final = [r for r in sel if r["round"] == R]
            late = [r["accuracy"] for r in sel if r["round"] > 0.8 * R]
            acc = np.array([r["accuracy"] for r in final])
            loss = np.array([r["loss"] for r in final])
            summary.append(dict(epsilon=eps, delta=delta, method=label,
                                acc_mean=acc.mean(), acc_sd=acc.std(ddof=1) if acc.size > 1 else 0.0,
                                loss_mean=loss.mean(), loss_sd=loss.std(ddof=1) if loss.size > 1 else 0.0,
                                late_acc_mean=float(np.mean(late))))
            s = summary[-1]
            print(f"| ({eps}, {delta}) | {label} | {100 * s['acc_mean']:.2f} "
                  f"({100 * s['acc_sd']:.2f}) | {s['loss_mean']:.4f} ({s['loss_sd']:.4f}) | "
                  f"{100 * s['late_acc_mean']:.2f} |")
    with open(results / f"logistic_summary{tag}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(summary[0]))
        w.writeheader()
        w.writerows(summary)
    wrote(results / f"logistic_summary{tag}.csv")

    # timing
    times = timing(synthetic(R, seed=999), R)
    ref = times["sklearn SGDClassifier.partial_fit per round"]
    print("\n| one pass over the stream (R rounds, n*tau rows each) | seconds | ratio to SGDClassifier |")
    print("|---|---|---|")
    for k, v in times.items():
        print(f"| {k} | {v:.3f} | {v / ref:.2f} |")

    plot(rows, results / f"logistic{tag}.png", runs)


def plot(rows, path, runs=RUNS):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    fig, axes = plt.subplots(2, len(BUDGETS), figsize=(11, 7), sharex=True)
    for j, (eps, delta) in enumerate(BUDGETS):
        for label, _, _ in runs:
            sel = [r for r in rows if r["epsilon"] == eps and r["method"] == label]
            rounds = sorted({r["round"] for r in sel})
            for i, key in enumerate(("accuracy", "loss")):
                vals = np.array([[r[key] for r in sel if r["round"] == t] for t in rounds])
                mean, sd = vals.mean(axis=1), vals.std(axis=1)
                ax = axes[i, j]
                ax.plot(rounds, mean, label=label)
                ax.fill_between(rounds, mean - sd, mean + sd, alpha=0.2)
                ax.set_ylabel(f"test {key}")
                ax.set_title(f"(eps, delta) = ({eps}, {delta})")
        axes[1, j].set_xlabel("round")
    axes[1, 0].set_yscale("log")
    axes[1, 1].set_yscale("log")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    wrote(path)


if __name__ == "__main__":
    main()
