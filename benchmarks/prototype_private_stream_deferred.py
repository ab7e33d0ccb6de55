"""Prototype (not in the package): a deferred one-step interval for a private
stream of equal batches (issue #24, "Private streams" in benchmarks/README.md).

The plan measured. The first batch is the package's private fit
(``DWDClassifier(mechanism='local-gaussian', inference=True)``), its
estimate ``θ_1`` released. Each later row is then evaluated at that one
public point: each site keeps, over its later batches, the running sums of
its rows' gradient ``G``, curvature ``H`` and score outer products ``B`` at
``θ_1`` (``p1² + p1`` numbers per model whatever the stream's length) and
releases them **once**, at the stream's last batch, with its own Gaussian
noise (gradient ``σ Δ_g``, curvature ``σ Δ_H / κ_H``, outer products
``σ Δ_B / κ_B``; ``σ`` calibrated to ``1 + κ_H² + κ_B²`` unit releases: a
later row enters that one release only, so the noise does not grow with the
number of batches; the first batch's rows are not in it, they spent their
budget on the first fit). The server publishes the one-step estimate

``θ' = θ_1 - Ĥ⁻¹ (G̃ + R θ_1)``,  ``Ĥ`` the spread-matching shrinkage of
the released curvature (floored at its noise std) plus the ridge ``R``,

and the covariance ``Ĥ⁻¹ (B̃ + n_sites σ_g² I + V_Ξ) Ĥ⁻¹``, ``V_Ξ =
s² (‖v‖² I + v vᵀ - diag(v²))`` the covariance of the curvature noise ``Ξ``
(entry std ``s``) applied to the step ``v = θ' - θ_1`` (``θ' - θ* ≈
Ĥ⁻¹ (U - ξ_g - Ξ (θ_1 - θ*))``). Before the last batch no interval is
published (deferred publication). Everything after the release is
post-processing.

    python benchmarks/prototype_private_stream_deferred.py [--reps R] [--n-jobs J]
        [--kappa-h K] [--kappa-b K] [--epsilons EPS ...]

Writes results/inference_private_stream_deferred_prototype.csv.
"""

import argparse
import csv
import sys
import warnings
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skfedpriv import DWDClassifier  # noqa: E402
from skfedpriv._loss import GenDWDLoss  # noqa: E402
from skfedpriv._losses import penalty_mask  # noqa: E402
from skfedpriv.datasets import gaussian_gendwd_target, make_federated_gaussians  # noqa: E402
from skfedpriv.linear_model._dwd_solver import SiteData  # noqa: E402
from skfedpriv.linear_model._inference import score_covariance  # noqa: E402
from skfedpriv.linear_model._inference_private import _site_matrix_noise  # noqa: E402
from skfedpriv.linear_model._inference_private_curvature import (  # noqa: E402
    SANDWICH_FLOOR, shrunk_curvature)
from skfedpriv.linear_model._inference_sites import (  # noqa: E402
    InferenceSummary, site_inference_summary)
from skfedpriv.linear_model._dwd_private import _project_psd  # noqa: E402
from skfedpriv.privacy._objective_perturbation import (  # noqa: E402
    local_gaussian_sigma, summary_sensitivity)
from skfedpriv.privacy._score_outer import (  # noqa: E402
    exact_curvature_sensitivity, score_outer_sensitivity)

from bench_inference import BATCHES, MU, SIGMA, SITES, private_estimator  # noqa: E402

Z = 1.959963984540054


def later_sums(X, y, g, b, batches, theta, clip, loss):
    """The exact summed curvature, outer products and gradient at ``theta``
    of the rows of ``batches`` (what the sites would accumulate)."""
    total = None
    for k in batches:
        rows = b == k
        sites = SiteData.from_site_codes(X[rows], y[rows], np.ones(rows.sum()), g[rows], SITES)
        sites.prepare(np.array([-1, 1]), fit_intercept=True, clip_norm=clip)
        for part in sites.parts:
            s = site_inference_summary(*part, theta, True, loss.derivative, loss.curvature)
            total = s if total is None else total + s
    return total


def noised(exact, stds, rng):
    """The sites' one release of a segment's sums: ``(G̃, C̃, B̃)``, each site
    adding its own noise (``stds``: gradient, curvature, outer products)."""
    p1 = exact.curvature.shape[-1]
    grad = exact.score_sum + np.sqrt(SITES) * stds[0] * rng.standard_normal(exact.score_sum.shape)
    return (grad, exact.curvature + _site_matrix_noise(stds[1], SITES, p1, 1, rng),
            exact.score_outer + _site_matrix_noise(stds[2], SITES, p1, 1, rng))


