"""DWD coefficient inference: coverage of nominal 95 % Wald intervals.

Simulation study of ``DWDClassifier(inference=True)`` on the genDWD paper's
two-Gaussian design (``make_federated_gaussians``, μ = 0.2, σ = 1, 5 sites,
20 batches; balanced or 4:1 classes), for n in {2 000, 20 000}, p in {5, 20},
q in {1, 4}: the offline ``fit`` on all rows and the 20-batch
``partial_fit`` stream. The target of every interval is the population
minimizer at the same ``alpha`` (``gaussian_gendwd_target``, computed by
quadrature, independent of the estimator). Each cell reports the coverage
pooled over the p + 1 parameters, the smallest and largest coverage of one
parameter, the mean interval width of the coefficients and of the
intercept, the range over parameters of the mean standard error over the
estimates' standard deviation across replications (1 when the variance is
right) and the largest |bias| of an estimate in units of that deviation. With R replications a correct interval's coverage has Monte Carlo
standard error sqrt(0.95 · 0.05 / R) (0.69 % at R = 1 000).

Private cells (ε in {1, 4}): ``mechanism='local-gaussian'`` with
``clip_norm = 2 sqrt(1 + p)`` (above the rows' norms but for a fraction
< 1e-3 at p = 5, so the clip barely moves the target), offline ``fit``.
Each private replication also fits the non-private interval on the same
rows: "width vs non-private" is the mean ratio of the widths. The
private cells report ``confint()`` (after an offline private fit the
bias-aware interval around the refinement, its "SE / SD" the mean width
over 2 · 1.96 over the estimates' SD) and the parametric bootstrap
(``confint(method='bootstrap', n_resamples=BOOTSTRAP_RESAMPLES)``, seeded
per replication): its pooled coverage, the range over parameters, its
width against the non-private one and the share of fits that give none
(NaN: the released curvature below its noise floor in some direction).

Private stream cells (``--private-stream``): the same private estimator
fed a 20-batch ``partial_fit`` stream over the 5 sites, n in {20 000, 2 000}
(``--sizes``), p in {5, 20}, q in {1, 4}, balanced and 4:1, ε in {1, 4},
with four schedules: "stream, equal" (the generator's 20 equal batches
with the shipped ``FIRST_BATCH_SHARE``, which withholds every such stream
from its third batch on, by the row counts alone), "stream,
rule off" (20 equal batches of 1 000 rows, the generator's, measured with
``FIRST_BATCH_SHARE`` set to 0: with it, such a stream publishes no
interval from its third batch on), "stream, first n/2" (a first batch
of 10 000 rows, the generator's first 10 batches, then 19 batches of about
526 rows, each site's rows spread evenly) and "stream, first n/4, rule
off" (a first batch of 5 000 rows, then 19 of about 789); at n = 2 000
every batch is a tenth as large. The non-private interval is the
non-private stream on the same batches. The rule reads row counts only: a
"rule off" stream's estimates are those of the same schedule with the
rule (same releases, same draws); only the published covariance differs.
The bootstrap replays the one-batch refinement only: the stream cells
have none.

Two more studies (``--study``):

* ``multinomial``: ``LogisticRegression(inference=True)`` with 3 classes
  (α = 1e-6) on a well-specified multinomial design (``X ~ N(0, I_p)``,
  fixed centred coefficients; balanced classes, or intercepts making the
  first class 4 times as frequent as each other), n in {2 000, 20 000}, p in
  {5, 20}, offline and a 20-batch stream over 5 sites. The target is the
  true centred parameters (the penalized minimizer at α = 1e-6 differs by
  O(α)); each of the 3 (p + 1) parameters counts.
* ``batch-size``: the DWD design at n = 2 000, p = 20, q = 1, balanced and
  4:1, streamed in batches of 100, 200, 400 and 1 000 rows, and a first
  batch of 1 000 rows then batches of 100: the coverage, the shift of the
  stream's estimate from the offline fit on the same rows (mean over data
  sets, in units of the stream's spread; largest over parameters) against
  the shift index ``I = p1 Σ_{j≥2} W_j / N_j / √N`` that
  ``StreamShiftWarning`` is raised on; each schedule with the default
  update and with ``shift_correction='second-order'`` (same batches).

``--second-order``: the 16 stream cells (n in {2 000, 20 000}, p in {20, 5},
q in {1, 4}, both class ratios; p = 5, n = 2 000 with ``--quick``), each as the
first-order stream (mode ``stream``), with ``shift_correction='second-order'``
(mode ``stream-2nd``) and as the estimator's default (mode ``stream-default``,
``'auto'``: the corrected stream in these cells; the main table's stream
rows are this mode), and the default in a stream started by ``fit`` on the
first batch (mode ``stream-fit-default``; ``stream-fit-2nd``: 'second-order',
the fit batch's moments computed in ``fit``) on the same data sets (``--sizes`` and ``--modes``
choose among them; ``--q`` and ``--classes`` too). ``--per-parameter``
also writes every parameter's coverage with its Monte Carlo standard error
and 95 % (Wilson) interval, the share of intervals lying wholly above and
below the target, bias / SD and SE / SD (``*_per_parameter.csv`` / ``.md``);
``--q``, ``--classes`` and a ``--reps`` other than 1 000 are appended to
the file names. ``--first-seed S`` runs the data sets of seeds S to
S + R − 1 (default 0; ``_seedS`` in the file names), fresh ones beyond an
earlier run's; ``--save-raw`` also writes every cell's intervals
``(R, p + 1, 2)`` and point estimates ``(R, p + 1)`` (``*_raw.npz``, keys
``n{n}_p{p}_q{q}_r{ratio}_{mode}_intervals`` / ``_estimates``, rewritten
after each cell) so that runs over disjoint seeds can be pooled.

    python benchmarks/bench_inference.py [--quick] [--reps R] [--n-jobs J]
        [--private-only | --private-stream | --curvature-noise | --curvature-plans
         | --every-batch]
        [--second-order] [--features P ...] [--sizes N ...] [--modes MODE ...]
        [--epsilons EPS ...] [--tag TAG] [--q Q ...] [--classes {balanced,4:1} ...]
        [--per-parameter] [--no-bootstrap] [--first-seed S] [--save-raw]
        [--study {dwd,multinomial,batch-size}]

Writes inference.csv and inference.md (``inference_private_stream.*`` with
``--private-stream``, ``inference_private_stream_curvature.md`` with
``--curvature-noise``, ``inference_private_stream_curvature_plans.md`` with
``--curvature-plans``, ``inference_private_stream_every_batch.md`` with
``--every-batch``; ``*_quick`` with ``--quick``, ``*_TAG`` with ``--tag``) into
``--output-dir`` (default ``benchmarks/results``); the CSV is rewritten after
each cell, so an interrupted run keeps the cells it finished.
"""

