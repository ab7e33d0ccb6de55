"""The federated Newton solver of every smooth margin loss (named steps).

The server's side of the summary protocol: sites send sums over their rows
at parameters the server sends them (the loss sum, the gradient sum, the
curvature sum or its products with a few vectors, losses along a search
direction; :class:`~skfedpriv.linear_model._dwd_sites.DWDSites`), and the
server adds the ridge term and, online, the accumulated curvature of earlier
batches (Guo et al. 2025, eqs. 30-37; Luo & Song 2020's renewable
estimating equation, its logistic twin), and updates. The loss is a loss
object (:mod:`skfedpriv._loss`): genDWD, logistic, any margin loss with a
``value``, ``derivative``, ``curvature`` and ``curvature_bound``.

:class:`NewtonSolver` follows the shape of scikit-learn's
``sklearn/linear_model/_glm/_newton_solver.py``: :meth:`~NewtonSolver.setup`,
:meth:`~NewtonSolver.newton_direction` (the gradient and curvature at the
iterate, the inner conjugate gradients of :meth:`~NewtonSolver.inner_cg`),
:meth:`~NewtonSolver.convergence_test`, :meth:`~NewtonSolver.take_step`
(the line search), :meth:`~NewtonSolver.accept` and
:meth:`~NewtonSolver.finish`; :func:`solve_batch` runs it.

The update: :func:`solve_batch` minimizes, for every class model k,

``F_k(θ) = Σ_i w_i ℓ(y_ik x̄_iᵀθ) + (α W / 2) ‖β‖² + ½ (θ - c_k)ᵀ P_k (θ - c_k)``

with ``W`` the batch weight sum, ``P_k`` the curvature accumulated over
earlier batches and ``c_k`` the previous estimate: the renewable
estimating equation (30), and, with ``P = 0``, the offline objective (5)
times ``W``. Every step is accepted by an Armijo backtracking test, so
``F_k`` never increases (the paper's update (16) with ``H̄`` is not a
majorizer and need not descend). Offline (``refresh_curvature=True``) the
step is an inexact Newton step: conjugate gradients on the smoothed
curvature (eq. 8), through curvature-vector products the sites compute,
unpreconditioned at first. Once a model's last Newton step was taken in
full (the local phase) its CG runs on the loss's own second derivative
``V_q''`` instead (0 left of the kink; at the kink its right limit, an
element of the generalized Hessian): a semismooth Newton step, which
converges superlinearly where the smoothed model, wrong for the rows
within its window around the kink, converges only linearly (on nearly
separable data such as scikit-learn's breast cancer rows, q = 1: 19
Newton steps instead of 55). The smoothed curvature stays the one of
the damped phase (where it is the more cautious model) and of every
matrix: the renewable state, the stopping test and the preconditioner.
The ``O(n p²)`` curvature matrix of a model is formed (and then
preconditions its CG) only when its CG runs out or its steps converge
slowly, on entering the local phase when the model has fewer than
``_LOCAL_MATRIX_PARAMS`` parameters (there the matrix costs a few
products and saves more), and once at the returned point (the renewable
state): on well-conditioned rows with more parameters, only there; a
request for matrices names the one-vs-rest models that need one and do
not have it at their current parameters. Online
(``refresh_curvature=False``, eq. 35) the curvature stays at the starting
point and each step is one triangular solve.

Offline from a flat start, on wide rows (at least ``_QUASI_NEWTON_PARAMS``
parameters per model) or with at least ``_QUASI_NEWTON_MODELS`` one-vs-rest
models, an L-BFGS phase (:mod:`~skfedpriv.linear_model._quasi_newton`) runs
first on gradient rounds only, and hands each model to the Newton steps
once its L-BFGS decrement is well within ``tol``: the curvature matrix is
formed there, and the stopping rule below decides (on wide non-separable
rows the matrix is formed once, at the returned point).

In the damped phase a model whose step was cut to a quarter or less gets
Levenberg-Marquardt damping, ``λ W I`` added to its Newton system (raised
4× per short step, lowered 4× per full one, none in the local phase, and a
damped system never stops a model): rows left of genDWD's kink have no
curvature, so the undamped direction is unbounded along what only those
rows see until one crosses the kink (digits, q = 1: 104 Newton steps, ~50
of them cut to 1/16, without it; 28 with it).

The kink phase: a model whose last two full Newton steps each decreased the
objective by less than a tenth of what they predicted, or whose decrement
stopped shrinking in the local phase, takes semismooth steps on ``V_q''`` (CG on
curvature products, preconditioned by its smoothed matrix) with the best
value among the full, longer and every halved step in one round. Rows that
sit next to the kink at the optimum (a row repeated under both labels at
p >> n: the pair's loss is flat left of the kink) make the smoothed
curvature wrong there, and its steps crawl (issue #23: 300 steps at an
estimated gap of 1e-9; now 30-60 steps to L-BFGS-B's optimum).

Requests per step: online, and offline once a model's last Newton step
was taken in full (the local phase), the full step is asked as one
summary request (its loss and gradient, which the next step needs) and
Armijo-tested by the server, so a step taken in full costs one round;
only a refused one backtracks (all halvings in one more round). In the
damped phase the full step and longer ones are searched in one round,
then the gradient is asked where the search went.

Stopping rule: a model stops at ``θ`` once half its Newton decrement
``½ gᵀH⁻¹g`` (the objective gap of the quadratic model) is at most
``tol |F(θ)|``. Offline the test is exact only with the matrix formed at
``θ``: a step predicted (from the rate of the last two full steps) to
land within ``tol / _SAFETY`` forms the matrix where it
lands, and a CG whose own (lower-bound) decrement falls within ``tol``
has the matrix formed where it is, before the model stops. So the
matrix that stops a model is the returned curvature. A model that matrix
stops is checked by one more product round (offline, sites that answer
products on ``V_q''``): one preconditioned CG iteration on ``V_q''``, a
lower bound of the semismooth decrement, within ``tol`` as well (the
smoothed decrement misses what the smoothing window hides: on issue #23's
conflicting rows it stopped a fit at tol = 1e-8 126x above it). In the kink
phase both decrements are within ``tol`` at the returned point.
"""

import warnings

import numpy as np
from scipy.linalg import LinAlgError
from scipy.linalg.lapack import dpotrf, dpotri, dpotrs
from sklearn.exceptions import ConvergenceWarning

from .._loss import as_loss
from .._losses import penalty_mask
from ._dwd_sites import loss_message
from ._factored_curvature import (
    RowSites,
    model_systems,
    prior_product,
    ridge_matrix,
    shifted,
    stack_curvatures,
)
from ._piled_start import piled_direction
from ._quasi_newton import LBFGSPhase
from ._row_span import reduce_to_row_span

__all__ = ["NewtonSolver", "solve_batch"]