def one_step(releases, points, weight, penalty, stds):
    """A Newton step from the last point ``θ_J`` on the segments' summed
    quadratic models, ``θ' = θ_J - Ĥ⁻¹ (Σ_j [G̃_j + C̃_j (θ_J - θ_j)] + R θ_J)``
    (one segment: the module doc's step), and its covariance: the error is
    ``Ĥ⁻¹ (U - Σ_j ξ_j + Σ_j Ξ_j (θ_j - θ*))`` to first order."""
    p1 = len(penalty)
    s = np.sqrt(SITES) * stds[1]
    total_s = np.sqrt(len(releases)) * s  # the summed curvature noise's entry std
    curvature = sum(r[1] for r in releases)
    ridge = penalty * weight
    hessian = shrunk_curvature(curvature, total_s, SANDWICH_FLOOR * total_s)[0] + np.diag(ridge)
    last = points[-1]
    gradient = sum(r[0][:, 0] + r[1][0] @ (last - theta) for r, theta in zip(releases, points))
    estimate = last - np.linalg.solve(hessian, gradient + ridge * last)
    grad = sum(r[0] for r in releases)
    outer = sum(r[2] for r in releases)
    summary = InferenceSummary(curvature, _project_psd(outer), grad, weight)
    middle = (score_covariance(summary, estimate[:, None], penalty)[0]
              + len(releases) * SITES * stds[0]**2 * np.eye(p1))
    for theta in points:
        v = theta - estimate
        middle += s**2 * (v @ v * np.eye(p1) + np.outer(v, v) - np.diag(v**2))
    inverse = np.linalg.inv(hessian)
    return estimate, np.sqrt(np.diag(inverse @ middle @ inverse))


def replication(seed, p, q, ratio, epsilon, kappa_h, kappa_b, starts, n=20000):
    X, y, g, b = make_federated_gaussians(
        n_sites=SITES, n_batches=BATCHES, n_per_batch=n // (SITES * BATCHES), n_features=p,
        mu=MU, sigma=SIGMA, ratio=ratio, random_state=seed)
    clip, loss = 2.0 * np.sqrt(1.0 + p), GenDWDLoss(q)
    first = private_estimator(q, p, epsilon, seed)
    public = DWDClassifier(q=q, inference=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first.partial_fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
        for k in range(BATCHES):
            rows = b == k
            public.partial_fit(X[rows], y[rows], sample_group=g[rows], classes=[-1, 1])
    theta = np.r_[first.intercept_, first.coef_[0]]
    rng = np.random.default_rng(10**7 + seed)
    sigma = local_gaussian_sigma(epsilon, 1e-5, 1.0 + kappa_h**2 + kappa_b**2, "analytic")
    stds = (sigma * summary_sensitivity("gradient", loss, clip),
            sigma * exact_curvature_sensitivity(loss, clip) / kappa_h,
            sigma * score_outer_sensitivity(loss, clip) / kappa_b)
    penalty = first.alpha * penalty_mask(p + 1, True)
    releases, points, weight, start_theta = [], [], 0.0, theta
    for start, stop in zip(starts, [*starts[1:], BATCHES]):
        # each segment's rows at the estimate released before it, released once
        exact = later_sums(X, y, g, b, range(start, stop), theta[:, None], clip, loss)
        releases.append(noised(exact, stds, rng))
        points.append(theta)
        weight += exact.weight_sq_sum
        theta, se = one_step(releases, points, weight, penalty, stds)
    return theta, se, np.diff(public.confint(0.95)[0], axis=1)[:, 0], start_theta


def cell(p, q, ratio, epsilon, reps, n_jobs, kappa_h, kappa_b, starts):
    intercept, coef = gaussian_gendwd_target(p, MU, SIGMA, ratio, q=q)
    target = np.r_[intercept, coef]
    out = Parallel(n_jobs=n_jobs)(delayed(replication)(seed, p, q, ratio, epsilon, kappa_h,
                                                       kappa_b, starts) for seed in range(reps))
    estimate, se, public_width, first = (np.array(v) for v in zip(*out))
    covered = np.abs(estimate - target) <= Z * se
    spread = estimate.std(axis=0, ddof=1)
    return dict(p=p, q=q, classes="balanced" if ratio == 1 else "4:1", epsilon=epsilon,
                kappa_h=kappa_h, kappa_b=kappa_b, segments=" ".join(map(str, starts)), reps=reps, coverage=covered.mean(),
                coverage_min=covered.mean(0).min(), coverage_max=covered.mean(0).max(),
                width_ratio=np.mean(2 * Z * se / public_width),
                se_ratio_min=(se.mean(0) / spread).min(), se_ratio_max=(se.mean(0) / spread).max(),
                bias_max=(np.abs(estimate.mean(0) - target) / spread).max(),
                first_bias_max=(np.abs(first.mean(0) - target) / spread).max())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--kappa-h", type=float, default=3.0)
    parser.add_argument("--kappa-b", type=float, default=1.0)
    parser.add_argument("--epsilons", type=float, nargs="*", default=(4.0, 1.0))
    parser.add_argument("--segments", type=int, nargs="+", default=(1,),
                        help="first batch of each segment (0-based; default: one, 1..19)")
    parser.add_argument("--features", type=int, nargs="*", default=(5,))
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results"
                        / "inference_private_stream_deferred_prototype.csv")
    args = parser.parse_args()
    rows = []
    for p in args.features:
        for q in (1.0, 4.0):
            for ratio in (1.0, 4.0):
                for eps in args.epsilons:
                    rows.append(cell(p, q, ratio, eps, args.reps, args.n_jobs, args.kappa_h,
                                     args.kappa_b, list(args.segments)))
                    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                   for k, v in rows[-1].items()), flush=True)
                    with open(args.output, "w", newline="") as handle:
                        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
                        writer.writeheader()
                        writer.writerows(rows)


if __name__ == "__main__":
    main()
