"""A quasi-Newton (L-BFGS) phase of the federated Newton solver, for wide rows.

When the curvature matrix costs many gradient rounds (``O(n p²)`` against
``O(n p)``: at n = 2e4, p = 2000 one matrix is ~70 gradient rounds), the
offline solve of :class:`~skfedpriv.linear_model._newton.NewtonSolver`
first runs L-BFGS (Nocedal & Wright 2006, Algorithm 7.4, the two-loop
recursion, and 7.5) on gradient rounds only: each iteration is one summary
request, the loss and gradient at the trial point (``p + 2`` numbers per
site and model). All one-vs-rest models move in lockstep, each with its own
memory of pairs ``(s, y)``.

A model leaves the phase once the L-BFGS model's own decrement
``½ gᵀ H̃ g`` (``H̃`` the L-BFGS inverse curvature) and its last decrease
are both within ``tol |F| / safety``: an estimate only, so the Newton
solver then forms the curvature matrix where the model stands, and its
stopping rule (half the Newton decrement on that matrix, see
:mod:`~skfedpriv.linear_model._newton`) decides; on wide non-separable rows
that matrix is the one at the returned point (the renewable state), formed
once. A model that makes no progress, or runs out of the phase's
iterations, is handed over as well (the Newton steps continue from there).
"""

import numpy as np

__all__ = ["LBFGSPhase"]

_MEMORY = 20
# the estimated gap (L-BFGS decrement, last decrease) a model must reach,
# as a fraction of tol, before the curvature matrix is formed to check it
_HANDOVER = 1e-2
# the most L-BFGS iterations before the Newton steps take over. No earlier
# hand-over on a slow rate: at n/p = 10 to 20 (p = 300 to 2000) L-BFGS needs
# 50 to 125 rounds, and the Newton steps from there still formed 5 to 14
# matrices (each ~p / 30 gradient rounds) where L-BFGS forms one
_MAX_ITER = 200


class LBFGSPhase:
    """L-BFGS memories of every model, and the iteration on a solver.

    Parameters
    ----------
    solver : NewtonSolver
        Set up, at the point where the phase starts (with the gradient).
    start : ndarray of shape (p1, K) or None
        The previous point and ``start_grad`` its gradient, for a first
        pair (the grid step of a flat start).
    start_grad : ndarray of shape (p1, K) or None
    max_iter : int
        The most L-BFGS iterations (capped at ``_MAX_ITER``).
    """

    def __init__(self, solver, start=None, start_grad=None, max_iter=_MAX_ITER):
        self.solver = solver
        self.max_iter = min(max_iter, _MAX_ITER)
        self.running = solver.active.copy()
        self.pairs = []  # (s, y, rho) of shapes (p1, K), (p1, K), (K,)
        self.n_iter = 0
        if start is not None:
            self.remember(solver.Theta - start, solver.grad - start_grad)

    def remember(self, s, y):
        """Keep the pair ``(s, y)`` for the models where ``sᵀy > 0`` (the
        curvature condition; the others get ``rho = 0``: the pair does not
        enter their recursion)."""
        sy = (s * y).sum(axis=0)
        keep = sy > 1e-12 * np.sqrt((s * s).sum(axis=0) * (y * y).sum(axis=0))
        rho = np.where(keep, 1.0 / np.where(keep, sy, 1.0), 0.0)
        self.pairs.append((s, y, rho))
        del self.pairs[:-_MEMORY]

    def direction(self, grad):
        """``-H̃ g`` per model by the two-loop recursion (Nocedal & Wright,
        Algorithm 7.4), the initial ``H̃₀ = γ I`` with ``γ = sᵀy / yᵀy`` of
        the newest pair the model kept (``1 / scale`` before any)."""
        r = grad.copy()
        coefficients = []
        for s, y, rho in reversed(self.pairs):
            a = rho * (s * r).sum(axis=0)
            r -= a * y
            coefficients.append(a)
        gamma = np.full(grad.shape[1], 1.0 / self.solver.scale)
        found = np.zeros(grad.shape[1], dtype=bool)
        for s, y, rho in reversed(self.pairs):
            new = ~found & (rho > 0)
            gamma[new] = 1.0 / (rho[new] * (y[:, new] * y[:, new]).sum(axis=0))
            found |= new
        r *= gamma
        for (s, y, rho), a in zip(self.pairs, reversed(coefficients)):
            b = rho * (y * r).sum(axis=0)
            r += s * (a - b)
        return -r

    def iterate(self):
        """One L-BFGS iteration of the running models: the full step's loss
        and gradient in one round (Armijo-tested), a backtracking round and
        a gradient round for a model whose full step failed. Hands over the
        models within the estimated gap; False once none runs."""
        solver = self.solver
        running = self.running & solver.active
        direction = np.where(running, 1.0, 0.0) * self.direction(solver.grad)
        decrement = -0.5 * (solver.grad * direction).sum(axis=0)
        target = _HANDOVER * solver.tol * solver.stream_weight * np.abs(solver.value)
        last_decrease = (solver.history[-2] - solver.history[-1] if len(solver.history) > 1
                         else np.full(solver.n_models, np.inf))
        done = running & (decrement <= target) & (last_decrease <= target)
        self.hand_over(done | (running & (self.n_iter >= self.max_iter)))
        running = self.running & solver.active
        if not running.any():
            return False
        self.n_iter += 1
        direction *= np.where(running, 1.0, 0.0)
        Theta_new, value_new, moved, grad_new = solver.full_step_first(
            direction, running, solver.value, solver.grad)
        if grad_new is None:  # some model backtracked: its gradient where it went
            grad_new = solver.objective_and_gradient(Theta_new, False)[1]
        self.remember(Theta_new - solver.Theta, np.where(moved, grad_new - solver.grad, 0.0))
        decrease = solver.value - value_new
        stuck = running & ~(moved & (decrease > 4 * np.finfo(float).eps * np.abs(solver.value)))
        self.hand_over(stuck)
        solver.Theta, solver.value = Theta_new, value_new
        solver.grad = np.where(moved, grad_new, solver.grad)
        solver.history.append(solver.value.copy())
        return True

    def hand_over(self, models):
        """The Newton steps take ``models`` over: their curvature matrix is
        formed where they stand (the exact stopping test) and their next
        Newton step is an undamped one (the local phase)."""
        models = models & self.running
        self.running &= ~models
        self.solver.stale |= models
        self.solver.full_step |= models
