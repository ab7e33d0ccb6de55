"""A quasi-Newton (L-BFGS) phase of the federated Newton solver, for wide
rows and one-vs-rest models.

When the curvature matrix costs many gradient rounds (``O(n p²)`` against
``O(n p)``: at n = 2e4, p = 2000 one matrix is ~70 gradient rounds), or
when many one-vs-rest models would wait for each other's Newton steps, the
offline solve of :class:`~skfedpriv.linear_model._newton.NewtonSolver`
first runs L-BFGS (Nocedal & Wright 2006, Algorithm 7.5; the direction in
the compact form of Byrd, Nocedal & Schnabel 1994) on gradient rounds
only: each iteration is one summary request, the loss and gradient at the
trial point (``p + 2`` numbers per site and model). All one-vs-rest models
move in lockstep, each with its own memory of pairs ``(s, y)``.

A model leaves the phase once the L-BFGS model's own decrement
``½ gᵀ H̃ g`` (``H̃`` the L-BFGS inverse curvature) is within
``_HANDOVER tol |F|`` (``_HANDOVER_CHEAP |F|`` where matrices are cheap):
an estimate only, so the Newton
solver then forms the curvature matrix where the model stands, and its
stopping rule (half the Newton decrement on that matrix, see
:mod:`~skfedpriv.linear_model._newton`) decides; on wide non-separable rows
that matrix is the one at the returned point (the renewable state), formed
once. A model that makes no progress, or runs out of the phase's
iterations, is handed over as well (the Newton steps continue from there).

The early iterations may run on float32 rows (sites that take the hint
:meth:`~skfedpriv.linear_model._dwd_sites.DWDSites.reduced_precision`:
large pooled rows in process, whose passes are bound by memory traffic):
until a model's L-BFGS decrement is within ``_REDUCED_UNTIL |F|`` (or its
hand-over level, if larger), or a model makes no progress on them, or the
iterations run out; then the loss and gradient are asked again on the rows
as given at the point reached, and every later request (the rest of the
phase, the curvature matrix, the stopping test) reads them. The float32
rows only steer the early iterations: the phase continues from the point
they reached on the true objective, every hand-over is decided there, so
the returned point and its test are those of the rows as given.
"""

import numpy as np

__all__ = ["LBFGSPhase"]

_MEMORY = 20
_ARMIJO_SLOPE = 1e-4
# halvings after the full step and the interpolated one failed
_HALVINGS = 30
# the estimated gap (the L-BFGS decrement, from gradients only: objective
# differences are rounding at this level) a model must reach,
# as a fraction of tol, before the curvature matrix is formed to check it;
# where matrices are cheap (few parameters: the phase runs for many
# one-vs-rest models) the relative gap 1e-4, from which Newton steps on
# matrices finish (digits: 59-91 rounds instead of 138-227, two matrices
# per model instead of one; 1e-6: 65-112 rounds, 1e-3: 95-151)
_HANDOVER = 1e-2
_HANDOVER_CHEAP = 1e-4
# the most L-BFGS iterations before the Newton steps take over. No earlier
# hand-over on a slow rate: at n/p = 10 to 20 (p = 300 to 2000) L-BFGS needs
# 50 to 125 rounds, and the Newton steps from there still formed 5 to 14
# matrices (each ~p / 30 gradient rounds) where L-BFGS forms one
_MAX_ITER = 200
# the relative L-BFGS decrement down to which the passes may read float32
# rows (the sites score a trial point from the last one plus the move, so
# line searches compare objectives to the move's precision). On 2e4 rows of
# p = 500 and 2000, q in {0.5, 1, 4}, 1e-12 leaves 6 (p = 500) and 18-20
# (p = 2000) float64 passes in a fit (1e-10: 9-10 and 28-38), with the
# iterations of 1e-10 within 2 (p = 500: the same) and 2-7 % less time;
# 1e-13 took one more iteration at p = 500; 1e-6 left two thirds of the
# iterations on the rows as given
_REDUCED_UNTIL = 1e-12
# a decrease of at most this fraction of |F| is no progress (rounding)
_STUCK = 4 * np.finfo(float).eps


