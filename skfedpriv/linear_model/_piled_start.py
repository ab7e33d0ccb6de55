"""Few rows: the first step's direction from piled margins (issue #23).

Offline from ``θ = 0`` genDWD's curvature vanishes (every margin is at 0,
left of the kink), so the solver's first step is a grid search along a
direction. The gradient's (the weighted mean difference ``X̄ᵀWy``) leaves
some rows left of the kink at p >> n, where the next Newton direction is
unbounded along what only those rows see: damped and cut steps follow
(n = 400, p = 2 000: 10 iterations, the grid's and nine Newton steps, two
of them cut).

With fewer rows than features the rows are separable and at the optimum
every margin lies right of the kink. Linearize the stationarity
``α W β = Σ w_i y_i x_i (-V'(u_i))`` around margins all equal to ``u*``
("piled", the high-dimensional limit of DWD's margins):
``-V'(u) ≈ v - V''·(u - u*)`` with ``v = -V'(u*)``, ``V'' = V''(u*)``, and
it is the weighted ridge regression of the targets ``y (v / V'' + u*)`` on
``x̄`` with the ridge ``λ = α W / V''(u*)`` on the coefficients (the
intercept's equation ``Σ w_i y_i (-V'(u_i)) = 0`` likewise). ``u*`` is the
margin the piled solution itself gives: with every margin ``u*``,
``β = v Xᵀ W y / (α W)`` and its weighted mean margin (the intercept left
out of this estimate) is ``v S / (α W²)``,
``S = yᵀ W X Xᵀ W y``, so ``u*`` solves ``u α W² / S = -V'(u)`` (one root:
the left side increases, the right does not). The ridge solve is one
Woodbury factor of the ``m x m`` system
(:class:`~._factored_curvature.WoodburyFactor`, in float32 from
``SINGLE_FROM`` rows: a direction the grid scales) on the rows' Gram matrix
the factored path keeps anyway. The grid then scales the direction: the
optimum reached is the solver's, only the path to it changes (n = 400,
p = 2 000: 5 iterations instead of 10; benchmarks/README.md, "Few rows: a
start from piled margins").
"""

from itertools import pairwise

import numpy as np

from ._factored_curvature import RowCurvature

__all__ = ["piled_direction"]

# u* is bracketed in [_U_LOW, _U_HIGH] and found by Newton's method on
# log(u) (exact in one step where -V' is a power of u, as genDWD's on either
# side of its kink), bisecting where a step leaves the bracket
_U_LOW, _U_HIGH = 1e-8, 1e12
_ROOT_STEPS = 60
_ROOT_TOL = 1e-13  # |log(u slope / -V'(u))|


def _piled_margin(loss, slope):
    """``u*`` solving ``u * slope = -V'(u)`` for each model's ``slope > 0``:
    the root in ``t = log u`` of the increasing ``t + log slope - log(-V'(u))``."""
    low = np.full(len(slope), np.log(_U_LOW))
    high = np.full(len(slope), np.log(_U_HIGH))
    t = np.zeros(len(slope))
    log_slope = np.log(slope)
    for _ in range(_ROOT_STEPS):
        u = np.exp(t)
        pull = -loss.derivative(u)
        with np.errstate(divide="ignore", invalid="ignore"):
            f = t + log_slope - np.log(np.maximum(pull, 0.0))
            if np.all(np.abs(f) <= _ROOT_TOL):
                break
            newton = t - f / (1.0 + u * loss.curvature(u) / pull)
        above = f > 0
        high, low = np.where(above, t, high), np.where(above, low, t)
        inside = np.isfinite(newton) & (newton >= low) & (newton <= high)
        t = np.where(inside, newton, 0.5 * (low + high))
    return np.exp(t)


def piled_direction(sites, loss, alpha, fit_intercept):
    """The first step's direction ``(p1, K)`` from piled margins (see the
    module doc), on sites that keep their rows (``row_blocks`` and
    ``parts``, in process: the factored path's); None where it does not
    apply (a model without rows of both labels or any curvature at ``u*``),
    so the caller keeps the gradient's."""
    blocks = list(sites.row_blocks())
    Y = np.concatenate([part[1] for part in sites.parts])
    weights = np.concatenate([part[2] for part in sites.parts])
    total = float(weights.sum())
    if total <= 0 or len(blocks) != len(sites.parts):
        return None
    weighted = weights[:, None] * Y
    # S_k = (W y_k)ᵀ X Xᵀ (W y_k), from the rows' Gram matrices the blocks keep
    offsets = np.cumsum([0] + [len(b) for b in blocks])
    rows = [slice(a, b) for a, b in pairwise(offsets)]
    pieces = [weighted[r] for r in rows]
    gram_wy = [sum(block.gram(other) @ piece for other, piece in zip(blocks, pieces))
               for block in blocks]
    S = (np.concatenate(gram_wy) * weighted).sum(axis=0)
    if not np.all(S > 0):
        return None
    u = _piled_margin(loss, alpha * total**2 / S)
    v, curvature = -loss.derivative(u), loss.curvature(u)
    if not np.all(curvature > 0):
        return None
    p1 = blocks[0].X.shape[1] + int(fit_intercept)
    scales = [np.sqrt(np.maximum(weights[r], 0.0)) for r in rows]
    out = np.empty((p1, Y.shape[1]))
    for k in range(Y.shape[1]):
        diag = np.full(p1, alpha * total / curvature[k])
        if fit_intercept:
            diag[0] = 0.0
        targets = weighted[:, k] * (v[k] / curvature[k] + u[k])
        rhs = sum(block.sums(targets[r]) for block, r in zip(blocks, rows))
        system = RowCurvature(blocks, scales, diag, fit_intercept)
        out[:, k] = system.woodbury(single=True).solve(rhs)
    return out