_ARMIJO_SLOPE = 1e-4
_MAX_HALVINGS = 50
_HALVINGS = 0.5 ** np.arange(1, _MAX_HALVINGS + 1)
_NEWTON_HALVINGS = 6
# longer steps a Newton step after a damped one (or the grid) also tries, in
# the same round as the full step: from the small-margin side of the optimum
# (curvature up to (q+1)²/q next to the kink, decaying like u^-(q+2)) Newton
# steps fall short, most for large q (q = 4 at n = 2e4, p = 500: 8 Newton
# steps instead of 12)
_EXPANSIONS = (2.0, 4.0, 8.0)
# conjugate-gradient iterations per Newton step; a preconditioned step that
# needs more than _STALE of them marks the preconditioner stale (reformed
# next step), as does, without one, a CG that runs out or a step that cuts
# the gradient's max-norm by less than _SLOW
_MAX_CG = 12
_STALE = 5
_LOOSE = 0.5
# a CG direction whose curvature per squared length falls below this times
# the first direction's ends that model's CG (a numerically singular system)
_SINGULAR = 1e-12
_SLOW = 0.5
# a Newton step whose landing point is predicted within tol / _SAFETY gets the
# exact check there (forming the O(n p²) matrix)
_SAFETY = 10.0
# a model of fewer parameters than this forms its curvature matrix (and takes a
# direct step on it) on entering the local phase, where its unpreconditioned CG
# would need 8-10 products over the last steps: the matrix costs about 3-4
# products at p + 1 = 51 (syrk against two memory-bound reads of the rows a
# product; the ratio grows with p), and the CG it preconditions then needs 1-2
# (n = 1e5, p = 50, q <= 1: 17 rounds instead of 21-23)
_LOCAL_MATRIX_PARAMS = 100
# the first Levenberg-Marquardt damping of a model (per unit weight)
_DAMPING_START = 1e-3
# the kink phase: a model whose last _KINK_POOR full Newton steps each
# decreased the objective by less than _KINK_DECREASE of the half decrement
# they predicted, or, from within _KINK_LOCAL of |F|, cut its decrement by
# less than the factor _KINK_RATE (the smoothed curvature wrong for rows that
# sit next to genDWD's kink at the optimum) takes semismooth steps: CG on
# V_q'' products to _KINK_RTOL
# (its decrement then within about _KINK_RTOL² of the exact one's), at most
# _KINK_CG iterations, preconditioned by its smoothed matrix. A model the
# smoothed matrix stops is checked by _CONFIRM_CG iterations of the same CG
# (a lower bound of the semismooth decrement)
_KINK_DECREASE = 0.1
_KINK_POOR = 2
_KINK_LOCAL = 1e-6
_KINK_RATE = 0.75
_KINK_RTOL = 1e-3
_KINK_CG = 12
_CONFIRM_CG = 1
# offline from a flat start, with at least this many parameters per model and
# as many rows (row weight), L-BFGS rounds first (:mod:`._quasi_newton`): there one
# curvature matrix costs more gradient rounds than L-BFGS needs; so with at
# least _QUASI_NEWTON_MODELS one-vs-rest models, which L-BFGS moves in one
# round each iteration where each Newton round waits for the slowest model's
# CG (bundled datasets, 3 and 10 classes: 40-80 % fewer rounds, 3-4x fewer
# matrices on digits). The point returned is within tol of the optimum as
# on the Newton steps' path, not the same point: parameters agree to about
# the square root of tol (a binary fit and a class of a 3-class fit)
_QUASI_NEWTON_PARAMS = 256
# CG preconditioners of fewer parameters are applied as explicit inverses
_INVERSE_PARAMS = _QUASI_NEWTON_PARAMS
_QUASI_NEWTON_MODELS = 3
# few rows: a Newton system is factored in float32 while the model's last
# half decrement exceeds this of |F| (n = 400, p = 2 000: the first three of
# four steps; the direction's relative error, about cond(M) times float32's
# epsilon, leaves its square times the gap after a step)
_SINGLE_ABOVE = 1e-5
# the first step's grid of step lengths, and up to how many numbers per
# grid point its objectives are formed in one array (without a prior: the
# few-rows fit's coordinates)
_FIRST_STEPS = 2.0 ** np.arange(-24, 25, 2)
_GRID_AT_ONCE = 1 << 14

class _SummaryOnlySites:
    """The requests :func:`solve_batch` makes, for a sites object that only
    answers ``summaries`` (e.g. a transport speaking an older protocol):
    line losses one summary round per step, curvature products from the
    full curvature matrix (the same numbers, more rounds or bytes)."""

    batched_line_search = False
    # its products come from the smoothed matrix: the local phase's CG runs
    # on the smoothed curvature (the same optimum, another path)
    exact_products = False
    per_model_curvature = False  # an older transport: its curvature is every model's

    def __init__(self, sites):
        self._sites = sites
        self.weight_sum = sites.weight_sum

    def __getattr__(self, name):
        return getattr(self._sites, name)

    @property
    def rounds(self):
        return getattr(self._sites, "n_requests", 0)

    floats_sent = 0

    def line_losses(self, Theta, S, steps, q):
        return np.array([self._sites.summaries(Theta + t * S, q, False)[0] for t in steps])

    def curvature_product(self, Theta, V, q, exact=None):
        if exact is not None and np.any(exact):
            raise ValueError("these sites answer only summaries: no exact products.")
        curvature = self._sites.summaries(Theta, q, True)[2]
        return np.einsum("kij,jk->ik", curvature, V)

    def advance(self, Theta, S, steps):
        return Theta + steps * S


def _factor_psd(matrix, single=False):
    """Cholesky factor of a symmetric PSD matrix, with a little jitter if
    needed: ``(c, lower)`` as ``scipy.linalg.cho_factor`` returns it (LAPACK
    potrf directly, without its input checks). A factored curvature
    (:mod:`._factored_curvature`) gives its Woodbury factor (``single``: in
    float32 where it has enough rows)."""
    if hasattr(matrix, "woodbury"):
        return matrix.woodbury(single)
    scale = max(np.trace(matrix) / matrix.shape[0], 1e-12)
    for jitter in (0.0, 1e-12, 1e-9, 1e-6, 1e-3):
        shifted = matrix + jitter * scale * np.eye(matrix.shape[0]) if jitter else matrix
        factor, info = dpotrf(shifted, lower=0, clean=0)
        if info == 0:
            return factor, False
        if info < 0:  # pragma: no cover - a bad argument, not bad data
            raise LinAlgError(f"potrf failed with info={info}")
    raise LinAlgError("curvature matrix is not positive definite")  # pragma: no cover


def _cho_solve(factor, rhs):
    """``scipy.linalg.cho_solve`` for one vector, without its input checks
    (LAPACK potrs on the factor of :func:`_factor_psd`)."""
    if hasattr(factor, "solve"):
        return factor.solve(rhs)
    solution, info = dpotrs(factor[0], rhs, lower=factor[1])
    if info != 0:  # pragma: no cover - a bad argument, not bad data
        raise LinAlgError(f"potrs failed with info={info}")
    return solution


def _solve_factored(factors, rhs):
    out = np.empty_like(rhs)
    for k, factor in enumerate(factors):
        out[:, k] = _cho_solve(factor, rhs[:, k])
    return out


def _solve_psd(matrices, rhs):
    """Solve ``matrices[k] x_k = rhs[:, k]`` for SPD matrices, with jitter."""
    return _solve_factored([_factor_psd(matrices[k]) for k in range(rhs.shape[1])], rhs)