import csv
import itertools
import math
import os
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from joblib import Parallel, delayed  # noqa: E402

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv import DWDClassifier, LogisticRegression  # noqa: E402
from skfedpriv.datasets import gaussian_gendwd_target, make_federated_gaussians  # noqa: E402
from skfedpriv.linear_model import _inference_private_stream as share_rule  # noqa: E402

from _output import benchmark_parser, output_dir, wrote  # noqa: E402
from _step_plan import add_steps_argument, apply_steps  # noqa: E402

MU, SIGMA, SITES, BATCHES = 0.2, 1.0, 5, 20
#: The stream modes: the first-order renewable stream, the one published with
#: ``shift_correction='second-order'`` (same chain, corrected estimate), and
#: the estimator's default (``'auto'``: the corrected one in every cell here),
#: started by ``partial_fit`` or (``stream-fit-default``) by ``fit`` on the first batch.
SHIFT_CORRECTION = {"stream": None, "stream-2nd": "second-order", "stream-default": "auto",
                    "stream-fit-default": "auto", "stream-fit-2nd": "second-order"}
FIELDS = ["n", "p", "q", "classes", "mode", "mechanism", "epsilon", "reps", "coverage",
          "coverage_min", "coverage_max", "mc_se", "width_coef", "width_intercept",
          "width_ratio", "unresolved", "se_ratio_min", "se_ratio_max", "bias_max",
          "boot_coverage", "boot_coverage_min", "boot_coverage_max", "boot_width_ratio",
          "boot_unresolved", "boot_run",
          "seconds"]
#: Replays of the private cells' parametric bootstrap.
BOOTSTRAP_RESAMPLES = 500


def private_estimator(q, p, epsilon, seed):
    """The private fit of a cell (seeded for a reproducible study)."""
    return DWDClassifier(q=q, inference=True, mechanism="local-gaussian", epsilon=epsilon,
                         clip_norm=2.0 * np.sqrt(1.0 + p), classes=[-1, 1],
                         random_state=10**6 + seed)