def _bordered(inner, row, column):
    """The stack of ``(m+1) x (m+1)`` matrices with ``inner`` (``m x m``) at
    the top left, ``row`` (``1 x (m+1)``) as the last row and ``column``
    (``(m+1) x 1``) as the last column."""
    n_models, m = inner.shape[0], inner.shape[1] + 1
    out = np.empty((n_models, m, m))
    out[:, :-1, :-1] = inner
    out[:, -1:, :] = row
    out[:, :, -1:] = column
    return out


def _bordered_inverse(inverse, sy):
    """``R⁻¹`` after a new pair: ``R`` the upper triangle of ``sy`` (``S Yᵀ``,
    the new pair last, already bordered) with a unit diagonal where a pair
    was left out (zero), ``inverse`` that of ``R`` before the pair. One
    column of back substitution per model:
    ``[[R, c], [0, d]]⁻¹ = [[R⁻¹, -R⁻¹ c / d], [0, 1 / d]]``."""
    n_models, m = inverse.shape[0], inverse.shape[1]
    last = sy[:, m, m]
    d = np.where(last > 0, last, 1.0)
    out = np.zeros((n_models, m + 1, m + 1))
    out[:, :m, :m] = inverse
    out[:, :m, m] = -(inverse @ sy[:, :m, m:])[:, :, 0] / d[:, None]
    out[:, m, m] = 1.0 / d
    return out


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
    cheap_matrices : bool
        Hand over at the relative gap ``_HANDOVER_CHEAP`` (the Newton steps
        on matrices finish) instead of within ``_HANDOVER tol``.
    """

    def __init__(self, solver, start=None, start_grad=None, max_iter=_MAX_ITER,
                 cheap_matrices=False):
        self.solver = solver
        self.cheap_matrices = cheap_matrices
        self.max_iter = min(max_iter, _MAX_ITER)
        self.running = solver.active.copy()
        # per model, the pairs kept as rows, oldest first, zero where a model
        # left one out: S and Y of shape (K, m, p1), and their products
        # S Yᵀ, Y Yᵀ of shape (K, m, m)
        p1, n_models = solver.Theta.shape
        self.S = self.Y = np.zeros((n_models, 0, p1))
        self.sy = self.yy = np.zeros((n_models, 0, 0))
        # R⁻¹ of the direction's compact form (see direction), kept as the pairs come
        self.r_inverse = np.zeros((n_models, 0, 0))
        # per model, sᵀy / yᵀy of the newest pair kept and the pairs since
        # (the window holds it while fewer than its length)
        self.gamma = np.ones(n_models)
        self.gamma_age = np.full(n_models, np.iinfo(np.int64).max // 2)
        self.n_iter = 0
        hint = getattr(solver.sites, "reduced_precision", None)
        self.reduced = hint is not None and bool(hint(True))
        if start is not None:
            self.remember(solver.Theta - start, solver.grad - start_grad)

    def remember(self, s, y):
        """Keep the pair ``(s, y)`` for the models where ``sᵀy > 0`` (the
        curvature condition; for the others the pair is zero, which leaves
        their ``H̃`` as it was)."""
        sy = (s * y).sum(axis=0)
        keep = sy > 1e-12 * np.sqrt((s * s).sum(axis=0) * (y * y).sum(axis=0))
        s_new, y_new = (s * keep).T[:, None], (y * keep).T[:, None]  # (K, 1, p1)
        S = np.concatenate([self.S, s_new], axis=1)
        Y = np.concatenate([self.Y, y_new], axis=1)
        # only the new pair's row and column of S Yᵀ and Y Yᵀ are formed
        # (2 m p1 numbers a model, not m² p1)
        y_column = y_new.transpose(0, 2, 1)
        self.sy = _bordered(self.sy, s_new @ Y.transpose(0, 2, 1), S @ y_column)
        column = Y @ y_column
        self.yy = _bordered(self.yy, column.transpose(0, 2, 1), column)
        self.r_inverse = _bordered_inverse(self.r_inverse, self.sy)
        newest_sy, newest_yy = self.sy[:, -1, -1], self.yy[:, -1, -1]
        kept = newest_sy > 0
        self.gamma = np.where(kept, newest_sy / np.where(kept, newest_yy, 1.0), self.gamma)
        self.gamma_age = np.where(kept, 0, self.gamma_age + 1)
        self.S, self.Y = S[:, -_MEMORY:], Y[:, -_MEMORY:]
        self.sy, self.yy = self.sy[:, -_MEMORY:, -_MEMORY:], self.yy[:, -_MEMORY:, -_MEMORY:]
        # the inverse of an upper triangle's trailing block is the trailing
        # block of its inverse
        self.r_inverse = self.r_inverse[:, -_MEMORY:, -_MEMORY:]

    def direction(self, grad):
        """``-H̃ g`` per model, ``H̃`` the L-BFGS inverse curvature of the
        pairs kept, from ``H̃₀ = γ I`` with ``γ = sᵀy / yᵀy`` of the newest
        pair a model kept (``1 / scale`` before any), in the compact form
        (Byrd, Nocedal & Schnabel 1994, eq. 3.1; Nocedal & Wright eq. 7.24's
        inverse): with ``a = Sᵀg``, ``b = γ Yᵀg``, ``R`` the upper triangle
        of ``SᵀY`` and ``D`` its diagonal,

        ``H̃ g = γ g + S R⁻ᵀ((D + γ YᵀY) R⁻¹ a - b) - γ Y R⁻¹ a``,

        every model's small products as one stack, ``R⁻¹`` kept as the pairs
        come (:func:`_bordered_inverse`: no triangular solve per direction;
        no loop over the pairs: the same vector as the two-loop recursion)."""
        S, Y, sy, yy = self.S, self.Y, self.sy, self.yy
        if S.shape[1] == 0:
            return -grad / self.solver.scale
        diagonal = sy.diagonal(axis1=1, axis2=2)
        # γ of the newest pair kept in the window (remember), 1 / scale if none
        gamma = np.where(self.gamma_age < S.shape[1], self.gamma, 1.0 / self.solver.scale)
        gamma = gamma[:, None, None]
        # a pair left out (zero) has a unit diagonal in R: its components vanish
        r_inverse = self.r_inverse
        g = grad.T[:, :, None]  # (K, p1, 1)
        Rinv_a = r_inverse @ (S @ g)
        inner = diagonal[..., None] * Rinv_a + gamma * (yy @ Rinv_a - Y @ g)
        Hg = (gamma * (g - Y.transpose(0, 2, 1) @ Rinv_a)
              + S.transpose(0, 2, 1) @ (r_inverse.transpose(0, 2, 1) @ inner))
        return -Hg[:, :, 0].T

    def iterate(self):
        """One L-BFGS iteration of the running models (:meth:`step`). Hands
        over the models within the estimated gap; False once none runs."""
        solver = self.solver
        running = self.running & solver.active
        direction, decrement = self.decrement(running)
        last = self.n_iter >= self.max_iter
        level = _HANDOVER_CHEAP if self.cheap_matrices else _HANDOVER * solver.tol
        # every hand-over is decided on the rows as given
        reduced_until = max(level, _REDUCED_UNTIL) * solver.stream_weight * np.abs(solver.value)
        if self.reduced and (last or np.any((decrement <= reduced_until)[running])):
            self.full_precision()
            direction, decrement = self.decrement(running)
        target = level * solver.stream_weight * np.abs(solver.value)
        done = running & (decrement <= target)
        self.hand_over(done | (running & last))
        running = self.running & solver.active
        if not running.any():
            self.full_precision()
            return False
        self.n_iter += 1
        direction *= np.where(running, 1.0, 0.0)
        Theta_new, value_new, moved, grad_new = self.step(direction, running)
        self.remember(Theta_new - solver.Theta, np.where(moved, grad_new - solver.grad, 0.0))
        decrease = solver.value - value_new
        stuck = running & ~(moved & (decrease > _STUCK * np.abs(solver.value)))
        solver.Theta, solver.value = Theta_new, value_new
        solver.grad = np.where(moved, grad_new, solver.grad)
        solver.history.append(solver.value.copy())
        if self.reduced and stuck.any():
            self.full_precision()  # no progress on float32 rows: try the rows as given
        else:
            self.hand_over(stuck)
        return True

    def decrement(self, running):
        """The L-BFGS direction of the running models (zero for the others)
        and its decrement ``½ gᵀ H̃ g``."""
        grad = self.solver.grad
        direction = np.where(running, 1.0, 0.0) * self.direction(grad)
        return direction, -0.5 * (grad * direction).sum(axis=0)

    def full_precision(self):
        """Leave the float32 rows (if the phase reads them): the objective
        and gradient asked again at the point reached, on the rows as given
        (one round); the pairs kept are those of the float32 rows."""
        if not self.reduced:
            return
        self.release()
        solver = self.solver
        solver.value, solver.grad, _ = solver.objective_and_gradient(solver.Theta, False)
        solver.history[-1] = solver.value.copy()

    def release(self):
        """Switch the sites back to the rows as given (no round): also when
        the solve ends by an exception, so that sites passed in from outside
        are left as they came."""
        if self.reduced:
            self.reduced = False
            self.solver.sites.reduced_precision(False)

    def step(self, direction, running):
        """Armijo steps along ``direction``: the full step's loss and gradient
        in one round; a model whose full step fails tries, in one more such
        round, the minimizer of the quadratic through its value and slope at
        0 and its value at 1 (within [0.1, 0.5]; Nocedal & Wright eq. 3.57);
        one still failing backtracks by halvings (one round) and asks its
        gradient (one more). Returns the new parameters, objective, the
        models moved and the gradient there."""
        solver = self.solver
        Theta, value, grad = solver.Theta, solver.value, solver.grad
        slope = (grad * direction).sum(axis=0)
        trying = running & (slope < 0)
        step = np.where(trying, 1.0, 0.0)
        Theta_new, value_new, moved = Theta, value.copy(), np.zeros_like(running)
        grad_new = grad
        for _ in range(2):
            trial = Theta + step * direction
            trial_value, trial_grad, _ = solver.objective_and_gradient(trial, False)
            passed = trying & (trial_value <= value + _ARMIJO_SLOPE * step * slope)
            Theta_new = np.where(passed, trial, Theta_new)
            value_new = np.where(passed, trial_value, value_new)
            grad_new = np.where(passed, trial_grad, grad_new)
            moved |= passed
            trying &= ~passed
            if not trying.any():
                return Theta_new, value_new, moved, grad_new
            with np.errstate(divide="ignore", invalid="ignore"):
                quadratic = -slope / (2.0 * (trial_value - value - slope))
            step = np.where(trying, np.clip(np.nan_to_num(quadratic, nan=0.5), 0.1, 0.5),
                            np.where(moved, step, 0.0))
        searched, searched_value, searched_moved = solver.line_search(
            direction, trying, value, grad, _HALVINGS, full_step_known_bad=True)
        Theta_new = np.where(searched_moved, searched, Theta_new)
        value_new = np.where(searched_moved, searched_value, value_new)
        if searched_moved.any():
            grad_new = np.where(searched_moved,
                                solver.objective_and_gradient(Theta_new, False)[1], grad_new)
        return Theta_new, value_new, moved | searched_moved, grad_new

    def hand_over(self, models):
        """The Newton steps take ``models`` over: their curvature matrix is
        formed where they stand (the exact stopping test) and their next
        Newton step is an undamped one (the local phase)."""
        models = models & self.running
        self.running &= ~models
        self.solver.stale |= models
        self.solver.full_step |= models