class _Preconditioners(list):
    """The CG preconditioners, one Cholesky factor (or None: none) per model,
    as :func:`_factor_psd` gives them; those of fewer than
    ``_INVERSE_PARAMS`` parameters also kept as explicit inverses in one
    stack, so that :func:`_precondition` applies them all in one batched
    product (digits, 10 models of 65 parameters: ~3 µs a model against a
    triangular solve's ~10 µs with its call)."""

    def __init__(self, n_models):
        super().__init__([None] * n_models)
        self.inverses = self.stacked = None

    def __setitem__(self, k, factor):
        super().__setitem__(k, factor)
        if isinstance(factor, tuple) and factor[0].shape[0] < _INVERSE_PARAMS:
            if self.inverses is None:
                self.inverses = np.zeros((len(self),) + factor[0].shape)
                self.stacked = np.zeros(len(self), dtype=bool)
            inverse, info = dpotri(factor[0], lower=factor[1])
            if info == 0:
                self.inverses[k] = np.triu(inverse) + np.triu(inverse, 1).T
                self.stacked[k] = True
                return
        if self.stacked is not None:
            self.stacked[k] = False

    def apply(self, r):
        """``M_k^{-1} r_k`` of every model (``r_k`` where it has none)."""
        if self.stacked is None or not self.stacked.any():
            return _precondition(list(self), r)
        if self.stacked.all():
            return (self.inverses @ r.T[:, :, None])[:, :, 0].T
        models = np.flatnonzero(self.stacked)
        out = _precondition([None if self.stacked[k] else f for k, f in enumerate(self)], r)
        out[:, models] = (self.inverses[models] @ r.T[models, :, None])[:, :, 0].T
        return out


def _precondition(factors, r):
    """``M_k^{-1} r_k`` for every model, ``M_k`` given by its Cholesky factor
    (the identity where the factor is None); :class:`_Preconditioners` apply
    their stacked inverses."""
    if isinstance(factors, _Preconditioners):
        return factors.apply(r)
    out = r.copy()
    for k, factor in enumerate(factors):
        if factor is not None:
            out[:, k] = _cho_solve(factor, r[:, k])
    return out


def _decrement(grad, newton):
    """Half the Newton decrement, ``½ gᵀH⁻¹g`` per model, from the Newton
    direction ``-H⁻¹g``: the gap ``F(θ) - min F`` of the quadratic model,
    the estimate the stopping rule compares with ``tol |F(θ)|``."""
    return -0.5 * (grad * newton).sum(axis=0)


def _column_norms(M):
    """The Euclidean norm of each column (``np.linalg.norm(M, axis=0)``'s
    numbers without its dispatch)."""
    return np.sqrt((M * M).sum(axis=0))


def _conjugate_gradient(product, rhs, factors, rtol, max_iter):
    """Preconditioned CG for ``H_k x_k = rhs_k``, all models at once.

    ``product(V)`` returns ``H_k v_k`` column by column; ``factors[k]`` is the
    Cholesky factor of model k's preconditioner (None: none). Stops a model
    once its residual is ``<= rtol_k ‖rhs_k‖``, or, keeping its last iterate,
    on a search direction of non-positive curvature or of curvature (per
    squared length) below ``_SINGULAR`` times that of its first direction
    (a numerically singular system: e.g. no row with curvature along the
    intercept, whose step would be astronomically long); each model's
    iterates are those of its own CG. Returns the solution and the
    iterations each model used.
    """
    x = np.zeros_like(rhs)
    r = rhs.copy()
    z = _precondition(factors, r)
    direction = z.copy()
    rz = (r * z).sum(axis=0)
    target = rtol * _column_norms(rhs)
    done = _column_norms(r) <= target
    used = np.zeros(rhs.shape[1], dtype=int)
    first_rayleigh = None
    while not done.all() and used.max() < max_iter:
        used += ~done
        Hd = product(direction)
        # the iteration's arithmetic under one error state (divisions by a
        # zero curvature or rz and overflows are handled below)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            curvature = (direction * Hd).sum(axis=0)
            rayleigh = curvature / (direction * direction).sum(axis=0)
            if first_rayleigh is None:
                first_rayleigh = rayleigh
            done |= (curvature <= 0) | (rayleigh <= _SINGULAR * first_rayleigh)
            step = np.where(done, 0.0, rz / np.where(done, 1.0, curvature))
            x_next, r_next = x + step * direction, r - step * Hd
            # a curvature that underflows towards 0 (an ill-conditioned,
            # unpreconditioned system) gives a step that overflows: that model
            # stops at its last iterate (per column only where some number is)
            if np.isfinite(x_next).all() and np.isfinite(r_next).all():
                x, r = x_next, r_next
            else:
                blown = ~(np.isfinite(x_next).all(axis=0) & np.isfinite(r_next).all(axis=0))
                done |= blown
                x = np.where(blown, x, x_next)
                r = np.where(blown, r, r_next)
            done |= _column_norms(r) <= target
            z = _precondition(factors, r)
            rz_new = (r * z).sum(axis=0)
            beta = np.where(done, 0.0, rz_new / np.where(rz == 0, 1.0, rz))
            direction = z + beta * direction
            rz = rz_new
    return x, used




