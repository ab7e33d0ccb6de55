"""Where the second-order stream correction's shift model holds (issue #24).

On the coverage study's design (``bench_inference.py``: two Gaussians,
μ = 0.2, 5 sites, 20 equal batches), for one cell, over ``--reps`` data
sets: the measured mean shift of the default renewable stream from the
offline fit on the same rows (``θ_off − θ_B``), against

* the published correction of ``shift_correction='second-order'``
  (its corrected estimate minus the stream's), and
* ``−C_B⁻¹ Σ_j E R_j``, the expected linearization remainders of the
  batches (:mod:`skfedpriv.linear_model._second_order`) with the
  perturbation ``θ_B − θ_j`` taken independent of the rows and Gaussian,
  its covariance either the correction's model ``(N_B / N_j − 1) V_B`` or
  the empirical ``Cov(θ_B − θ_j)`` over the data sets, and ``E R_j`` either
  second order (``½ ℓ‴ s²``, the kink smoothed at the margins' spread)
  or the exact Gaussian smoothing of ``ℓ'`` (80-point Gauss–Hermite).

Every figure is in units of the stream estimate's standard deviation over
the data sets, per parameter (the intercept first). If the "exact,
empirical" row misses the measured shift, the second-order expansion of
the remainder (not its truncation, nor the covariance model) is what fails.

    python benchmarks/diagnose_stream_shift.py N P Q RATIO [--reps R]
"""

import argparse
import os
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv import DWDClassifier  # noqa: E402
from skfedpriv._loss import GenDWDLoss  # noqa: E402
from skfedpriv.datasets import make_federated_gaussians  # noqa: E402

from _output import add_output_dir, output_dir, wrote  # noqa: E402

BATCHES = 20


def rows(seed, n, p, ratio):
    return make_federated_gaussians(n_sites=5, n_batches=BATCHES, n_per_batch=n // 100,
                                    n_features=p, mu=0.2, sigma=1.0, ratio=ratio,
                                    random_state=seed)


def one_stream(seed, n, p, q, ratio):
    """The chain's estimate after every batch, the published (corrected)
    estimate, the chain's final curvature and covariance, the offline fit."""
    X, y, g, b = rows(seed, n, p, ratio)
    clf = DWDClassifier(q=q, inference=True, shift_correction="second-order")
    chain = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(BATCHES):
            batch = b == k
            clf.partial_fit(X[batch], y[batch], sample_group=g[batch], classes=[-1, 1])
            chain.append(clf._training_state.theta[:, 0].copy())
        offline = DWDClassifier(q=q, inference=True).fit(X, y, sample_group=g)
    state = clf._training_state
    return (np.array(chain), np.r_[clf.intercept_, clf.coef_[0]], state.curvature[0],
            state.coef_cov[0], np.r_[offline.intercept_, offline.coef_[0]])


def expected_remainder(X, y, theta, perturbation, loss, exact):
    """``Σ_i y_i x̄_i E[ℓ'(u_i + s_i Z) − ℓ'(u_i)]``, ``s_i² = x̄_iᵀ D x̄_i``
    (second order: ``½ s_i² ℓ‴_h(u_i)``, ``h`` the rows' RMS ``s``)."""
    Xb = np.c_[np.ones(len(X)), X]
    u = y * (Xb @ theta)
    s = np.sqrt(np.maximum(np.einsum("ia,ab,ib->i", Xb, perturbation, Xb), 0.0))
    if exact:
        nodes, weights = np.polynomial.hermite_e.hermegauss(80)
        smoothed = loss.derivative(u[:, None] + s[:, None] * nodes) @ (weights / weights.sum())
        gap = smoothed - loss.derivative(u)
    else:
        h = np.sqrt(np.mean(s * s))
        gap = 0.5 * s * s * (loss.curvature(u + h) - loss.curvature(u - h)) / (2.0 * h)
    return (y * gap) @ Xb


def diagnose(n, p, q, ratio, reps):
    fits = [one_stream(seed, n, p, q, ratio) for seed in range(reps)]
    chain, published, curvature, cov, offline = (np.array(a) for a in zip(*fits))
    final = chain[:, -1]
    spread = final.std(axis=0, ddof=1)
    seen = np.arange(1, BATCHES + 1)
    models = {"model": [(BATCHES / seen[j] - 1) * cov.mean(axis=0) for j in range(BATCHES)],
              "empirical": [np.cov((final - chain[:, j]).T) for j in range(BATCHES)]}
    loss = GenDWDLoss(q)
    lines = [("measured θ_off − θ_B", (offline - final).mean(axis=0)),
             ("published correction", (published - final).mean(axis=0))]
    for exact in (False, True):
        for name, perturbation in models.items():
            shifts = []
            for seed in range(reps):
                X, y, _, b = rows(seed, n, p, ratio)
                remainder = sum(
                    expected_remainder(X[b == j], y[b == j], chain[seed, j], perturbation[j],
                                       loss, exact) for j in range(1, BATCHES - 1))
                shifts.append(-np.linalg.solve(curvature[seed], remainder))
            lines.append((f"{'exact' if exact else 'second order'}, {name} Cov(θ_B − θ_j)",
                          np.mean(shifts, axis=0)))
    return [(label, value / spread) for label, value in lines]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, kind in (("n", int), ("p", int), ("q", float), ("ratio", float)):
        parser.add_argument(name, type=kind)
    parser.add_argument("--reps", type=int, default=200)
    add_output_dir(parser)
    args = parser.parse_args()
    lines = diagnose(args.n, args.p, args.q, args.ratio, args.reps)
    shown = min(args.p + 1, 6)
    header = ["shift / SD (mean over data sets)", "intercept"] + [
        f"coef {j}" for j in range(1, shown)]
    text = [f"n = {args.n}, p = {args.p}, q = {args.q:g}, classes "
            f"{'balanced' if args.ratio == 1 else f'{args.ratio:g}:1'}, {args.reps} data sets"
            + (f" (first {shown} parameters)" if shown < args.p + 1 else ""), "",
            "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    text += ["| " + label + " | " + " | ".join(f"{v:+.2f}" for v in value[:shown]) + " |"
             for label, value in lines]
    target = output_dir(args.output_dir) / (
        f"stream_shift_n{args.n}_p{args.p}_q{args.q:g}_r{args.ratio:g}.md")
    target.write_text("\n".join(text) + "\n")
    print("\n".join(text))
    wrote(target)


if __name__ == "__main__":
    main()
