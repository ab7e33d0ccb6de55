"""The private refinement's residual bound against the true residual, and
what a publish rule built on it would publish (issue #24).

For each cell (the design of ``bench_inference.py``: 5 sites, the
two-Gaussian rows, ``clip_norm = 2 sqrt(1 + p)``) and each replication:
the private fit (``mechanism='local-gaussian', inference=True``), the
non-private minimizer on the same rows and the noiseless curvature there;
the *true residual* is the fit's own steps replayed on that quadratic from
the fit's pilot (the linearization the bound assumes). Each plug-in
curvature of the bound (the nearest PSD matrix of the last release, or a
share of the shrinkage estimate) is scored by the share of parameters
whose true residual is within its bound (+ 0.05 SE), over all fits and
over the fits that publish at ``R = 8`` (the escapes concentrate there:
a fit with a huge bound withholds and never escapes), and each rule
(plug-in, largest bound in standard errors ``R``) by the share of fits it
publishes, the pooled coverage of the bias-aware intervals it publishes
(target: the population minimizer) and their mean width over the
noise-aware Wald width. Post-processing of each fit's releases: one fit
per replication serves every rule.

``--decompose`` instead splits each cell's published interval into its
parts, per parameter: the noise-aware privacy SE against the SD of the
privacy error ``θ̃ - θ̂`` over the replications, the sampling SE (the
sandwich) against the SD of ``θ̂`` around the target, the shipped bound
``b`` and the true residual in SEs (medians), and the bias-aware half
width over the Wald one (``cv(b / s) / 1.96``, mean over published fits):
which part makes an interval wide.

``--intercept`` instead scores the intercept alone over the fits that
publish at ``R = 8``, per plug-in share: how many publish, the share whose
true residual is within the bound, and the coverage of its bias-aware
interval (and the share wholly below the target).

Usage::

    python benchmarks/bench_private_bound.py [--quick] [--reps R] [--n-jobs J] [--decompose]
        [--intercept] [--steps S1 S2 S3] [--cells I ...] [--first-seed S]

Writes ``private_bound.md`` (``private_bound_quick.md``; with
``--decompose``: ``private_decomposition.md``; with ``--steps``, the plan
in the name) under ``--output-dir`` (default ``benchmarks/results``).
``--cells`` runs the cells of these indices of ``CELLS`` (or
``DECOMPOSE_CELLS``) only.
"""

import os
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from joblib import Parallel, delayed  # noqa: E402

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv import DWDClassifier  # noqa: E402
from skfedpriv._loss import GenDWDLoss  # noqa: E402
from skfedpriv.datasets import gaussian_gendwd_target, make_federated_gaussians  # noqa: E402
from skfedpriv.linear_model._dwd_private import _project_psd  # noqa: E402
from skfedpriv.linear_model._inference_private import privacy_error_covariance  # noqa: E402
from skfedpriv.linear_model._inference_private_curvature import shrunk_curvature  # noqa: E402
from skfedpriv.linear_model._inference_residual import (  # noqa: E402
    RESIDUAL_QUANTILE, bias_aware_critical, pilot_transfer)
from skfedpriv.linear_model._inference_sites import site_inference_summary  # noqa: E402
from skfedpriv.privacy._objective_perturbation import clip_augmented_rows  # noqa: E402

from _output import benchmark_parser, output_dir, wrote  # noqa: E402
from _step_plan import add_steps_argument, apply_steps  # noqa: E402