class NewtonSolver:
    """Minimize the renewable objective of one batch for every model (see
    :func:`solve_batch` for the parameters); one instance per batch.

    The steps a reader can find: :meth:`setup` (ridge, scale, the starting
    objective, gradient and curvature), :meth:`newton_direction` (direct
    solves on formed matrices, :meth:`inner_cg` on curvature products),
    :meth:`convergence_test`, :meth:`take_step` (line search, with
    :meth:`line_search`, :meth:`full_step_first`, :meth:`first_step_grid`
    and the majorization fallback), :meth:`predict_landing`,
    :meth:`accept` and :meth:`finish`.
    """

    def __init__(self, sites, loss, *, alpha, fit_intercept, prior=None, center=None,
                 max_iter=100, tol=1e-6, scale=None, refresh_curvature=True, warn=True,
                 frozen=None, penalty=None, matrices=False, rows=False):
        self.loss = as_loss(loss)
        self.message = loss_message(sites, self.loss)
        # few rows: the curvature in factored form, every system solved directly
        self.rows = rows
        if rows:
            sites = RowSites(sites)
        if not hasattr(sites, "line_losses"):
            sites = _SummaryOnlySites(sites)
        self.sites = sites
        self.alpha, self.fit_intercept = alpha, fit_intercept
        self.prior, self.center = prior, center
        self.max_iter, self.tol, self.warn = max_iter, tol, warn
        self.refresh = refresh_curvature
        self.frozen = frozen
        self.penalty = penalty
        self.always_direct = matrices or rows
        self.scale = sites.weight_sum if scale is None else scale

    # -- setup ------------------------------------------------------------

    def setup(self, Theta):
        """The ridge, the scales, the objective, gradient and (online)
        curvature at the start, and the per-model bookkeeping."""
        sites = self.sites
        p1, n_models = Theta.shape
        self.n_models, self.p1 = n_models, p1
        self.exact_products = getattr(sites, "exact_products", True)
        mask = penalty_mask(p1, self.fit_intercept) if self.penalty is None else self.penalty
        self.ridge = self.alpha * sites.weight_sum * mask
        self.ridge_matrix = ridge_matrix(self.ridge, self.rows, self.fit_intercept)
        self.scale = max(self.scale, np.finfo(float).tiny)
        self.rounds_before, self.floats_before = sites.rounds, sites.floats_sent
        # the objective the gap is relative to: the batch's, scaled up to the
        # weight ``scale`` it stands for (online: the stream's so far)
        self.stream_weight = self.scale / max(sites.weight_sum, np.finfo(float).tiny)
        self.Theta = Theta
        self.value, self.grad, curvature = self.objective_and_gradient(Theta, not self.refresh)
        self.history = [self.value.copy()]
        self.active = (np.ones(n_models, dtype=bool) if self.frozen is None
                       else ~np.asarray(self.frozen))
        self.factors = None  # Cholesky factors of the Newton system (online)
        self.start_curvature = None if self.refresh else curvature
        self.majorizer = None
        # Offline, per model: the last curvature matrix formed (plus ridge) and
        # the parameters it was formed at; a request asks only for the models
        # whose matrix is needed and not known at their current parameters
        self.matrices = [None] * n_models
        self.matrices_at = [None] * n_models
        self.per_model = getattr(sites, "per_model_curvature", True)
        self.sites_single_matrices = (None if self.always_direct
                                      else getattr(sites, "single_matrices", None))
        # per model: the last matrix formed came from float32 products; a
        # model whose step on one came within tol, or that is rechecked or
        # predicted to land within tol, is owed float64 matrices
        self.single_direct = np.zeros(n_models, dtype=bool)
        self.exact_matrix = np.zeros(n_models, dtype=bool)
        # Offline, per model: the Cholesky factor of the CG preconditioner, the
        # curvature matrix of an earlier iterate (None: CG unpreconditioned).
        # The O(n p²) matrix is formed only for a model marked stale, which then
        # takes one direct Newton step: its CG went stale, or its last full
        # Newton step predicted a gap close to tol (the matrix is then likely the
        # one at the returned point, which the renewable state needs anyway).
        self.preconditioner = _Preconditioners(n_models)
        self.stale = np.zeros(n_models, dtype=bool)
        # whether each model's last Newton step was taken in full (the local
        # phase, where solving the Newton system accurately pays); damped steps
        # get loose CG
        self.full_step = np.zeros(n_models, dtype=bool)
        # Levenberg-Marquardt damping of the damped phase, per model, in units
        # of the weight sum (0: none)
        self.damping = np.zeros(n_models)
        # the kink phase (see _KINK_DECREASE), per model, and the half decrement
        # on the smoothed matrix where one was formed this round (inf: none)
        self.kink = np.zeros(n_models, dtype=bool)
        self.poor_steps = np.zeros(n_models, dtype=int)  # poor full steps in a row
        self.smoothed_decrement = np.full(n_models, np.inf)
        self.steps = np.zeros(n_models)
        self.expected = np.full(n_models, np.inf)  # the predicted gap / |F| here (inf: none)
        self.quasi_newton = None  # the L-BFGS phase while it runs
        self.last_relative = np.zeros(n_models)  # the last full step's decrement / |F| (0: none)
        self.inert_at = None  # (Theta, the sites' smoothing_inert there)
        # few rows: whether a model's next factor may be float32 (its last half
        # decrement above _SINGLE_ABOVE of |F|; none yet: far)
        self.far = np.ones(n_models, dtype=bool)

    # -- the objective, gradient and curvature ----------------------------

    def objective(self, T, values, pulled=None):
        """Objective from the loss sums; ``pulled`` is ``P_k (θ_k - c_k)`` if known."""
        value = values + 0.5 * (self.ridge @ (T * T))
        if self.prior is not None:
            diff = T - self.center
            if pulled is None:
                pulled = prior_product(self.prior, diff)
            value = value + 0.5 * (diff * pulled).sum(axis=0)
        return value

    def objective_and_gradient(self, T, with_curvature):
        """One summary round: the objective, its gradient and (for the models
        flagged) the curvature matrix plus ridge at ``T``."""
        loss, grad, curvature = self.sites.summaries(T, self.message, with_curvature)
        grad = grad + self.ridge[:, None] * T
        pulled = None
        if self.prior is not None:
            pulled = prior_product(self.prior, T - self.center)
            grad = grad + pulled
        if curvature is not None:
            curvature = curvature + self.ridge_matrix
        return self.objective(T, loss, pulled), grad, curvature

    def system(self, curvature):
        """The Newton system's matrices: curvature plus the prior."""
        return curvature if self.prior is None else curvature + self.prior

    def curvature_matrices(self, models):
        """The curvature matrices (plus ridge) of ``models`` at their current
        parameters, formed in one request for those not known there."""
        Theta = self.Theta
        models = models & ~np.array([at is not None and np.array_equal(at, Theta[:, k])
                                     for k, at in enumerate(self.matrices_at)])
        if models.any():
            # below _LOCAL_MATRIX_PARAMS (where a fit forms matrices before the
            # one at the returned point by design) a matrix not expected to be
            # that one may come from float32 products: it is never kept as the
            # one at its point (no returned curvature reads it), and a step on
            # it that would stop a model is rechecked on a float64 matrix
            # formed there (convergence_test)
            cheap = ~self.kink & ~self.exact_matrix
            single = (self.per_model and self.p1 < _LOCAL_MATRIX_PARAMS
                      and self.sites_single_matrices is not None
                      and bool(np.all(cheap[models])) and self.sites_single_matrices(True))
            self.single_direct = models & single
            try:
                formed = self.objective_and_gradient(Theta, models if self.per_model else True)[2]
            finally:
                if single:
                    self.sites_single_matrices(False)
            for j, k in enumerate(np.flatnonzero(models)):
                self.matrices[k] = formed[j if self.per_model else k]
                self.matrices_at[k] = None if single else Theta[:, k].copy()
        return self.matrices

    def majorizer_factors(self):
        """Factors of the MM system ``c Σ w x̄ x̄ᵀ + ridge (+ prior)``, ``c``
        the loss's curvature bound (formed once)."""
        if self.majorizer is not None:
            return self.majorizer
        return [_factor_psd(m) for m in model_systems(
            self.sites.majorizer(self.message), self.ridge_matrix, self.n_models)
            + (0.0 if self.prior is None else self.prior)]

    # -- the Newton direction -----------------------------------------------

    def applied_damping(self):
        """The multiple of the identity added to each model's Newton system:
        its damping in the damped phase, none in the local phase."""
        return np.where(self.full_step | self.kink, 0.0, self.damping * self.sites.weight_sum)

    def newton_direction(self):
        """``-H⁻¹ g`` of the active models; offline also which models took a
        direct solve (``direct``) and which ran CG (``iterative``)."""
        grad = self.grad
        if not self.refresh:
            if self.factors is None:
                self.factors = [_factor_psd(m) for m in self.system(self.start_curvature)]
            return -_solve_factored(self.factors, grad), None, None
        newton = np.zeros_like(grad)
        direct = (self.stale | self.always_direct) & self.active
        if direct.any():
            matrices = self.curvature_matrices(direct)
            shift = self.applied_damping()
            inert = None
            for k in np.flatnonzero(direct):
                system = matrices[k] if self.prior is None else matrices[k] + self.prior[k]
                # tried where the last step was predicted to land near tol
                if (self.rows and self.full_step[k] and not self.kink[k]
                        and self.expected[k] <= _SAFETY * self.tol):
                    stop, inert = self.stop_on_earlier_factor(k, system, inert)
                    if stop is not None:
                        newton[:, k] = stop
                        continue
                newton[:, k] = self.direct_direction(k, system, shift[k])
        kink = self.kink & self.active
        self.smoothed_decrement = np.where(direct, _decrement(grad, newton), np.inf)
        iterative = self.active & ~direct & ~kink
        self.stale[:] = False
        if iterative.any():
            newton[:, iterative] = self.inner_cg(iterative)[:, iterative]
        if kink.any():
            newton[:, kink] = self.kink_direction(kink)[0][:, kink]
        return newton, direct, iterative

    def direct_direction(self, k, system, shift):
        """``-H⁻¹g`` of model k on ``system`` (plus ``shift`` I, the damping),
        its undamped factor kept as the preconditioner. On factored rows far
        from the optimum (the last half decrement above ``_SINGLE_ABOVE`` of
        ``|F|``) through float32 factors
        (:class:`~._factored_curvature.WoodburyFactor`), solved again in
        float64 where an undamped direction's decrement comes within
        ``_SAFETY`` of the stopping bound: only float64 stops a model."""
        grad = self.grad[:, k]
        bound = self.stop_bounds()[k]
        for single in ((True, False) if self.rows and self.far[k] else (False,)):
            self.preconditioner[k] = _factor_psd(system, single)
            if shift > 0:  # a damped system never stops a model
                return -_cho_solve(_factor_psd(shifted(system, shift), single), grad)
            newton = -_cho_solve(self.preconditioner[k], grad)
            if (not getattr(self.preconditioner[k], "single", False)
                    or -0.5 * float(grad @ newton) > _SAFETY * bound):
                return newton
        return newton  # pragma: no cover - the float64 pass returned

    def stop_on_earlier_factor(self, k, system, inert):
        """Few rows, local phase: a Newton direction whose half decrement is
        an upper bound of model k's on ``system`` (the matrix formed here),
        from the factor of its last step
        (:meth:`~._factored_curvature.WoodburyFactor.decrement_bound`), when
        that bound already stops the model here and no row is within the
        smoothing window: the stopping rule's decision on the matrix formed
        here without factoring it (the model stops at the same point with the
        same returned curvature). ``(None, inert)`` otherwise; ``inert`` is
        the sites' :meth:`smoothing_inert` answer, asked once per step."""
        factor, grad = self.preconditioner[k], self.grad[:, k]
        if not hasattr(factor, "decrement_bound"):
            return None, inert
        bound = self.stop_bounds()[k]
        # half the bound: the stopping test's own sum of the same products
        # may differ in the last bits
        decrement = factor.decrement_bound(system, grad)
        if not decrement <= 0.5 * bound:
            return None, inert
        if inert is None:
            inert = self.smoothing_inert()
        if not inert[k]:
            return None, inert
        norm = float(grad @ grad)
        return (-(2.0 * decrement / norm) * grad if norm > 0 else np.zeros_like(grad)), inert

    def smoothing_inert(self):
        """The sites' ``smoothing_inert`` at ``Theta`` (few rows, in
        process), asked once per point."""
        if self.inert_at is None or self.inert_at[0] is not self.Theta:
            self.inert_at = (self.Theta, self.sites.smoothing_inert(self.Theta, self.message))
        return self.inert_at[1]

    def curvature_operator(self, exact):
        """``V -> H_k v_k`` for every model: the sites' curvature products at
        ``Theta`` (``V_q''`` for the models in ``exact``, else the smoothed
        curvature) plus ridge, damping and prior."""
        prior, ridge, sites = self.prior, self.ridge, self.sites
        shift = self.applied_damping()

        def product(V, _T=self.Theta):
            out = (sites.curvature_product(_T, V, self.message, exact)
                   + (ridge[:, None] + shift) * V)
            if prior is not None:
                out = out + prior_product(prior, V)
            return out

        return product

    def kink_direction(self, kink, max_iter=_KINK_CG):
        """The semismooth Newton direction of the models in the kink phase:
        CG on the loss's own curvature ``V_q''`` (its right limit at the kink,
        an element of the generalized Hessian), preconditioned by the
        model's smoothed matrix, which differs from it only in the rows
        within the smoothing window of the kink (so CG needs about as many
        iterations as those rows). A CG that runs out marks its matrix stale;
        returns the direction and the models whose CG ran out."""
        solution, used = _conjugate_gradient(
            self.curvature_operator(kink), -np.where(kink, 1.0, 0.0) * self.grad,
            self.preconditioner, _KINK_RTOL, max_iter)
        ran_out = kink & (used >= max_iter)
        if max_iter == _KINK_CG:
            self.stale |= ran_out
        return solution, ran_out

    def inner_cg(self, iterative):
        """Inexact Newton: CG on the curvature at ``Theta`` through the
        sites' curvature-vector products (in the local phase on the loss's
        own curvature, see the module doc); marks stale the models whose CG
        needed too many iterations."""
        exact = (self.full_step & iterative) if self.exact_products else None
        product = self.curvature_operator(exact)
        # forcing terms: loose after a damped step; in the local phase tight
        # enough for fast convergence, but no tighter than a step needs to
        # land within tol / _SAFETY (an inexact step leaves about rtol² of
        # the gap)
        gnorm = np.max(np.abs(self.grad), axis=0) / self.scale
        with np.errstate(divide="ignore"):
            enough = np.sqrt(self.tol / (_SAFETY * self.expected))
        rtol = np.where(self.full_step, np.minimum(0.1, np.maximum(np.sqrt(gnorm), enough)),
                        _LOOSE)
        solution, used = _conjugate_gradient(
            product, -np.where(iterative, 1.0, 0.0) * self.grad, self.preconditioner,
            rtol, _MAX_CG)
        # without a preconditioner only a CG that ran out is stale
        limit = np.array([_MAX_CG - 1 if f is None else _STALE for f in self.preconditioner])
        self.stale = iterative & (used > limit)
        return solution

    # -- the convergence test -------------------------------------------------

    def stop_bounds(self):
        """Per model, the half Newton decrement at or below which it stops:
        ``tol`` times the stream's weight times ``|F|``."""
        return self.tol * self.stream_weight * np.abs(self.value)

    def convergence_test(self, newton, direct, iterative):
        """Stop the models whose half Newton decrement is within ``tol``
        (offline only on a matrix formed here; a CG estimate within it is
        rechecked on the matrix next round). Returns the decrements and the
        models to recheck."""
        predicted = _decrement(self.grad, newton)
        bound = self.stop_bounds()
        # a damped system's decrement underestimates the gap: it never stops a model
        within = (predicted <= bound) & (self.applied_damping() == 0)
        recheck = np.zeros(self.n_models, dtype=bool)
        if self.refresh:
            # only the matrix formed here stops a model; CG's decrement is a
            # lower bound of the exact one: a model it puts within tol is
            # checked exactly (the matrix formed here) before it stops
            kink = self.kink & self.active
            single = direct & self.single_direct
            self.exact_matrix |= single & within
            converged = self.confirm_semismooth(direct & within & ~kink & ~single, bound)
            recheck = (iterative | (kink & ~direct) | single) & within
            # the kink phase: the semismooth decrement and the one on the
            # smoothed matrix formed here both within tol (each quadratic
            # model misses what the other sees next to the kink)
            converged |= kink & within & (self.smoothed_decrement <= bound)
            self.stale |= recheck
            self.exact_matrix |= recheck
            self.detect_kink(predicted / np.abs(self.value))
            self.far = predicted > _SINGLE_ABOVE * np.abs(self.value)
        else:
            converged = self.active & within
        self.active &= ~converged
        return predicted, recheck

    def confirm_semismooth(self, candidates, bound):
        """Of the models the smoothed matrix puts within tol, those whose
        semismooth decrement is not known to exceed tol: ``_CONFIRM_CG``
        iterations of :meth:`kink_direction` (one product round) give a lower
        bound of it (CG's iterates underestimate ``½ gᵀH⁻¹g``), equal to the
        smoothed decrement when no row is within the smoothing window of the
        kink. The others take their smoothed step and are tested again where
        it lands. The smoothed decrement misses what the window hides
        (issue #23's conflicting rows: 2.6e-9 where the gap was 6.4e-8, and
        a fit at tol = 1e-8 stopped there, 126x above tol at q = 0.5)."""
        if not (self.exact_products and candidates.any()):
            return candidates
        same = np.zeros(self.n_models, dtype=bool)
        if self.rows:
            # few rows (in process): no row within the smoothing window, one
            # matrix for both: the smoothed decrement is the semismooth one
            same = candidates & self.smoothing_inert()
            if np.array_equal(same, candidates):
                return candidates
        rest = candidates & ~same
        semismooth, _ = self.kink_direction(rest, _CONFIRM_CG)
        return same | (rest & (_decrement(self.grad, semismooth) <= bound))

    def detect_kink(self, relative):
        """Enter the kink phase: a model whose last ``_KINK_POOR`` Newton
        steps were taken in full and each decreased the objective by less
        than ``_KINK_DECREASE`` of the half decrement it predicted (one such
        step is often a row passing the kink), or, from within
        ``_KINK_LOCAL`` of ``|F|``, cut its half decrement by less than
        ``_KINK_RATE`` (where Newton's local rate is quadratic). Rows whose
        margins sit next to genDWD's kink at the optimum (e.g. a
        row repeated under both labels, whose pair loss is flat left of the
        kink) make the smoothed curvature wrong by up to its whole value on
        them: the smoothed steps crawl, and the smoothed decrement
        underestimates the gap (25-40x on issue #23's conflicting rows)."""
        if not self.exact_products:
            return
        crawl = self.active & self.full_step & ((self.poor_steps >= _KINK_POOR) | (
            (self.last_relative > 0) & (self.last_relative <= _KINK_LOCAL)
            & (relative > _KINK_RATE * self.last_relative)))
        started = crawl & ~self.kink
        self.kink |= crawl
        self.stale |= started & np.array([f is None for f in self.preconditioner])

    # -- the line search -------------------------------------------------------

    def undamped_direct(self, direct):
        """The models whose Newton direction was just solved on a formed
        matrix without damping (offline, dense rows): the quadratic model's
        own minimizer, which :meth:`take_step` does not try to lengthen."""
        if direct is None or self.always_direct:
            return np.zeros(self.n_models, dtype=bool)
        return direct & (self.applied_damping() == 0)

    def take_step(self, newton, searching, undamped=None):
        """Step along ``newton`` (models in ``searching``), falling back to a
        majorization step where the Newton model was poor. Returns the new
        parameters, objective, the models moved and the gradient there
        (None when not formed by the step). In the damped phase the models
        not in ``undamped`` (:meth:`undamped_direct`) also try the longer
        steps ``_EXPANSIONS`` (a loose CG or damped direction falls short;
        n = 1e5, p = 50, q = 4: the step on the first matrix is taken in
        full, and its search asks one step instead of four)."""
        grad_new = None
        kink = self.kink & searching
        if self.refresh and (kink.any() or not np.all(self.full_step[searching])):
            # the damped phase: the full step and longer ones in one round (in
            # the kink phase every halving too, the best value taken)
            expand = ~self.full_step if undamped is None else ~self.full_step & ~undamped
            Theta_new, value_new, moved = self.line_search(
                newton, searching, self.value, self.grad,
                _MAX_HALVINGS if kink.any() else _NEWTON_HALVINGS,
                expand=expand, best=kink)
            self.adapt_damping(searching & ~kink)
        else:
            # online, and offline once the last steps were full (Newton's
            # local phase): the full step's loss and gradient in one round
            Theta_new, value_new, moved, grad_new = self.full_step_first(
                newton, searching, self.value, self.grad)
        fallback = searching & ~moved
        if fallback.any():
            grad_new = None
            # the Newton model was poor (e.g. no row near genDWD's kink): take
            # the majorization step, curvature <= its bound makes it a descent
            self.majorizer = self.majorizer_factors()
            self.Theta = Theta_new
            mm = -_solve_factored(self.majorizer, self.grad)
            Theta_new, value_mm, moved_mm = self.line_search(
                mm, fallback, self.value, self.grad, _MAX_HALVINGS)
            value_new[fallback] = value_mm[fallback]
            moved |= moved_mm
            self.stale |= fallback
        return Theta_new, value_new, moved, grad_new

    def adapt_damping(self, searched):
        """Levenberg-Marquardt: a damped step cut to a quarter or less raises
        the model's damping, a full or longer one lowers it. Rows left of
        genDWD's kink have no curvature, so the undamped Newton direction is
        unbounded along what only those rows see until one crosses the kink
        (digits, q = 1: ~50 steps of 1/16 each, without it)."""
        steps = self.steps
        short = searched & (steps > 0) & (steps <= 0.25)
        self.damping[short] = np.maximum(4.0 * self.damping[short], _DAMPING_START)
        long_ = searched & (steps >= 1.0)
        self.damping[long_] = np.where(self.damping[long_] / 4 < _DAMPING_START, 0.0,
                                       self.damping[long_] / 4)

    def line_search(self, direction, searching, value, grad, max_halvings, expand=None,
                    full_step_known_bad=False, best=None):
        """Armijo backtracking for the classes in ``searching``: the full step
        first, then all halvings in one round. Models in ``expand`` also try
        the longer steps ``_EXPANSIONS`` in the first round and take the best
        value among the steps there that pass the test. With
        ``full_step_known_bad`` the full step is skipped (it failed already).
        Models in ``best`` (the kink phase) search the full step, the longer
        ones and every halving in one round and take the lowest value among
        those that pass: a line search to within a factor 2 of the exact
        minimizer along the direction."""
        sites, Theta, full_step = self.sites, self.Theta, self.full_step
        slope = (grad * direction).sum(axis=0)
        searching_at_start = searching.copy()
        searching = searching & (slope < 0)
        steps = np.zeros(self.n_models)
        if not searching.any():
            full_step[searching_at_start] = False
            return Theta, value.copy(), np.zeros(self.n_models, dtype=bool)
        accepted = np.zeros(self.n_models, dtype=bool)
        new_value = value.copy()
        halvings = _HALVINGS[:max_halvings]
        best = np.zeros(self.n_models, dtype=bool) if best is None else best & searching
        expand = np.zeros(self.n_models, dtype=bool) if expand is None else expand & searching
        expand = expand | best
        first = [1.0] + (list(_EXPANSIONS) if expand.any() else [])
        if best.any() and not full_step_known_bad:
            first, halvings = first + list(halvings), []
        trials = (first, halvings) if getattr(sites, "batched_line_search", True) else (
            [first] + [[t] for t in halvings])
        if full_step_known_bad:
            trials = trials[1:]
        trials = [trial for trial in trials if len(trial)]
        searched = []  # the direction each round asked the sites about
        for trial in trials:
            if not searching.any():
                break
            masked = np.where(searching, 1.0, 0.0) * direction
            searched.append(masked)
            losses = sites.line_losses(Theta, masked, trial, self.message)
            passed = np.zeros(self.n_models, dtype=bool)
            # the prior's pull is linear along the line: two products a round
            along = None if self.prior is None else (
                prior_product(self.prior, Theta - self.center), prior_product(self.prior, masked))
            for t, loss in zip(trial, losses):
                trial_value = self.objective(Theta + t * masked, loss,
                                             None if along is None else along[0] + t * along[1])
                ok = searching & (trial_value <= value + _ARMIJO_SLOPE * t * slope)
                if t > 1.0:
                    ok &= expand & (trial_value < new_value)
                else:
                    ok &= ~passed | (best & (trial_value < new_value))
                steps[ok], new_value[ok] = t, trial_value[ok]
                passed |= ok
            accepted |= passed
            searching &= ~passed
        # after one round, along the direction as searched (the same point:
        # unsearched models take no step), so sites can reuse what it formed
        new = sites.advance(Theta, searched[0] if len(searched) == 1 else direction, steps)
        full_step[searching_at_start] = steps[searching_at_start] == 1.0
        self.steps = steps
        return new, new_value, accepted

    def full_step_first(self, direction, searching, value, grad):
        """Newton's full step asked as one summary request (the loss *and*
        gradient there, which the next step needs), Armijo-tested by the
        server; models whose full step fails backtrack (:meth:`line_search`).
        Returns ``line_search``'s triple and the gradient at the new point
        (None when some model backtracked)."""
        slope = (grad * direction).sum(axis=0)
        trying = searching & (slope < 0)
        if not trying.any():  # no descent direction: no request
            return self.line_search(direction, searching, value, grad,
                                    _NEWTON_HALVINGS) + (None,)
        trial = self.Theta + np.where(trying, 1.0, 0.0) * direction
        trial_value, trial_grad, _ = self.objective_and_gradient(trial, False)
        passed = trying & (trial_value <= value + _ARMIJO_SLOPE * slope)
        if np.array_equal(passed, searching):
            return trial, np.where(passed, trial_value, value), passed, trial_grad
        new, new_value, moved = self.line_search(direction, searching & ~passed, value, grad,
                                                 _NEWTON_HALVINGS, full_step_known_bad=True)
        return (np.where(passed, trial, new), np.where(passed, trial_value, new_value),
                passed | moved, None)

    def first_step_grid(self, direction, searching, value):
        """From parameters where the curvature vanishes (genDWD: all margins
        0 at ``Theta = 0``): the best of a geometric grid of steps along
        ``direction``, in one round."""
        n_models, Theta = self.n_models, self.Theta
        steps_grid = _FIRST_STEPS
        losses = self.sites.line_losses(Theta, np.where(searching, 1.0, 0.0) * direction,
                                        steps_grid, self.message)
        if self.prior is None and Theta.size <= _GRID_AT_ONCE:
            # the objective at every grid point in one array
            T = Theta[None] + steps_grid[:, None, None] * direction[None]
            values = self.objective(T, np.asarray(losses))
        else:
            values = np.array([self.objective(Theta + t * direction, loss)
                               for t, loss in zip(steps_grid, losses)])
        best = np.argmin(values, axis=0)
        steps = np.where(searching & (values[best, np.arange(n_models)] < value),
                         steps_grid[best], 0.0)
        return self.sites.advance(Theta, direction, steps), np.where(
            steps > 0, values[best, np.arange(n_models)], value), steps > 0

    def grid_direction(self):
        """The first step's direction: on factored rows from ``θ = 0``
        without a prior, the piled margins' ridge direction
        (:mod:`._piled_start`), else the gradient's."""
        if self.rows and self.prior is None and not self.Theta.any():
            direction = piled_direction(self.sites, self.loss, self.alpha, self.fit_intercept)
            if direction is not None:
                return direction
        return -self.grad / self.scale

    def predict_landing(self, predicted, moved):
        """The gap where this step lands, extrapolating the last two full
        steps' rate (rel_{k+1} ≈ rel_k² / rel_{k-1}; a smoothed curvature
        makes the last steps converge linearly, so this is more cautious
        than Newton's quadratic rate): a step predicted to land well within
        tol is checked there exactly, with the matrix the renewable state
        needs at the returned point anyway."""
        relative = predicted / np.abs(self.value)
        with np.errstate(divide="ignore", invalid="ignore"):
            landing = np.where(self.last_relative > 0, relative**2 / self.last_relative, np.inf)
        taken = moved & self.full_step
        near = taken & (_SAFETY * landing <= self.tol)
        self.stale |= near
        self.exact_matrix |= near
        # few parameters: the matrix at the local phase's first point (see
        # _LOCAL_MATRIX_PARAMS) preconditions the CG of the steps after it
        if self.p1 < _LOCAL_MATRIX_PARAMS:
            entering = taken & (self.last_relative == 0)
            self.stale |= entering & np.array([f is None for f in self.preconditioner])
        self.expected = np.where(taken, landing, np.inf)
        self.last_relative = np.where(taken, relative, 0.0)

    # -- one iteration ---------------------------------------------------------

    def quasi_newton_pays(self):
        """Whether an L-BFGS phase runs before the Newton steps: offline from
        a flat start without a prior, a weight sum (the rows, unweighted) of
        at least the parameters per model, and at least
        ``_QUASI_NEWTON_PARAMS`` of them or at least ``_QUASI_NEWTON_MODELS``
        models. Only what every transport's sites report decides it, so a
        remote fit takes the phase where one in process does (and the same
        path and rounds, except where in-process sites read float32 rows
        early in the phase: :meth:`~._dwd_sites.DWDSites.reduced_precision`)."""
        return (self.refresh and not self.always_direct and self.prior is None
                and self.loss.flat_at_zero and self.sites.weight_sum >= self.p1
                and (self.p1 >= _QUASI_NEWTON_PARAMS or self.n_models >= _QUASI_NEWTON_MODELS))

    def iterate(self, n_iter):
        """One Newton iteration; False when every model has converged."""
        if self.quasi_newton is not None:
            if self.quasi_newton.iterate():
                return True
            self.quasi_newton = None
        # offline the first step from a flat start is a grid search along the
        # gradient (genDWD at Theta = 0: every margin 0, the curvature 0), on
        # factored rows along the piled margins' direction (:meth:`grid_direction`)
        grid = self.refresh and n_iter == 1 and self.loss.flat_at_zero
        # models that take no step this round: their estimated gap is checked
        # against the matrix at this very point next round
        recheck = np.zeros(self.n_models, dtype=bool)
        grad_new = None  # the gradient at the new point, when a step formed it
        if grid:
            start, start_grad = self.Theta, self.grad
            Theta_new, value_new, moved = self.first_step_grid(
                self.grid_direction(), self.active, self.value)
        else:
            newton, direct, iterative = self.newton_direction()
            undamped = self.undamped_direct(direct)
            predicted, recheck = self.convergence_test(newton, direct, iterative)
            if not self.active.any():
                return False
            Theta_new, value_new, moved, grad_new = self.take_step(
                newton, self.active & ~recheck, undamped)
            if self.refresh:
                self.predict_landing(predicted, moved)
                poor = (moved & self.full_step
                        & (self.value - value_new < _KINK_DECREASE * predicted))
                self.poor_steps = np.where(poor, self.poor_steps + 1, 0)
        self.accept(Theta_new, value_new, moved, grad_new, grid, recheck)
        if grid and moved.any() and self.quasi_newton_pays():
            self.quasi_newton = LBFGSPhase(self, start, start_grad, max_iter=self.max_iter // 2,
                                           cheap_matrices=self.p1 < _QUASI_NEWTON_PARAMS)
        return True

    def accept(self, Theta_new, value_new, moved, grad_new, grid, recheck):
        """Move to the new point: freeze the models that cannot descend any
        more, ask the gradient there (unless the step formed it), mark
        slowly converging CG models for a matrix."""
        # a class that cannot descend any more is at machine precision: freeze it
        # (a grid start that found nothing better leaves the class to Newton)
        decrease = self.value - value_new
        if not grid:
            self.active &= recheck | (
                moved & (decrease > 4 * np.finfo(float).eps * np.abs(self.value)))
        if not moved.any():  # only exact checks pending: nothing changed
            return
        self.Theta = Theta_new
        previous = self.grad
        self.grad = (self.objective_and_gradient(self.Theta, False)[1] if grad_new is None
                     else grad_new)
        if self.refresh and not grid:
            # unpreconditioned CG whose Newton steps converge slowly (an
            # ill-conditioned curvature): form the matrix for that model
            slow = np.max(np.abs(self.grad), axis=0) > _SLOW * np.max(np.abs(previous), axis=0)
            self.stale |= moved & slow & np.array([f is None for f in self.preconditioner])
        self.value = value_new
        self.history.append(self.value.copy())

    # -- solve and finish --------------------------------------------------

    def solve(self, Theta):
        """Run from ``Theta``; returns ``(Theta, curvature, info)`` (see
        :func:`solve_batch`)."""
        self.setup(Theta)
        n_iter, exhausted = 0, False
        try:
            for n_iter in range(1, self.max_iter + 1):
                if not self.active.any() or not self.iterate(n_iter):
                    n_iter -= 1
                    break
            else:
                exhausted = self.warn and self.active.any()
            if self.quasi_newton is not None:
                # out of iterations in the phase: the loss and gradient on the
                # rows as given, which the warning's gap estimate reads
                self.quasi_newton.full_precision()
        finally:
            if self.quasi_newton is not None:
                self.quasi_newton.release()  # the sites read the rows as given again
        result = self.finish(n_iter)
        if exhausted:
            self.warn_not_converged(result[1])
        return result

    def warn_not_converged(self, curvature):
        """The ConvergenceWarning of a solve that ran out of iterations,
        with the estimated relative gap at the returned point of the model
        furthest from converged: half the Newton decrement on the system
        solved there (offline the curvature matrix formed at the returned
        point) over ``|F|``, as the stopping rule measures it (the gap of the
        quadratic model: an estimate, not a bound)."""
        newton = -_solve_psd(self.system(curvature), self.grad)
        gap = _decrement(self.grad, newton) / (self.stream_weight * np.abs(self.value))
        worst = np.flatnonzero(self.active)
        worst = worst[np.argmax(gap[worst])]
        warnings.warn(
            f"Newton solver ({self.loss.name} loss) did not converge in "
            f"max_iter={self.max_iter} iterations: estimated relative objective gap "
            f"{gap[worst]:.3g} > tol={self.tol:.3g} at the returned point (class "
            f"model {worst}); increase max_iter or tol.",
            ConvergenceWarning,
        )

    def finish(self, n_iter):
        """The returned parameters, the curvature the renewable state keeps
        (at the returned point offline, at the start online) and the info."""
        if self.refresh:
            curvature = stack_curvatures(
                self.curvature_matrices(np.ones(self.n_models, dtype=bool)))
        else:
            curvature = self.start_curvature
        info = {"n_iter": n_iter, "objective": np.array(self.history),
                "rounds": self.sites.rounds - self.rounds_before,
                "floats_sent": self.sites.floats_sent - self.floats_before}
        return self.Theta, curvature, info


