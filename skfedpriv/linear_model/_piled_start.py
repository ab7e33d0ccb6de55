"""Few rows: the first step's direction from piled margins (issue #23).

Offline from ``θ = 0`` genDWD's curvature vanishes (every margin is at 0,
left of the kink), so the solver's first step is a grid search along a
direction. The gradient's (the weighted mean difference ``X̄ᵀWy``) leaves
some rows left of the kink at p >> n, where the next Newton direction is
unbounded along what only those rows see: damped and cut steps follow
(n = 400, p = 2 000: 10 Newton steps, two of them cut).

With fewer rows than features the rows are separable and at the optimum
every margin lies right of the kink. Linearize the stationarity
``α W β = Σ w_i y_i x_i (-V'(u_i))`` around margins all equal to ``u*``
("piled", the high-dimensional limit of DWD's margins):
``-V'(u) ≈ v - V''·(u - u*)`` with ``v = -V'(u*)``, ``V'' = V''(u*)``, and
it is the weighted ridge regression of the targets ``y (v / V'' + u*)`` on
``x̄`` with the ridge ``λ = α W / V''(u*)`` on the coefficients (the
intercept's equation ``Σ w_i y_i (-V'(u_i)) = 0`` likewise). ``u*`` is the
margin the piled solution itself gives: with every margin ``u*``,
``β = v Xᵀ W y / (α W)`` and its weighted mean margin is ``v S / (α W²)``,
``S = yᵀ W X Xᵀ W y``, so ``u*`` solves ``u α W² / S = -V'(u)`` (one root:
the left side increases, the right does not). The ridge solve is one
Woodbury factor of the ``m x m`` system
(:class:`~._factored_curvature.WoodburyFactor`) on the rows' Gram matrix the
factored path keeps anyway. The grid then scales the direction: the
optimum reached is the solver's, only the path to it changes (n = 400,
p = 2 000: 4-5 Newton steps instead of 10; benchmarks/README.md).
"""

from itertools import pairwise

import numpy as np

from ._factored_curvature import RowCurvature

__all__ = ["piled_direction"]

# bisection steps on log(u) for u* over [_U_LOW, _U_HIGH]: the ridge is a
# heuristic, a relative precision of a few percent is plenty
_BISECTIONS = 40
_U_LOW, _U_HIGH = 1e-8, 1e12


def _piled_margin(loss, slope):
    """``u*`` solving ``u * slope = -V'(u)`` for each model's ``slope > 0``."""
    low = np.full(len(slope), np.log(_U_LOW))
    high = np.full(len(slope), np.log(_U_HIGH))
    for _ in range(_BISECTIONS):
        middle = 0.5 * (low + high)
        u = np.exp(middle)
        above = u * slope > -loss.derivative(u)
        high = np.where(above, middle, high)
        low = np.where(above, low, middle)
    return np.exp(0.5 * (low + high))


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
        out[:, k] = RowCurvature(blocks, scales, diag, fit_intercept).woodbury().solve(rhs)
    return out