MU, SIGMA, SITES, BATCHES = 0.2, 1.0, 5, 20
#: The bound's plug-in curvatures: None the nearest PSD matrix of the last
#: release, a number that share of the shrinkage estimate.
PLUG_INS = (None, 1.0, 0.5, 0.33, 0.25, 0.2, 0.15, 0.1, 0.0625)
RESOLVED = (2.0, 4.0, 8.0, 16.0)
CELLS = [(20000, 5, q, r, 1.0) for q in (1.0, 4.0) for r in (1.0, 4.0)] + [
    (20000, 5, 1.0, 4.0, 4.0), (20000, 5, 4.0, 4.0, 4.0),
    (20000, 20, 1.0, 1.0, 1.0), (20000, 20, 1.0, 1.0, 4.0), (20000, 20, 4.0, 4.0, 4.0),
    (2000, 5, 1.0, 1.0, 1.0), (2000, 5, 1.0, 4.0, 1.0), (2000, 5, 4.0, 4.0, 1.0),
    (2000, 5, 1.0, 1.0, 4.0), (2000, 5, 4.0, 4.0, 4.0), (2000, 20, 4.0, 4.0, 4.0),
    (20000, 5, 1.0, 1.0, 4.0), (20000, 5, 4.0, 1.0, 4.0),
    # a stream of n = 2 000 whose first batch holds half the rows: that batch
    (1000, 5, 1.0, 4.0, 1.0), (1000, 5, 4.0, 4.0, 1.0)]
#: ``--decompose``: the eight n = 20 000, p = 5 cells.
DECOMPOSE_CELLS = [(20000, 5, q, r, e) for e in (1.0, 4.0) for q in (1.0, 4.0) for r in (1.0, 4.0)]


def _bound(refinement, privacy, hessian):
    """The residual bound of ``_inference_residual`` with a given plug-in."""
    transfer = pilot_transfer(refinement, hessian[None])[0]
    lifted = transfer - np.eye(len(transfer))
    if np.linalg.cond(lifted) > 1e12:
        return np.full(len(transfer), np.inf)
    carry = transfer @ np.linalg.inv(lifted)
    moved = (refinement.theta - refinement.pilot)[:, 0]
    spread = np.sqrt(np.maximum(np.diag(carry @ privacy @ carry.T), 0.0))
    return np.abs(carry @ moved) + RESIDUAL_QUANTILE * spread


def _replayed(refinement, hessian, minimizer):
    theta = refinement.pilot[:, 0].copy()
    for stage in range(len(refinement.curvatures)):
        system = refinement.system(stage)[0]
        for damping in refinement.damping[stage][:, 0]:
            theta = theta - np.linalg.solve(damping * system, hessian @ (theta - minimizer))
    return theta