def solve_batch(
    sites,
    Theta,
    *,
    loss=None,
    q=None,
    alpha,
    fit_intercept,
    prior=None,
    center=None,
    max_iter=100,
    tol=1e-6,
    scale=None,
    refresh_curvature=True,
    warn=True,
    frozen=None,
    penalty=None,
    matrices=False,
    rows=False,
):
    """Minimize the renewable objective of one batch (see module doc).

    Parameters
    ----------
    sites : SiteData
    Theta : ndarray of shape (p1, K)
        Starting point (the previous estimate online).
    loss : loss object or None
        The margin loss (:mod:`skfedpriv._loss`).
    q : float or None
        genDWD's exponent, when ``loss`` is None.
    alpha : float
    fit_intercept : bool
    prior : ndarray of shape (K, p1, p1) or None
        Accumulated curvature ``Σ_{j<b} J_j`` of earlier batches.
    center : ndarray of shape (p1, K) or None
        The previous estimate the prior is centred on.
    max_iter : int
    tol : float
        Stop a class model at ``θ`` once ``½ gᵀH⁻¹g <= tol |F(θ)| scale / W``:
        half the Newton decrement (the gap ``F(θ) - min F`` of the quadratic
        model), relative to the objective scaled from the batch's weight
        ``W`` to ``scale`` (online: the stream's, whose objective the
        renewable one stands for). ``H`` is the system the step solves;
        offline the test is made only with the curvature matrix formed at
        ``θ`` (the one returned), never with a CG estimate.
    scale : float or None
        Total weight the objective stands for (default: this batch's); scales
        the stopping test, the gradient for the first step and the CG
        tolerances.
    refresh_curvature : bool
        Newton-type steps on the curvature at the current iterate (offline);
        otherwise keep the curvature at the starting point, as eq. 35 does.
    warn : bool
        Emit a ConvergenceWarning when ``max_iter`` is reached.
    frozen : ndarray of bool of shape (K,) or None
        Class models to leave where they are (their curvature is still
        returned).
    penalty : ndarray of shape (p1,) or None
        1 for each penalized parameter; default all but the intercept (row
        0 when ``fit_intercept``).
    matrices : bool
        Offline, solve every Newton system on the curvature matrix formed at
        the iterate (one ``O(p1²)`` summary per step: fewer rounds, more
        numbers sent) instead of CG on curvature-vector products.
    rows : bool
        Keep every curvature in factored form (in-process sites that answer
        ``curvature_rows``; :mod:`._factored_curvature`) and solve every
        Newton system directly through ``m x m`` systems; ``prior`` may be a
        :class:`~._factored_curvature.CurvatureStack`. The steps then run in
        the coordinates of the span of the rows (:mod:`._row_span`: no pass
        over the ``p`` columns per step) when the start and ``center`` lie
        in it; offline from ``Theta = 0`` without a prior the first grid
        step runs along the piled margins' direction (:mod:`._piled_start`).

    Returns
    -------
    Theta : ndarray of shape (p1, K)
    curvature : ndarray of shape (K, p1, p1) or CurvatureStack
        Data curvature plus ridge at the *starting* point when
        ``refresh_curvature`` is False, at the returned point otherwise.
    info : dict
        ``n_iter``, ``objective`` (the history of ``F_k``, one row per
        accepted iterate), ``rounds`` (requests to the sites) and
        ``floats_sent`` (numbers one site sent back).
    """
    settings = dict(alpha=alpha, fit_intercept=fit_intercept, max_iter=max_iter, tol=tol,
                    scale=scale, refresh_curvature=refresh_curvature, warn=warn, frozen=frozen,
                    penalty=penalty, matrices=matrices, rows=rows)
    loss = q if loss is None else loss
    span = reduce_to_row_span(sites, Theta, prior, center, fit_intercept) if rows else None
    if span is not None:
        # few rows: the same steps in the span of the rows (:mod:`._row_span`)
        reduced, start, prior_span, center_span = span
        solver = NewtonSolver(reduced.sites, loss, prior=prior_span, center=center_span,
                              **settings)
        return reduced.results(Theta, *solver.solve(start), frozen)
    return NewtonSolver(sites, loss, prior=prior, center=center, **settings).solve(Theta)
