"""Where one offline ``DWDClassifier.fit`` spends its time (issue #23).

:func:`fit_breakdown` runs one fit with timers around the solver's steps
(the functions are wrapped for the fit and restored after it): the L-BFGS
iterations and their passes over the rows, the extra line-search rounds,
the Newton steps after the hand-over (their curvature-vector products),
the curvature matrices formed (``augmented_gram``), the Cholesky factors
(``_factor_psd``) and what the fit spends outside the solver. A *pass* is
one request's read of the rows in this process (the fused loss and
gradient of a step, a line search, a curvature-vector product, a gradient
from known scores); a request answered from what the sites kept costs none.
"""

import collections
import contextlib
import time

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
import skfedpriv.linear_model._dwd_solver as solver_module
import skfedpriv.linear_model._newton as newton_module
import skfedpriv.linear_model._quasi_newton as quasi_module
import skfedpriv.linear_model._renewable as renewable_module

# (owner, attribute, label): passes first (they feed the others' pass deltas)
_PASSES = ("_step_summaries", "site_summary", "site_line_losses", "site_curvature_product")
_STEPS = (
    (quasi_module.LBFGSPhase, "iterate", "L-BFGS iteration"),  # and the hand-over
    (quasi_module.LBFGSPhase, "step", "L-BFGS step"),
    (newton_module.NewtonSolver, "newton_direction", "Newton direction"),
    (newton_module.NewtonSolver, "take_step", "Newton step"),
    (solver_module, "augmented_gram", "matrix"),
    (newton_module, "_factor_psd", "Cholesky"),
    (renewable_module, "solve_batch", "solver"),
)


@contextlib.contextmanager
def _timers(tally):
    """Wrap every pass and step; ``tally[label]`` collects calls, seconds and
    the passes (count, seconds) made inside the call."""
    passes = [0, 0.0]
    wrapped = [(solver_module, name, "pass") for name in _PASSES] + list(_STEPS)
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in wrapped]

    def timed(original, label):
        def spy(*args, **kwargs):
            before, start = list(passes), time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seconds = time.perf_counter() - start
                entry = tally[label]
                entry[0] += 1
                entry[1] += seconds
                if label == "pass":
                    passes[0] += 1
                    passes[1] += seconds
                else:
                    entry[2] += passes[0] - before[0]
                    entry[3] += passes[1] - before[1]
        return spy

    for (owner, name, label), (_, _, original) in zip(wrapped, originals):
        setattr(owner, name, timed(original, label))
    try:
        yield
    finally:
        for owner, name, original in reversed(originals):
            setattr(owner, name, original)


def fit_breakdown(make, X, y, groups):
    """Fit ``make()`` on ``X, y, sample_group=groups`` under the timers.

    Returns
    -------
    row : dict
        ``fit`` seconds; per step label ``(calls, seconds, passes, pass
        seconds)``; ``rounds`` of the fit's first solve.
    """
    tally = collections.defaultdict(lambda: [0, 0.0, 0, 0.0])
    with _timers(tally):
        start = time.perf_counter()
        make().fit(X, y, sample_group=groups)
        fit_seconds = time.perf_counter() - start
    return dict(fit=fit_seconds, **{label: tuple(entry) for label, entry in tally.items()})


def breakdown_line(name, row):
    """One markdown table row of :func:`fit_breakdown`'s ``row``."""
    def get(label):
        return row.get(label, (0, 0.0, 0, 0.0))

    # the phase's last call hands the models over without a step
    _, lbfgs_s, lbfgs_passes, lbfgs_pass_s = get("L-BFGS iteration")
    iterations, _, step_passes, _ = get("L-BFGS step")
    directions, direction_s, _, _ = get("Newton direction")
    newton_steps, take_s, _, _ = get("Newton step")
    matrices, matrix_s = get("matrix")[:2]
    factors, factor_s = get("Cholesky")[:2]
    passes, pass_s = get("pass")[:2]
    solver_s = get("solver")[1]
    per_iteration = lbfgs_passes / iterations if iterations else float("nan")
    overhead = (lbfgs_s - lbfgs_pass_s) / iterations if iterations else float("nan")
    return (f"| {name} | {row['fit']:.3f} | {solver_s:.3f} | {passes} ({pass_s:.3f} s) | "
            f"{iterations} | {per_iteration:.2f} | {lbfgs_s:.3f} | {1e3 * overhead:.2f} | "
            f"{step_passes - iterations} | {directions} / {newton_steps} | "
            f"{direction_s + take_s - matrix_s - factor_s:.3f} | {matrices} ({matrix_s:.3f} s) | "
            f"{factors} ({factor_s:.3f} s) | {row['fit'] - solver_s:.3f} |")


BREAKDOWN_HEADER = [
    ("| fit | fit s | solver s | passes over the rows (their s) | L-BFGS iterations | "
     "passes per iteration | L-BFGS s | Python per iteration ms | extra line-search "
     "rounds | Newton directions / steps after the hand-over | Newton s (without "
     "matrices and factors) | matrices formed (s) | Cholesky factors (s) | outside the "
     "solver s |"),
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
]