def replication(seed, n, p, q, ratio, epsilon):
    """Per plug-in: the bounds; and the error, noise-aware SE and true residual."""
    X, y, g, _ = make_federated_gaussians(
        n_sites=SITES, n_batches=BATCHES, n_per_batch=n // (SITES * BATCHES), n_features=p,
        mu=MU, sigma=SIGMA, ratio=ratio, random_state=seed)
    clip = 2.0 * np.sqrt(1.0 + p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        private = DWDClassifier(q=q, inference=True, mechanism="local-gaussian",
                                epsilon=epsilon, clip_norm=clip, classes=[-1, 1],
                                random_state=10**6 + seed).fit(X, y, sample_group=g)
    public = DWDClassifier(q=q, clip_norm=clip, classes=[-1, 1]).fit(X, y, sample_group=g)
    minimizer = np.r_[public.intercept_, public.coef_[0]]
    loss = GenDWDLoss(q)
    curvature = site_inference_summary(
        clip_augmented_rows(X, clip, True), y[:, None].astype(float), np.ones(len(y)),
        minimizer[:, None], True, loss.derivative, loss.curvature).curvature[0]
    refinement = private.private_refinement_
    ridge = np.diag(refinement.ridge)
    privacy = privacy_error_covariance(refinement)[0]
    std_err = np.sqrt(np.diag(privacy + refinement.sampling_cov[0]))
    release = refinement.curvatures[-1]
    plug_ins = [(_project_psd(release) if share is None else
                 share * shrunk_curvature(release, refinement.floor_std()))[0] + ridge
                for share in PLUG_INS]
    return dict(estimate=np.r_[private.intercept_, private.coef_[0]], std_err=std_err,
                residual=_replayed(refinement, curvature + ridge, minimizer) - minimizer,
                bounds=[_bound(refinement, privacy, h) for h in plug_ins],
                minimizer=minimizer, privacy_se=np.sqrt(np.diag(privacy)),
                sampling_se=np.sqrt(np.diag(refinement.sampling_cov[0])),
                shipped_bound=refinement.residual_bound[0], shipped_se=refinement.std_err[0])


def _cell_runs(n, p, q, ratio, epsilon, reps, n_jobs, first):
    """A cell's target, its replications and the row head of its table lines."""
    intercept, coef = gaussian_gendwd_target(p, MU, SIGMA, ratio, q=q)
    rows = Parallel(n_jobs=n_jobs)(delayed(replication)(s, n, p, q, ratio, epsilon)
                                   for s in range(first, first + reps))
    head = f"| {n} | {p} | {q:g} | {'balanced' if ratio == 1 else '4:1'} | {epsilon:g} | {reps} |"
    return np.r_[intercept, coef], rows, head


def cell_lines(n, p, q, ratio, epsilon, reps, n_jobs, first=0):
    target, rows, head = _cell_runs(n, p, q, ratio, epsilon, reps, n_jobs, first)
    lines = []
    for k, share in enumerate(PLUG_INS):
        ratio_se = np.array([r["bounds"][k] / r["std_err"] for r in rows])
        inside = np.array([np.abs(r["residual"]) <= r["bounds"][k] + 0.05 * r["std_err"]
                           for r in rows])
        holds = inside.mean()
        # within the bound over the fits the shipped rule (R = 8) publishes only
        shown = np.all(ratio_se <= 8.0, axis=1)
        held = f"{100 * inside[shown].mean():.1f} % ({shown.sum()})" if shown.any() else "–"
        cells = []
        for limit in RESOLVED:
            published = np.all(ratio_se <= limit, axis=1)
            if not published.any():
                cells.append("0 % / – / –")
                continue
            half = bias_aware_critical(ratio_se[published]) * np.array(
                [r["std_err"] for r in rows])[published]
            error = np.array([r["estimate"] - target for r in rows])[published]
            width = (half / (1.959963984540054 * np.array(
                [r["std_err"] for r in rows])[published])).mean()
            cells.append(f"{100 * published.mean():.0f} % / "
                         f"{100 * np.mean(np.abs(error) <= half):.1f} % / {width:.2f}")
        name = "nearest PSD" if share is None else f"{share:g} × shrinkage"
        lines.append(f"{head} {name} | {100 * holds:.1f} % | {held} | "
                     f"{np.median(ratio_se.max(axis=1)):.3g} | "
                     f"{np.median(np.max(np.abs([r['residual'] / r['std_err'] for r in rows]), axis=1)):.2f} | "
                     + " | ".join(cells) + " |")
    return lines


def intercept_lines(n, p, q, ratio, epsilon, reps, n_jobs, first=0):
    """One cell's rows of the ``--intercept`` table (module doc), one per share."""
    target, rows, head = _cell_runs(n, p, q, ratio, epsilon, reps, n_jobs, first)
    std_err = np.array([r["std_err"] for r in rows])
    error = np.array([r["estimate"] for r in rows])[:, 0] - target[0]
    residual = np.array([r["residual"] for r in rows])[:, 0]
    lines = []
    for k, share in enumerate(PLUG_INS):
        bound = np.array([r["bounds"][k] for r in rows])
        published = np.all(bound <= 8.0 * std_err, axis=1)
        name = "nearest PSD" if share is None else f"{share:g} × shrinkage"
        if not published.any():
            lines.append(f"{head} {name} | 0 | – | – | – |")
            continue
        half = bias_aware_critical(bound[published, 0] / std_err[published, 0]) * std_err[
            published, 0]
        within = np.abs(residual[published]) <= bound[published, 0] + 0.05 * std_err[
            published, 0]
        lines.append(f"{head} {name} | {published.sum()} | {100 * within.mean():.1f} % | "
                     f"{100 * np.mean(np.abs(error[published]) <= half):.1f} % | "
                     f"{100 * np.mean(error[published] + half < 0):.1f} % |")
    return lines


def _ratio_range(values):
    return f"{values.min():.2f}–{values.max():.2f}"


def decompose_line(n, p, q, ratio, epsilon, reps, n_jobs, first=0):
    """One cell's row of the ``--decompose`` table (module doc)."""
    rows = Parallel(n_jobs=n_jobs)(delayed(replication)(s, n, p, q, ratio, epsilon)
                                   for s in range(first, first + reps))
    field = {key: np.array([r[key] for r in rows]) for key in rows[0] if key != "bounds"}
    privacy_sd = (field["estimate"] - field["minimizer"]).std(axis=0)
    sampling_sd = field["minimizer"].std(axis=0)
    se, bound = field["shipped_se"], field["shipped_bound"]
    published = np.isfinite(se).all(axis=1)
    widening = (bias_aware_critical(bound[published] / se[published]) / 1.959963984540054
                ).mean(axis=0) if published.any() else np.full(p + 1, np.nan)
    return (f"| {n} | {p} | {q:g} | {'balanced' if ratio == 1 else '4:1'} | {epsilon:g} | {reps} | "
            f"{100 * published.mean():.0f} % | "
            f"{_ratio_range(field['privacy_se'].mean(axis=0) / privacy_sd)} | "
            f"{_ratio_range(field['sampling_se'].mean(axis=0) / sampling_sd)} | "
            f"{_ratio_range(np.median(bound / field['std_err'], axis=0))} | "
            f"{_ratio_range(np.median(np.abs(field['residual']) / field['std_err'], axis=0))} | "
            f"{_ratio_range(widening)} |")


def main():
    parser = benchmark_parser(__doc__)
    parser.add_argument("--reps", type=int, default=None,
                        help="replications per cell (default 300, 20 with --quick)")
    parser.add_argument("--n-jobs", type=int, default=1, help="joblib processes")
    parser.add_argument("--decompose", action="store_true",
                        help="the parts of the published intervals (module doc)")
    parser.add_argument("--intercept", action="store_true",
                        help="the intercept over the published fits, per share (module doc)")
    parser.add_argument("--cells", type=int, nargs="*", default=None,
                        help="indices of the cells to run (default: all)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the replications' seeds start here (default 0)")
    add_steps_argument(parser)
    args = parser.parse_args()
    args.tag = "_".join(t for t in (apply_steps(args),
                                    f"seeds{args.first_seed}" if args.first_seed else "") if t)
    reps = args.reps or (20 if args.quick else 300)
    cells = CELLS[:2] if args.quick else CELLS
    if args.decompose:
        cells = DECOMPOSE_CELLS[:2] if args.quick else DECOMPOSE_CELLS
    if args.cells is not None:
        cells = [cells[i] for i in args.cells]
    if args.decompose:
        return decompose(cells, reps, args)
    if args.intercept:
        return intercept_table(cells, reps, args)
    header = ("| n | p | q | classes | ε | reps | plug-in | true residual within bound | "
              "within bound, fits published at R = 8 (their number) | "
              "largest bound / SE (median) | largest true residual / SE (median) | "
              + " | ".join(f"R = {r:g}: publish / coverage / width" for r in RESOLVED) + " |")
    _write_table("private_bound", header, cells, cell_lines, reps, args)


def _write_table(stem, header, cells, make_lines, reps, args):
    """Run each cell's ``make_lines`` and write the table as it grows."""
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    target = output_dir(args.output_dir) / _name(stem, args)
    for cell in cells:
        lines += make_lines(*cell, reps, args.n_jobs, args.first_seed)
        print(lines[-1], flush=True)
        target.write_text("\n".join(lines) + "\n")
    wrote(target)


def _name(stem, args):
    """The result file's name: ``stem``, ``_quick``, the plan's tag, ``.md``."""
    return stem + ("_quick" if args.quick else "") + (f"_{args.tag}" if args.tag else "") + ".md"


def decompose(cells, reps, args):
    header = ("| n | p | q | classes | ε | reps | published | privacy SE / SD | sampling SE / SD | "
              "bound / SE (median) | true residual / SE (median) | bias-aware / Wald half width |")
    _write_table("private_decomposition", header, cells,
                 lambda *a: [decompose_line(*a)], reps, args)


def intercept_table(cells, reps, args):
    header = ("| n | p | q | classes | ε | reps | plug-in | fits published at R = 8 | "
              "intercept's true residual within bound | intercept covered | "
              "interval wholly below target |")
    _write_table("private_bound_intercept", header, cells, intercept_lines, reps, args)


if __name__ == "__main__":
    main()