def one_replication(seed, n, p, q, ratio, mode, epsilon=None, bootstrap=True):
    """The 95 % intervals of every parameter, and (private cells) the
    non-private intervals on the same rows (and the bootstrap's, NaN
    without ``bootstrap``)."""
    X, y, g, b = make_federated_gaussians(
        n_sites=SITES, n_batches=BATCHES, n_per_batch=n // (SITES * BATCHES), n_features=p,
        mu=MU, sigma=SIGMA, ratio=ratio, random_state=seed)
    if epsilon is not None and mode != "offline":
        batches = stream_batches(b, g, PRIVATE_SCHEDULES[mode])
        return private_stream_replication(X, y, g, batches, q, p, epsilon, seed, mode)
    if epsilon is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            private = private_estimator(q, p, epsilon, seed).fit(X, y, sample_group=g)
        public = DWDClassifier(q=q, inference=True).fit(X, y, sample_group=g)
        estimate = np.r_[private.intercept_, private.coef_[0]]
        boot = (private.confint(0.95, method="bootstrap", n_resamples=BOOTSTRAP_RESAMPLES,
                                random_state=seed) if bootstrap
                else np.full((1, p + 1, 2), np.nan))
        return np.stack([private.confint(0.95)[0], public.confint(0.95)[0],
                         np.column_stack([estimate, estimate]), boot[0]])
    clf = DWDClassifier(q=q, inference=True, shift_correction=SHIFT_CORRECTION.get(mode, "auto"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "offline":
            clf.fit(X, y, sample_group=g)
        else:
            for k in range(BATCHES):
                rows = b == k
                if k == 0 and mode.startswith("stream-fit"):  # fit the first batch
                    clf.fit(X[rows], y[rows], sample_group=g[rows])
                else:
                    clf.partial_fit(X[rows], y[rows], sample_group=g[rows], classes=[-1, 1])
    interval = clf.confint(0.95)[0]
    return np.stack([interval, interval, interval, interval])


#: The private stream schedules: mode -> the first batch's share of the
#: rows (None: the generator's 20 equal batches). "rule off": with
#: ``FIRST_BATCH_SHARE`` set to 0, to measure what it withholds; "stream,
#: equal": the issue's 20 equal batches with the shipped rule.
PRIVATE_SCHEDULES = {"stream, rule off": None, "stream, first n/2": 0.5,
                     "stream, first n/4, rule off": 0.25, "stream, equal": None}


def stream_batches(b, g, first_share):
    """The batch of every row: the generator's (``first_share`` None), or
    its first ``first_share * BATCHES`` batches as one, then each site's
    other rows spread evenly over the remaining ``BATCHES - 1``."""
    if first_share is None:
        return b
    first = b < BATCHES * first_share
    out = np.zeros_like(b)
    for site in np.unique(g):
        rows = np.flatnonzero(~first & (g == site))
        out[rows] = 1 + np.arange(len(rows)) * (BATCHES - 1) // len(rows)
    return out


def private_stream_replication(X, y, g, batches, q, p, epsilon, seed, mode):
    """The private stream's 95 % intervals and estimate after its last
    batch, and the non-private stream's intervals on the same batches (NaN,
    not run, where the private stream publishes none: only the widths'
    ratio reads them)."""
    private = private_estimator(q, p, epsilon, seed)
    rule = share_rule.FIRST_BATCH_SHARE
    share_rule.FIRST_BATCH_SHARE = 0.0 if mode.endswith("rule off") else rule
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k in range(BATCHES):
                rows = batches == k
                private.partial_fit(X[rows], y[rows], sample_group=g[rows])
    finally:
        share_rule.FIRST_BATCH_SHARE = rule
    interval = private.confint(0.95)[0]
    public = np.full((p + 1, 2), np.nan)
    if not np.isnan(interval).any():
        stream = DWDClassifier(q=q, inference=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k in range(BATCHES):
                rows = batches == k
                stream.partial_fit(X[rows], y[rows], sample_group=g[rows], classes=[-1, 1])
        public = stream.confint(0.95)[0]
    estimate = np.r_[private.intercept_, private.coef_[0]]
    return np.stack([interval, public, np.column_stack([estimate, estimate]), public * np.nan])


def curvature_noise_rows(n=20000, p=5, sample=400_000):
    """Why equal small batches cannot each release their curvature: the
    spectral norm ``2 sqrt(p1) s`` of the summed noise of ``BATCHES``
    per-batch curvature releases (entry std ``s = sqrt(BATCHES SITES) σ Δ_H
    / κ``) against the eigenvalues of the stream's curvature at the target
    (``Σ V_q''(u) x̄ x̄ᵀ`` over n rows, from a large sample of the design).
    Two release plans: the gradient, the curvature and the score outer
    products at κ = 3 (the re-solve attempt's, 19 units), and the curvature
    alone (κ = 1, 1 unit: a batch's whole budget on it). Data-independent
    numbers: σ from the calibration, Δ_H from ``clip_norm``."""
    from skfedpriv._loss import GenDWDLoss
    from skfedpriv._losses import gendwd_curvature
    from skfedpriv.privacy._objective_perturbation import local_gaussian_sigma
    from skfedpriv.privacy._score_outer import exact_curvature_sensitivity

    clip = 2.0 * np.sqrt(1.0 + p)
    rows = []
    for q, ratio in itertools.product((1.0, 4.0), (1.0, 4.0)):
        intercept, coef = gaussian_gendwd_target(p, MU, SIGMA, ratio, q=q)
        X, y, _, _ = make_federated_gaussians(n_sites=1, n_batches=1, n_per_batch=sample,
                                              n_features=p, mu=MU, sigma=SIGMA, ratio=ratio,
                                              random_state=0)
        Xb = np.c_[np.ones(len(X)), X]
        weight = gendwd_curvature(y * (Xb @ np.r_[intercept, coef]), q)
        eigenvalues = np.linalg.eigvalsh((Xb * weight[:, None]).T @ Xb * (n / sample))
        sensitivity = exact_curvature_sensitivity(GenDWDLoss(q), clip)
        for epsilon in (4.0, 1.0):
            norms = [2.0 * np.sqrt(p + 1.0) * np.sqrt(BATCHES * SITES) * sensitivity / kappa
                     * local_gaussian_sigma(epsilon, 1e-5, units, "analytic")
                     for kappa, units in ((3.0, 19), (1.0, 1))]
            rows.append(dict(q=q, classes="balanced" if ratio == 1 else "4:1", epsilon=epsilon,
                             smallest=eigenvalues[0], largest=eigenvalues[-1],
                             noise_plan=norms[0], noise_alone=norms[1]))
    return rows


#: Release plans of the later batches' accumulated curvature
#: (``--curvature-plans``): plan -> (factorization of the 19 later batches'
#: prefix sums, or None for one deferred release of the running sum).
CURVATURE_PLANS = {"per batch (independent)": "independent", "continual, tree (Honaker)":
                   "honaker", "continual, BLT": "blt", "continual, optimal": "optimal",
                   "deferred: one release at the last batch": None}


def curvature_plan_rows(n=20000, p=5, kappa=3.0):
    """The noise of the later batches' accumulated curvature under each of
    :data:`CURVATURE_PLANS`, against the smallest eigenvalue of the stream's
    curvature (equal batches, the first excluded: its rows already spend the
    refinement's budget). A later row enters its gradient (1 unit) and, at
    ``1/kappa`` of the gradient's noise per unit of sensitivity, the
    curvature stream (``kappa²`` units); with a factorization ``A = B C`` the
    last prefix's noise std is ``sensitivity(C) ‖B_last‖`` times one
    release's. Data-independent numbers (the factorizations of
    ``skfedpriv.privacy``, σ from the calibration, Δ_H from ``clip_norm``)
    but the eigenvalues (:func:`curvature_noise_rows`). For reference, the
    offline fit's last released curvature (its whole budget's units, at
    ``1/STAGE_PRECISION[-1]``): the one-batch refinement publishes at n =
    20 000, ε = 4 with that ratio."""
    from skfedpriv._loss import GenDWDLoss
    from skfedpriv.linear_model import _inference_private as refinement
    from skfedpriv.privacy import make_factorization
    from skfedpriv.privacy._objective_perturbation import (local_gaussian_releases,
                                                           local_gaussian_sigma)
    from skfedpriv.privacy._score_outer import exact_curvature_sensitivity

    later = BATCHES - 1
    # the offline fit's units (one model, the default online_steps)
    offline_units = (local_gaussian_releases(1, DWDClassifier().online_steps, True)
                     + refinement.inference_releases(1))
    factor = {plan: 1.0 if name is None else
              make_factorization(name, later).sensitivity
              * float(np.linalg.norm(np.asarray(make_factorization(name, later).B)[-1]))
              for plan, name in CURVATURE_PLANS.items()}
    rows = []
    for row in curvature_noise_rows(n, p):
        sensitivity = exact_curvature_sensitivity(GenDWDLoss(row["q"]), 2.0 * np.sqrt(1.0 + p))
        sigma = local_gaussian_sigma(row["epsilon"], 1e-5, 1.0 + kappa**2, "analytic")
        unit = 2.0 * np.sqrt(p + 1.0) * np.sqrt(SITES) * sensitivity * sigma / kappa
        offline = local_gaussian_sigma(row["epsilon"], 1e-5, offline_units, "analytic")
        reference = unit * offline / sigma * kappa / refinement.STAGE_PRECISION[-1]
        rows.append(dict(row, offline=reference / row["smallest"],
                         **{plan: unit * f / row["smallest"] for plan, f in factor.items()}))
    return rows, factor


def curvature_plan_markdown(rows, factor):
    plans = list(CURVATURE_PLANS)
    return markdown_table(
        ["q", "classes", "ε", "smallest eigenvalue", "offline fit's last curvature"]
        + [f"{plan} (×{factor[plan]:.2f})" for plan in plans],
        [[f"{r['q']:g}", r["classes"], f"{r['epsilon']:g}", f"{r['smallest']:.0f}",
          f"{r['offline']:.2f}"] + [f"{r[plan]:.2f}" for plan in plans] for r in rows])


def curvature_noise_markdown(rows):
    return markdown_table(
        ["q", "classes", "ε", "curvature eigenvalues (min–max)",
         "summed noise, gradient + curvature + outer (κ = 3)", "summed noise, curvature alone"],
        [[f"{r['q']:g}", r["classes"], f"{r['epsilon']:g}",
          f"{r['smallest']:.0f}–{r['largest']:.0f}", f"{r['noise_plan']:.0f}",
          f"{r['noise_alone']:.0f}"] for r in rows])


#: The batches after which ``--every-batch`` checks the interval (1-based).
CHECKED_BATCHES = (2, 3, 6, 11, 20)


def every_batch_coverage(q, ratio, epsilon, reps):
    """Pooled coverage of the private stream's intervals after each of
    :data:`CHECKED_BATCHES` ("stream, first n/2" schedule, n = 20 000, p = 5)."""
    intercept, coef = gaussian_gendwd_target(5, MU, SIGMA, ratio, q=q)
    target = np.r_[intercept, coef]
    covered = {k: [] for k in CHECKED_BATCHES}
    for seed in range(reps):
        X, y, g, b = make_federated_gaussians(
            n_sites=SITES, n_batches=BATCHES, n_per_batch=20000 // (SITES * BATCHES),
            n_features=5, mu=MU, sigma=SIGMA, ratio=ratio, random_state=seed)
        batches = stream_batches(b, g, PRIVATE_SCHEDULES["stream, first n/2"])
        private = private_estimator(q, 5, epsilon, seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k in range(BATCHES):
                rows = batches == k
                private.partial_fit(X[rows], y[rows], sample_group=g[rows])
                if k + 1 in covered:
                    low, high = private.confint(0.95)[0].T
                    covered[k + 1].append((low <= target) & (target <= high))
    return [f"{q:g}", "balanced" if ratio == 1 else "4:1", f"{epsilon:g}", str(reps)] + [
        f"{100 * np.mean(covered[k]):.1f} %" for k in CHECKED_BATCHES]


def private_stream_cells(quick):
    """``(n, p, q, ratio, mode, epsilon)`` of the private stream cells (n =
    20 000 first)."""
    if quick:
        return [(20000, 5, 1.0, 1.0, mode, 4.0) for mode in PRIVATE_SCHEDULES]
    return [(n, p, q, ratio, mode, eps) for n in (20000, 2000) for p in (5, 20)
            for mode in PRIVATE_SCHEDULES for q in (1.0, 4.0) for ratio in (1.0, 4.0)
            for eps in (4.0, 1.0)]


def replications(seeds, *cell, replication=one_replication, **options):
    return [replication(int(seed), *cell, **options) for seed in seeds]


def coverage_row(intervals, target, estimates=None, **fields):
    """The table's statistics of ``(reps, n_params, 2)`` intervals.

    ``estimates`` (default: the intervals' midpoints) are the fits' point
    estimates. A fit whose interval is NaN published none: coverage, spread
    and standard errors are over the published fits, the bias over all."""
    width = intervals[..., 1] - intervals[..., 0]
    published = ~np.isnan(width).any(axis=1)
    covered = ((intervals[..., 0] <= target) & (target <= intervals[..., 1]))[published]
    per_parameter = covered.mean(axis=0) if len(covered) else np.full(len(target), np.nan)
    estimates = intervals.mean(axis=-1) if estimates is None else estimates
    spread = estimates[published].std(axis=0, ddof=1) if published.sum() > 1 else np.nan
    se_ratio = np.nanmean(width, axis=0) / (2 * 1.959963984540054) / spread
    bias = np.abs(estimates.mean(axis=0) - target) / estimates.std(axis=0, ddof=1)
    reps = len(intervals)
    return dict(fields, reps=reps, coverage=covered.mean() if len(covered) else np.nan,
                coverage_min=per_parameter.min(), coverage_max=per_parameter.max(),
                mc_se=np.sqrt(0.95 * 0.05 / reps), unresolved=1.0 - published.mean(),
                se_ratio_min=se_ratio.min(), se_ratio_max=se_ratio.max(), bias_max=bias.max())


def per_parameter_rows(intervals, target, estimates=None, **fields):
    """One row per parameter of ``(reps, n_params, 2)`` intervals: its
    coverage with the Monte Carlo standard error ``sqrt(c (1 - c) / R)``
    and a 95 % Wilson interval, the share of intervals lying wholly above
    / below the target, bias / SD and SE / SD (as :func:`coverage_row`)."""
    estimates = intervals.mean(axis=-1) if estimates is None else estimates
    reps, z = len(intervals), 1.959963984540054
    spread = estimates.std(axis=0, ddof=1)
    rows = []
    for j, value in enumerate(target):
        low, high = intervals[:, j, 0], intervals[:, j, 1]
        c = np.mean((low <= value) & (value <= high))
        wilson_low, wilson_high = wilson_interval(c, reps)
        rows.append(dict(fields, parameter="intercept" if j == 0 else f"coef {j}", reps=reps,
                         coverage=c, mc_se=np.sqrt(c * (1 - c) / reps),
                         wilson_low=wilson_low, wilson_high=wilson_high,
                         above=np.mean(low > value), below=np.mean(high < value),
                         bias_sd=(estimates[:, j].mean() - value) / spread[j],
                         se_sd=np.mean(high - low) / (2 * z) / spread[j]))
    return rows


def wilson_interval(c, reps, z=1.959963984540054):
    """The 95 % Wilson interval of a coverage ``c`` observed over ``reps``
    data sets (its Monte Carlo interval)."""
    centre = (c + z * z / (2 * reps)) / (1 + z * z / reps)
    half = z * np.sqrt(c * (1 - c) / reps + z * z / (4 * reps * reps)) / (1 + z * z / reps)
    return centre - half, centre + half


PER_PARAMETER_FIELDS = ["n", "p", "q", "classes", "mode", "epsilon", "parameter", "reps",
                        "coverage", "mc_se", "wilson_low", "wilson_high", "above", "below",
                        "bias_sd", "se_sd"]


def per_parameter_markdown(rows):
    return markdown_table(
        ["n", "p", "q", "classes", "fit", "parameter", "coverage ± MC SE",
         "95 % MC interval", "interval above / below target", "bias / SD", "SE / SD",
         "reps"],
        [[str(r["n"]), str(r["p"]), f"{r['q']:g}", r["classes"],
          r["mode"] + ("" if r.get("epsilon", math.inf) == math.inf
                       else f", ε = {r['epsilon']:g}"), r["parameter"],
          f"{100 * r['coverage']:.1f} ± {100 * r['mc_se']:.1f} %",
          f"{100 * r['wilson_low']:.1f}–{100 * r['wilson_high']:.1f} %",
          f"{100 * r['above']:.1f} / {100 * r['below']:.1f} %", f"{r['bias_sd']:+.2f}",
          f"{r['se_sd']:.2f}", str(r["reps"])] for r in rows])


def run_cell(n, p, q, ratio, mode, epsilon, reps, n_jobs, bootstrap=True, parameters=None,
             first_seed=0, raw=None):
    """A cell's row (:func:`coverage_row`) over the data sets of seeds
    ``first_seed`` to ``first_seed + reps - 1``; with a list ``parameters``,
    its per-parameter rows (:func:`per_parameter_rows`, over the fits that
    published an interval; none if no fit did) are appended to it; with a
    dict ``raw``, the cell's intervals and point estimates are stored in it
    (keys ``"n{n}_p{p}_q{q}_r{ratio}_{mode}_intervals"`` and
    ``..._estimates``)."""
    intercept, coef = gaussian_gendwd_target(p, MU, SIGMA, ratio, q=q)
    target = np.r_[intercept, coef]
    start = time.perf_counter()
    chunks = np.array_split(np.arange(first_seed, first_seed + reps), max(1, n_jobs * 4))
    results = Parallel(n_jobs=n_jobs)(
        delayed(replications)(chunk, n, p, q, ratio, mode, epsilon,
                              **({} if epsilon is None or mode != "offline"
                                 else {"bootstrap": bootstrap}))
        for chunk in chunks)
    both = np.array([r for chunk in results for r in chunk])  # (reps, 4, p+1, 2)
    intervals = both[:, 0]
    if raw is not None:
        key = f"n{n}_p{p}_q{q:g}_r{ratio:g}_{mode}"
        raw[key + "_intervals"], raw[key + "_estimates"] = intervals, both[:, 2].mean(axis=-1)
    public_width = both[:, 1, :, 1] - both[:, 1, :, 0]
    width = intervals[..., 1] - intervals[..., 0]
    boot = coverage_row(both[:, 3], target)
    published = ~np.isnan(width).any(axis=1)
    if parameters is not None and published.any():
        parameters += per_parameter_rows(
            intervals[published], target, both[published, 2].mean(axis=-1), n=n, p=p, q=q,
            classes="balanced" if ratio == 1 else "4:1", mode=mode,
            epsilon=math.inf if epsilon is None else epsilon)
    boot_width = both[:, 3, :, 1] - both[:, 3, :, 0]
    return coverage_row(
        intervals, target, both[:, 2].mean(axis=-1),
        n=n, p=p, q=q, classes="balanced" if ratio == 1 else "4:1", mode=mode,
        mechanism="none" if epsilon is None else "local-gaussian",
        epsilon=math.inf if epsilon is None else epsilon,
        width_coef=np.nanmean(width[:, 1:]), width_intercept=np.nanmean(width[:, 0]),
        width_ratio=np.nanmean(width / public_width), seconds=time.perf_counter() - start,
        boot_coverage=boot["coverage"], boot_coverage_min=boot["coverage_min"],
        boot_coverage_max=boot["coverage_max"],
        boot_width_ratio=np.nanmean(boot_width / public_width),
        boot_unresolved=boot["unresolved"], boot_run=bootstrap and epsilon is not None)


def cells(quick, private_only=False, second_order=False, sizes=(2000, 20000)):
    """``(n, p, q, ratio, mode, epsilon)`` of every cell to run (epsilon None:
    non-private); ``second_order``: the streams only, each with and without
    ``shift_correction='second-order'`` (of the given ``sizes``)."""
    if second_order:  # n = 2 000 first (where the first-order stream under-covers)
        sizes = (2000,) if quick else sizes
        grid = itertools.product(sizes, (5,) if quick else (20, 5), (1.0, 4.0), (4.0, 1.0))
        return [cell + (mode, None) for cell in grid for mode in SHIFT_CORRECTION]
    if quick:
        public = [(2000, 5, 1.0, 1.0, mode, None) for mode in ("offline", "stream-default")]
        private = [(20000, 5, 1.0, 1.0, "offline", eps) for eps in (4.0, 1.0)]
    else:
        # the n = 20 000 cells first (the targets' main figures), then n = 2 000
        grid = list(itertools.product((20000, 2000), (5, 20), (1.0, 4.0), (1.0, 4.0)))
        public = [cell + (mode, None) for cell in grid
                  for mode in ("offline", "stream-default")]
        # p = 5 before p = 20 (the private curvature is cheaper to resolve there)
        private = [cell + ("offline", eps) for cell in sorted(grid, key=lambda c: c[1])
                   for eps in (4.0, 1.0)]
    return private if private_only else public + private


def boot_text(r):
    """The bootstrap's cells of a private row (``–`` for a non-private one)."""
    if r["mechanism"] == "none":
        return "– | – | –"
    if not r.get("boot_run", True):
        return "not run | – | –"
    if r["boot_unresolved"] == 1.0:
        return "– | – | 100 %"
    return (f"{100 * r['boot_coverage']:.1f} % ({100 * r['boot_coverage_min']:.1f}–"
            f"{100 * r['boot_coverage_max']:.1f} %) | {r['boot_width_ratio']:.2f} | "
            f"{100 * r['boot_unresolved']:.0f} %")


def markdown(rows, footer=True):
    lines = ["| n | p | q | classes | fit | ε | coverage (pooled) | min–max over parameters | "
             "mean width coef / intercept | width vs non-private | NaN SE (no interval) | SE / SD | max bias / SD | "
             "bootstrap coverage (min–max) | bootstrap width vs non-private | no bootstrap "
             "interval | reps |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        eps = "–" if r["mechanism"] == "none" else f"{r['epsilon']:g}"
        published = ("– | – | – | – | " if float(r["unresolved"]) == 1.0 else
                     f"{100 * r['coverage']:.1f} % | {100 * r['coverage_min']:.1f}–"
                     f"{100 * r['coverage_max']:.1f} % | {r['width_coef']:.4f} / "
                     f"{r['width_intercept']:.4f} | {r['width_ratio']:.2f} | ")
        spread = ("–" if float(r["unresolved"]) == 1.0 else
                  f"{r['se_ratio_min']:.2f}–{r['se_ratio_max']:.2f}")
        lines.append(
            f"| {r['n']} | {r['p']} | {r['q']:g} | {r['classes']} | {r['mode']} | {eps} | "
            f"{published}{100 * r['unresolved']:.0f} % | {spread} | "
            f"{r['bias_max']:.2f} | {boot_text(r)} | {r['reps']} |")
    if footer:
        lines.append("| 2000, 20000 | 5, 20 | 1, 4 | both | stream | 1, 4 | see \"Private "
                     "streams\" (`--private-stream`) | | | | | | | | | | |")
    return "\n".join(lines) + "\n"


# -- multinomial LogisticRegression -------------------------------------------------

N_CLASSES = 3


def multinomial_target(p, ratio):
    """Class-major ``(intercept, coef)`` of the 3 classes, every column
    summing to zero: fixed coefficients of size ~1 / √p per class (the
    scores' spread does not grow with p), intercepts ``log ratio`` for the
    first class, centred."""
    coef = np.random.default_rng(12345).normal(scale=1.0 / np.sqrt(p), size=(N_CLASSES, p))
    intercept = np.r_[np.log(ratio), np.zeros(N_CLASSES - 1)]
    theta = np.column_stack([intercept, coef])
    return theta - theta.mean(axis=0)


def multinomial_rows(seed, n, theta):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, theta.shape[1] - 1))
    scores = theta[:, 0] + X @ theta[:, 1:].T
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return X, y, np.arange(n) % SITES


def multinomial_replication(seed, n, theta, mode):
    X, y, g = multinomial_rows(seed, n, theta)
    clf = LogisticRegression(alpha=1e-6, inference=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "offline":
            clf.fit(X, y, sample_group=g)
        else:
            for rows in np.array_split(np.arange(n), BATCHES):
                clf.partial_fit(X[rows], y[rows], sample_group=g[rows],
                                classes=list(range(N_CLASSES)))
    return clf.confint(0.95).reshape(-1, 2)


def multinomial_cells(quick, sizes=(2000, 20000)):
    if quick:
        return [(2000, 5, 1.0, mode) for mode in ("offline", "stream")]
    return list(itertools.product(sizes, (5, 20), (1.0, 4.0), ("offline", "stream")))


def run_multinomial_cell(n, p, ratio, mode, reps, n_jobs):
    theta = multinomial_target(p, ratio)
    start = time.perf_counter()
    chunks = np.array_split(np.arange(reps), max(1, n_jobs * 4))
    results = Parallel(n_jobs=n_jobs)(
        delayed(replications)(c, n, theta, mode, replication=multinomial_replication)
        for c in chunks)
    intervals = np.array([r for chunk in results for r in chunk])
    width = intervals[..., 1] - intervals[..., 0]
    intercepts = np.arange(N_CLASSES) * (p + 1)
    return coverage_row(
        intervals, theta.ravel(), n=n, p=p, classes="balanced" if ratio == 1 else "4:1",
        mode=mode, width_coef=np.delete(width, intercepts, axis=1).mean(),
        width_intercept=width[:, intercepts].mean(), seconds=time.perf_counter() - start)


MULTINOMIAL_FIELDS = ["n", "p", "classes", "mode", "reps", "coverage", "coverage_min",
                      "coverage_max", "mc_se", "width_coef", "width_intercept", "se_ratio_min",
                      "se_ratio_max", "bias_max", "seconds"]


def coverage_text(r):
    """``coverage (pooled) | min–max over parameters | SE / SD`` of a row."""
    return (f"{100 * r['coverage']:.1f} % | {100 * r['coverage_min']:.1f}–"
            f"{100 * r['coverage_max']:.1f} % | {r['se_ratio_min']:.2f}–{r['se_ratio_max']:.2f}")


def markdown_table(header, lines):
    """A markdown table of ``header`` (column names) and ``lines`` (rows of cells)."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(out + ["| " + " | ".join(line) + " |" for line in lines]) + "\n"


def multinomial_markdown(rows):
    return markdown_table(
        ["n", "p", "classes", "fit", "coverage (pooled)", "min–max over parameters", "SE / SD",
         "mean width coef / intercept", "max bias / SD", "reps"],
        [[str(r["n"]), str(r["p"]), r["classes"], r["mode"], coverage_text(r),
          f"{r['width_coef']:.4f} / {r['width_intercept']:.4f}", f"{r['bias_max']:.2f}",
          str(r["reps"])] for r in rows])


# -- DWD stream batch size ---------------------------------------------------------

SCHEDULES = ("100", "200", "400", "1000", "1000+100")


def batch_bounds(schedule, n):
    """Row ranges of a schedule: ``"b"`` equal batches of b rows,
    ``"f+b"`` a first batch of f rows then batches of b."""
    first, _, rest = schedule.partition("+")
    first, rest = int(first), int(rest or first)
    starts = [0] + list(range(first, n, rest))
    return list(zip(starts, starts[1:] + [n]))


def shift_index(schedule, n, n_params):
    """``I = n_params Σ_{j≥2} W_j / N_j / √N`` of a schedule (unit weights)."""
    bounds = batch_bounds(schedule, n)
    return n_params * sum((stop - start) / stop for start, stop in bounds[1:]) / np.sqrt(n)


def batch_size_replication(seed, n, p, q, ratio):
    """Intervals of the offline fit and of each schedule's stream, same rows."""
    X, y, g, _ = make_federated_gaussians(
        n_sites=SITES, n_batches=BATCHES, n_per_batch=n // (SITES * BATCHES), n_features=p,
        mu=MU, sigma=SIGMA, ratio=ratio, random_state=seed)
    out = [DWDClassifier(q=q, inference=True).fit(X, y, sample_group=g).confint(0.95)[0]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for schedule, correction in itertools.product(SCHEDULES, SHIFT_CORRECTION.values()):
            clf = DWDClassifier(q=q, inference=True, shift_correction=correction)
            for start, stop in batch_bounds(schedule, n):
                clf.partial_fit(X[start:stop], y[start:stop], sample_group=g[start:stop],
                                classes=[-1, 1])
            out.append(clf.confint(0.95)[0])
    return np.array(out)


def run_batch_size(n, p, q, ratio, reps, n_jobs):
    intercept, coef = gaussian_gendwd_target(p, MU, SIGMA, ratio, q=q)
    target = np.r_[intercept, coef]
    chunks = np.array_split(np.arange(reps), max(1, n_jobs * 4))
    results = Parallel(n_jobs=n_jobs)(
        delayed(replications)(c, n, p, q, ratio, replication=batch_size_replication)
        for c in chunks)
    intervals = np.array([r for chunk in results for r in chunk])  # (reps, 1 + 2S, p1, 2)
    estimates = intervals.mean(axis=-1)
    rows = []
    runs = [("offline", "–")] + [(schedule, "2nd order" if correction else "1st order")
                                 for schedule, correction in itertools.product(
                                     SCHEDULES, SHIFT_CORRECTION.values())]
    for k, (schedule, update) in enumerate(runs):
        stream = estimates[:, k]
        shift = (stream - estimates[:, 0]).mean(axis=0) / stream.std(axis=0, ddof=1)
        index = 0.0 if k == 0 else shift_index(schedule, n, p + 1)
        rows.append(coverage_row(
            intervals[:, k], target, n=n, p=p, q=q, classes="balanced" if ratio == 1 else "4:1",
            batches=schedule, update=update, index=index, shift_max=np.abs(shift).max(),
            warns=index > 0.2))
    return rows


BATCH_FIELDS = ["n", "p", "q", "classes", "batches", "update", "reps", "index", "warns",
                "shift_max",
                "coverage", "coverage_min", "coverage_max", "se_ratio_min", "se_ratio_max",
                "bias_max"]


def batch_size_markdown(rows):
    return markdown_table(
        ["classes", "batches (rows)", "update", "shift index I", "warns", "max shift / SD",
         "coverage (pooled)", "min–max over parameters", "SE / SD", "reps"],
        [[r["classes"], r["batches"], r["update"], f"{r['index']:.2f}",
          "yes" if r["warns"] else "no",
          f"{r['shift_max']:.2f}", coverage_text(r), str(r["reps"])] for r in rows])


def write_rows(folder, stem, fields, rows, to_markdown):
    """Rewrite the CSV and the markdown table (after each cell: an
    interrupted run keeps the cells it finished)."""
    with open(folder / f"{stem}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    (folder / f"{stem}.md").write_text(to_markdown(rows))


def run_study(study, args, reps, folder):
    """The multinomial or batch-size study (see the module doc)."""
    suffix = "_quick" if args.quick else ""
    rows = []
    if study == "multinomial":
        stem, fields, to_markdown = f"inference_multinomial{suffix}", MULTINOMIAL_FIELDS, \
            multinomial_markdown
        for cell in multinomial_cells(args.quick, args.sizes):
            rows.append(run_multinomial_cell(*cell, reps, args.n_jobs))
            print(rows[-1], flush=True)
            write_rows(folder, stem, fields, rows, to_markdown)
    else:
        stem, fields, to_markdown = f"inference_batch_size{suffix}", BATCH_FIELDS, \
            batch_size_markdown
        for ratio in (4.0, 1.0):
            rows += run_batch_size(2000, 20, 1.0, ratio, reps, args.n_jobs)
            print(rows[-1], flush=True)
            write_rows(folder, stem, fields, rows, to_markdown)
    wrote(folder / f"{stem}.csv")
    wrote(folder / f"{stem}.md")


def main():
    parser = benchmark_parser(__doc__)
    parser.add_argument("--study", choices=("dwd", "multinomial", "batch-size"), default="dwd",
                        help="which simulation (default: the DWD cells)")
    parser.add_argument("--sizes", type=int, nargs="+", default=(2000, 20000),
                        help="n of the cells to run (default: 2000 20000)")
    parser.add_argument("--reps", type=int, default=None,
                        help="replications per cell (default 1000, 100 with --quick)")
    parser.add_argument("--n-jobs", type=int, default=1, help="joblib processes")
    parser.add_argument("--private-only", action="store_true",
                        help="run the private (epsilon in {1, 4}) cells only")
    parser.add_argument("--second-order", action="store_true",
                        help="the stream cells (p = 5, n = 2000 with --quick), each with and "
                             "without shift_correction='second-order'")
    parser.add_argument("--private-stream", action="store_true",
                        help="run the private 20-batch stream cells only")
    parser.add_argument("--features", type=int, nargs="*", default=None,
                        help="run the cells of these p only (default: all)")
    parser.add_argument("--no-bootstrap", action="store_true",
                        help="skip the private cells' parametric bootstrap (its columns '–')")
    parser.add_argument("--every-batch", action="store_true",
                        help="only the private stream's coverage after several of its "
                             "batches (first n/2 schedule, 3 cells, 300 reps by default)")
    parser.add_argument("--curvature-noise", action="store_true",
                        help="only the table of summed per-batch curvature noise against "
                             "the stream's curvature (private streams)")
    parser.add_argument("--curvature-plans", action="store_true",
                        help="only the table of the later batches' accumulated curvature "
                             "noise under continual-counting and deferred release plans")
    parser.add_argument("--epsilons", type=float, nargs="*", default=None,
                        help="run the private cells of these epsilon only (default: all)")
    parser.add_argument("--tag", default="",
                        help="appended to the result files' names (e.g. a revision's name)")
    parser.add_argument("--per-parameter", action="store_true",
                        help="also write each parameter's coverage with its Monte Carlo "
                             "interval, bias and SE / SD (*_per_parameter.csv / .md)")
    parser.add_argument("--classes", nargs="*", default=None, choices=("balanced", "4:1"),
                        help="run the cells of these class ratios only (default: both)")
    parser.add_argument("--q", type=float, nargs="*", default=None,
                        help="run the cells of these q only (default: all)")
    parser.add_argument("--modes", nargs="*", default=None,
                        help="run the cells of these modes only (e.g. stream-2nd; default: all)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the first data set's seed (default 0: seeds first-seed to "
                             "first-seed + reps - 1; fresh data sets beyond earlier runs')")
    parser.add_argument("--save-raw", action="store_true",
                        help="also write every cell's intervals and point estimates "
                             "(*_raw.npz, to pool runs over disjoint seeds)")
    add_steps_argument(parser)
    args = parser.parse_args()
    plan = apply_steps(args)
    reps = args.reps or (100 if args.quick else 1000)
    folder = output_dir(args.output_dir)
    if args.every_batch:
        lines = [every_batch_coverage(q, ratio, eps, args.reps or 300)
                 for q, ratio, eps in ((1.0, 1.0, 4.0), (1.0, 1.0, 1.0), (4.0, 4.0, 4.0))]
        target = folder / "inference_private_stream_every_batch.md"
        target.write_text(markdown_table(
            ["q", "classes", "ε", "reps"] + [f"after batch {k}" for k in CHECKED_BATCHES],
            lines))
        return wrote(target)
    if args.curvature_plans:
        target = folder / "inference_private_stream_curvature_plans.md"
        target.write_text(curvature_plan_markdown(*curvature_plan_rows()))
        return wrote(target)
    if args.curvature_noise:
        (folder / "inference_private_stream_curvature.md").write_text(
            curvature_noise_markdown(curvature_noise_rows()))
        return wrote(folder / "inference_private_stream_curvature.md")
    if args.study != "dwd":
        return run_study(args.study, args, reps, folder)
    stem = "inference_quick" if args.quick else "inference"
    if args.private_only:
        stem += "_private"
    if args.second_order:
        stem += "_second_order"
    if args.private_stream:
        stem = "inference_private_stream" + ("_quick" if args.quick else "")
    rows = []
    if args.features:
        stem += "_p" + "_".join(map(str, args.features))
    if tuple(args.sizes) != (2000, 20000):
        stem += "_n" + "_".join(map(str, args.sizes))
    chosen = [c for c in (private_stream_cells(args.quick) if args.private_stream
                          else cells(args.quick, args.private_only, args.second_order,
                                     tuple(args.sizes)))
              if (not args.features or c[1] in args.features) and c[0] in args.sizes
              and (not args.modes or c[4] in args.modes)
              and (not args.epsilons or c[5] in args.epsilons)
              and (not args.q or c[2] in args.q)
              and (not args.classes or ("balanced" if c[3] == 1 else "4:1") in args.classes)]
    parameters = [] if args.per_parameter else None
    if args.q:
        stem += "_q" + "_".join(f"{q:g}" for q in args.q)
    if args.classes:
        stem += "_" + "_".join(c.replace(":", "to") for c in args.classes)
    if args.reps and args.reps != 1000:
        stem += f"_{args.reps}"
    if args.first_seed:
        stem += f"_seed{args.first_seed}"
    stem += "".join(f"_{t}" for t in (plan, args.tag) if t)
    raw = {"first_seed": np.array(args.first_seed)} if args.save_raw else None
    for n, p, q, ratio, mode, epsilon in chosen:
        row = run_cell(n, p, q, ratio, mode, epsilon, reps, args.n_jobs,
                       bootstrap=not args.no_bootstrap, parameters=parameters,
                       first_seed=args.first_seed, raw=raw)
        if raw is not None:
            np.savez_compressed(folder / f"{stem}_raw.npz", **raw)
        rows.append(row)
        print(" ".join(f"{k}={row[k]:.4g}" if isinstance(row[k], float) else f"{k}={row[k]}"
                       for k in FIELDS), flush=True)
        with open(folder / f"{stem}.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)
        if parameters is not None:
            write_rows(folder, f"{stem}_per_parameter", PER_PARAMETER_FIELDS, parameters,
                       per_parameter_markdown)
    (folder / f"{stem}.md").write_text(markdown(rows, footer=not args.private_stream))
    wrote(folder / f"{stem}.csv")
    wrote(folder / f"{stem}.md")


if __name__ == "__main__":
    main()
