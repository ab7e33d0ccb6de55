"""Prefix-sum factorizations found by numerical optimization, and their cache.

* :class:`OptimalFactorization`: the factorization of least mean squared
  error (Denisov et al. 2022, paper eq. 7), by a certified dual fixed point;
* :class:`BLTFactorization`: buffered linear Toeplitz factorizations, given
  explicitly or with parameters fitted by L-BFGS-B.

Both optimizations depend only on the horizon (and their own settings), so
their results are cached on disk with ``joblib.Memory`` (:func:`_memory`).
"""

import numbers
import os
import tempfile

import numpy as np
from scipy import linalg, optimize, special
from scipy.signal import fftconvolve, lfilter

from ._noise_stream import _BLTStream, _HistoryStream
from ._prefix_sum import PrefixSumFactorization, _lower_toeplitz

__all__ = ["BLTFactorization", "OptimalFactorization"]


def _cache_dir():
    env = os.environ.get("SKFEDPRIV_CACHE")
    if env is not None:
        if env.strip().lower() in ("", "0", "none", "off", "false"):
            return None
        return os.path.expanduser(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return os.path.join(os.path.expanduser(base), "skfedpriv")


def _memory(cache=True):
    """A ``joblib.Memory`` in the user cache dir, or a no-op one if unusable.

    The directory is ``$SKFEDPRIV_CACHE`` if set (an empty value, ``0`` or
    ``none`` disables caching), else ``$XDG_CACHE_HOME/skfedpriv`` or
    ``~/.cache/skfedpriv``. When the directory cannot be created or written,
    results are simply not cached.
    """
    from joblib import Memory

    location = _cache_dir() if cache else None
    if location is not None:
        try:
            os.makedirs(location, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=location):
                pass
        except OSError:
            location = None
    return Memory(location=location, verbose=0)


def _reverse_cholesky(X):
    """Lower-triangular ``C`` with ``C.T @ C = X``."""
    L = np.linalg.cholesky(X[::-1, ::-1])
    return np.ascontiguousarray(L.T[::-1, ::-1])


def _optimal_dual(n_rounds, tol, max_iter):
    """Fixed-point iteration for the dual variables of the optimal factorization.

    Solves ``min tr(M X^{-1}) s.t. diag(X) = 1, X > 0`` with ``M = A^T A``.
    Stationarity of the Lagrangian ``tr(M X^{-1}) + sum_i v_i (X_ii - 1)``
    gives ``X(v) = V^{-1/2} (V^{1/2} M V^{1/2})^{1/2} V^{-1/2}`` and the
    constraint ``X_ii = 1`` gives the fixed point
    ``v <- diag((V^{1/2} M V^{1/2})^{1/2})`` (Denisov et al., Thm 3.2). The
    dual value is ``2 tr((V^{1/2} M V^{1/2})^{1/2}) - sum(v)``; the primal
    value is ``tr(M Xn^{-1})`` with ``Xn`` = ``X(v)`` rescaled to unit
    diagonal. Stops when the relative duality gap is below ``tol``.

    The step is over-relaxed, ``v <- v (diag(S) / v)^2`` (same fixed points,
    about half the iterations), and falls back to the plain fixed point
    ``v <- diag(S)`` as soon as the gap fails to decrease.

    Returns
    -------
    v : ndarray of shape (n_rounds,)
    primal, dual : float
        Certified bracket ``dual <= optimum <= primal`` of ``||B||_F^2``.
    n_iter : int
    """
    R = n_rounds
    idx = np.arange(R)
    M = (R - np.maximum(idx[:, None], idx[None, :])).astype(float)  # A^T A
    v = np.ones(R)
    primal = dual = np.nan
    relax, previous_gap = 2.0, np.inf
    for n_iter in range(1, max_iter + 1):
        s = np.sqrt(v)
        w, U = np.linalg.eigh(s[:, None] * M * s[None, :])
        w = np.clip(w, np.finfo(float).tiny, None)
        root = np.sqrt(w)
        diag_S = (U * U) @ root
        dual = 2.0 * root.sum() - v.sum()
        d = diag_S / v  # diag of X(v)
        # tr(M Xn^{-1}) = tr(E K E S^{-1}), E = diag(sqrt d), K = U diag(w) U^T
        G = U.T @ (np.sqrt(d)[:, None] * U)
        primal = float(np.sum(G * G * w[None, :] / root[:, None]))
        gap = primal - dual
        if gap <= tol * primal:
            break
        if gap >= previous_gap:  # over-relaxation not helping: plain fixed point
            relax = 1.0
        previous_gap = gap
        v = v * (diag_S / v) ** relax
    return v, primal, dual, n_iter


class OptimalFactorization(PrefixSumFactorization):
    """Optimal factorization for mean squared error (Denisov et al. 2022).

    Minimizes ``||B||_F^2`` subject to unit column norms of ``C`` (paper
    eq. 7) through the Gram matrix ``X = C^T C``: minimize
    ``tr(A X^{-1} A^T)`` s.t. ``diag(X) = 1``, ``X`` positive definite, by
    the fixed-point iteration on the dual variables of Denisov et al.
    (Thm 3.2), stopped when the duality gap certifies ``tol`` relative
    accuracy. Then ``C`` is the lower-triangular factor with
    ``C^T C = X`` (Cholesky of the reversed matrix), ``B = A C^{-1}`` is
    lower triangular too, so the noise can be streamed.

    Parameters
    ----------
    n_rounds : int
        Number of rounds ``R``.
    tol : float, default=1e-5
        Relative duality gap at which the iteration stops.
    max_iter : int, default=500
        Maximum number of fixed-point iterations (one ``R x R``
        eigendecomposition each).
    cache : bool, default=True
        Cache the dual variables per ``(R, tol, max_iter)`` with
        ``joblib.Memory`` in ``$SKFEDPRIV_CACHE`` or ``~/.cache/skfedpriv``
        (no caching if that directory is not writable).

    Attributes
    ----------
    sensitivity_squared : float
        Largest squared column norm of ``C`` (1 up to rounding).
    frobenius_B_squared : float
        ``||A C^{-1}||_F^2``.
    dual_bound_ : float
        Certified lower bound on the optimal ``||B||_F^2`` (the mean error is
        within ``(frobenius_B_squared - dual_bound_) / dual_bound_`` of
        optimal). Mean error 4.998 at ``R = 100`` and 8.691 at ``R = 1000``.
    n_iter_ : int
        Fixed-point iterations of the computation (also when the result was
        read from the cache).

    Notes
    -----
    Streaming state: all past draws ``z_1..z_r`` and the dense lower-
    triangular ``C^{-1}`` (``R^2`` floats); the increment of round ``r`` is
    ``(C^{-1} z)_r``, ``O(r prod(shape))`` work. Computing the factorization
    costs ``O(R^3)`` per iteration (about 2-3 s at ``R = 1000``) and several
    dense ``R x R`` matrices, so horizons above ``max_rounds = 2048`` raise
    ``ValueError`` (use :class:`BLTFactorization`).

    References
    ----------
    Denisov, McMahan, Rush, Smith, Thakurta (2022), "Improved differential
    privacy for SGD via optimal private linear operators on adaptive
    streams", NeurIPS, Section 3 and Theorem 3.2.
    Zhang, Zhu, Fay, Johansson, "Locally differentially private online
    federated learning with correlated noise", Example (ii), eq. (7).
    """

    name = "optimal"

    max_rounds = 2048

    def __init__(self, n_rounds, tol=1e-5, max_iter=500, cache=True):
        super().__init__(n_rounds)
        if self.n_rounds > self.max_rounds:
            R = self.n_rounds
            raise ValueError(
                f"OptimalFactorization needs several dense R x R matrices and O(R^3) "
                f"work per iteration; R={R} rounds would take about "
                f"{6 * 8 * R * R / 1e9:.1f} GB and hours, so it is refused above "
                f"R={self.max_rounds}. Use BLTFactorization (mechanism='blt'): O(1) "
                "state per round and mean error within a few percent of optimal."
            )
        self.tol = float(tol)
        self.max_iter = int(max_iter)
        self.cache = cache
        solve = _memory(cache).cache(_optimal_dual)
        v, primal, dual, n_iter = solve(self.n_rounds, self.tol, self.max_iter)
        self.dual_bound_ = float(dual)
        self.n_iter_ = int(n_iter)
        R = self.n_rounds
        idx = np.arange(R)
        M = (R - np.maximum(idx[:, None], idx[None, :])).astype(float)
        s = np.sqrt(v)
        w, U = np.linalg.eigh(s[:, None] * M * s[None, :])
        root = np.sqrt(np.clip(w, np.finfo(float).tiny, None))
        X = ((U * root) @ U.T) / s[:, None] / s[None, :]
        d = np.sqrt(np.diag(X))
        X = X / d[:, None] / d[None, :]
        X = 0.5 * (X + X.T)
        self._C = _reverse_cholesky(X)
        self._C_inv = linalg.solve_triangular(self._C, np.eye(R), lower=True)
        self.sensitivity_squared = float(np.max(np.sum(self._C**2, axis=0)))
        self.frobenius_B_squared = float(np.sum(np.cumsum(self._C_inv, axis=0) ** 2))

    @property
    def C(self):
        """Dense lower-triangular ``C``, shape ``(R, R)``, unit column norms."""
        return self._C.copy()

    @property
    def B(self):
        """Dense lower-triangular ``B = A C^{-1}``, shape ``(R, R)``."""
        return np.cumsum(self._C_inv, axis=0)

    def _make_stream(self, draw, shape):
        return _HistoryStream(self.n_rounds, shape, draw, dense=self._C_inv)


def _blt_polynomials(theta, omega):
    """Numerator and denominator of ``c(x) = 1 + sum_j omega_j x / (1 - theta_j x)``.

    Coefficients in increasing powers of ``x``: ``c = N / Q`` with
    ``Q = prod_j (1 - theta_j x)``.
    """
    Q = np.poly(theta)
    N = Q.copy()
    for j in range(len(theta)):
        N[1:] += omega[j] * np.poly(np.delete(theta, j))
    return N, Q


def _blt_coefficients(theta, omega, n_rounds):
    """Toeplitz coefficients of ``C`` and of ``C^{-1}`` (both length R)."""
    theta = np.asarray(theta, dtype=float)
    omega = np.asarray(omega, dtype=float)
    k = np.arange(n_rounds)
    powers = np.zeros((n_rounds, theta.size))
    powers[1:] = theta[None, :] ** k[:-1, None]
    c = powers @ omega
    c[0] = 1.0
    N, Q = _blt_polynomials(theta, omega)
    impulse = np.zeros(n_rounds)
    impulse[0] = 1.0
    c_inv = lfilter(Q, N, impulse)
    return c, c_inv, powers


def _blt_loss_and_grad(theta, omega, n_rounds):
    """Mean error ``sum(c^2) * sum_k (R-k) b_k^2 / R`` and its gradient.

    ``c``: coefficients of ``C``; ``b = cumsum(c_inv)``: those of ``B``.
    O(R nbuf) for the loss, O(R log R) (two convolutions) for the gradient.
    """
    R = n_rounds
    c, c_inv, powers = _blt_coefficients(theta, omega, R)
    b = np.cumsum(c_inv)
    weight = (R - np.arange(R)).astype(float)
    sens2 = c @ c
    frob = np.sum(weight * b * b)
    loss = sens2 * frob / R
    # d frob / d c_inv, then d c_inv = -(c_inv * c_inv) * dc (power series)
    g_cinv = np.cumsum((2.0 * weight * b)[::-1])[::-1]
    conv = np.convolve if R <= 256 else fftconvolve
    u = conv(c_inv, c_inv)[:R]
    adjoint = conv(g_cinv[::-1], u)[:R][::-1]
    g_c = (2.0 * c * frob - sens2 * adjoint) / R
    g_c[0] = 0.0
    g_omega = powers.T @ g_c
    dpowers = np.zeros_like(powers)
    if R > 2:
        k = np.arange(R)
        dpowers[2:] = k[1:-1, None] * theta[None, :] ** k[:-2, None]
    g_theta = omega * (dpowers.T @ g_c)
    return loss, g_theta, g_omega


def _blt_objective(p, n_rounds):
    nb = p.size // 2
    theta = special.expit(p[:nb])
    omega = np.exp(p[nb:])
    with np.errstate(all="ignore"):
        loss, g_theta, g_omega = _blt_loss_and_grad(theta, omega, n_rounds)
    if not np.isfinite(loss) or loss > 1e12 or not np.all(np.isfinite(g_theta)):
        return 1e12, np.zeros_like(p)
    grad = np.concatenate([g_theta * theta * (1.0 - theta), g_omega * omega])
    return np.log(loss), grad / loss


def _blt_optimize(n_rounds, n_buffers):
    """Fit BLT parameters minimizing the mean error for ``n_rounds``.

    Greedy in the number of buffers: the ``m``-buffer fit starts from the
    ``(m-1)``-buffer optimum plus one new buffer (a few candidate decays),
    L-BFGS-B on ``(logit theta, log omega)`` with the exact gradient.
    """

    def fit(p0):
        res = optimize.minimize(
            _blt_objective,
            p0,
            args=(n_rounds,),
            jac=True,
            method="L-BFGS-B",
            options=dict(maxiter=3000, ftol=1e-13, gtol=1e-10),
        )
        return res.fun, res.x

    logit = lambda t: np.log(t / (1.0 - t))  # noqa: E731
    R = max(n_rounds, 2)
    best_f, best_p = fit(np.array([logit(1.0 - 1.0 / R), np.log(0.3)]))
    for m in range(2, n_buffers + 1):
        theta = special.expit(best_p[: m - 1])
        omega = np.exp(best_p[m - 1 :])
        candidates = []
        for new_theta in (1.0 - 0.5 / R, 1.0 - 2.0 / np.sqrt(R), 0.5):
            t0 = np.append(theta, new_theta)
            o0 = np.append(omega, 1e-3)
            candidates.append(np.concatenate([logit(np.clip(t0, 1e-6, 1 - 1e-9)), np.log(o0)]))
        t0 = 1.0 - np.geomspace(1.0 / R, 0.5, m)
        candidates.append(np.concatenate([logit(t0), np.log((1.0 - t0) / m + 1e-3)]))
        results = [fit(p0) for p0 in candidates]
        f, p = min(results, key=lambda fp: fp[0])
        if f < best_f:
            best_f, best_p = f, p
        else:  # an extra buffer did not help: keep a harmless zero-weight one
            best_p = np.concatenate(
                [best_p[: m - 1], [logit(0.5)], best_p[m - 1 :], [np.log(1e-12)]]
            )
    nb = best_p.size // 2
    # a useless buffer's decay can underflow to 0 in the sigmoid; keep it a
    # valid decay (its weight omega is negligible, so C does not change)
    theta = np.clip(special.expit(best_p[:nb]), 1e-12, 1.0 - 1e-12)
    omega = np.exp(best_p[nb:])
    order = np.argsort(theta)[::-1]
    return theta[order], omega[order]


class BLTFactorization(PrefixSumFactorization):
    """Buffered linear Toeplitz (BLT) factorization.

    ``C`` is lower-triangular Toeplitz with coefficients ``c_0 = 1`` and
    ``c_k = sum_j omega_j theta_j^(k-1)`` for ``k >= 1`` (generating function
    ``1 + sum_j omega_j x / (1 - theta_j x)``); ``C^{-1}`` is again a
    rational Toeplitz matrix, and ``B = A C^{-1}``. Multiplying by ``C`` or
    ``C^{-1}`` in a stream only needs ``n_buffers`` decaying buffers.

    Parameters
    ----------
    n_rounds : int
        Number of rounds ``R``.
    n_buffers : int, default=4
        Number of buffers when the parameters are optimized.
    theta, omega : array-like of shape (n_buffers,), optional
        Buffer decays in (0, 1) and output scales. When omitted they are
        optimized for ``n_rounds`` (scipy L-BFGS-B on the mean error
        ``sum_k c_k^2 * ||B||_F^2 / R`` with its exact gradient) and cached
        per ``(R, n_buffers)`` like :class:`OptimalFactorization`.
    cache : bool, default=True
        Use the on-disk cache for the optimized parameters.

    Attributes
    ----------
    theta, omega : ndarray of shape (n_buffers,)
        The parameters in use (decreasing ``theta``).
    sensitivity_squared : float
        ``sum_{k<R} c_k^2``: the first column of a lower-triangular Toeplitz
        matrix has the largest norm. ``O(R n_buffers)``.
    frobenius_B_squared : float
        ``sum_k (R - k) b_k^2`` with ``b = cumsum`` of the coefficients of
        ``C^{-1}``.

    Notes
    -----
    Streaming state: ``n_buffers`` arrays of ``shape``. The increment of
    round ``r`` is ``w_r = (C^{-1} z)_r``: ``w_r = z_r - sum_j omega_j s_j``
    then ``s_j <- theta_j s_j + w_r``. Optimized BLTs reach about 1.07 times
    the optimal mean error at ``R = 100..2000``, which is the best any
    Toeplitz ``C`` achieves under this sensitivity.

    References
    ----------
    Dvijotham, McMahan, Pillutla, Steinke, Thakurta (2024), "Efficient and
    near-optimal noise generation for streaming differential privacy",
    FOCS, arXiv:2404.16706.
    McMahan, Xu, Zhang (2024), "A hassle-free algorithm for private learning
    in practice: don't use tree aggregation, use BLTs", arXiv:2408.08868,
    Algorithms 2-3.
    """

    name = "blt"

    def __init__(self, n_rounds, n_buffers=4, theta=None, omega=None, cache=True):
        super().__init__(n_rounds)
        if (theta is None) != (omega is None):
            raise ValueError("give both theta and omega, or neither.")
        if theta is None:
            if isinstance(n_buffers, bool) or not isinstance(n_buffers, numbers.Integral):
                raise TypeError("n_buffers must be a positive integer.")
            if n_buffers < 1:
                raise ValueError("n_buffers must be a positive integer.")
            fit = _memory(cache).cache(_blt_optimize)
            theta, omega = fit(self.n_rounds, int(n_buffers))
        theta = np.atleast_1d(np.asarray(theta, dtype=float))
        omega = np.atleast_1d(np.asarray(omega, dtype=float))
        if theta.shape != omega.shape or theta.ndim != 1:
            raise ValueError("theta and omega must be 1-d arrays of equal length.")
        if np.any(theta <= 0) or np.any(theta >= 1):
            raise ValueError("theta (buffer decays) must lie in (0, 1).")
        self.theta = theta
        self.omega = omega
        self.n_buffers = theta.size
        self.cache = cache
        c, c_inv, _ = _blt_coefficients(theta, omega, self.n_rounds)
        if not np.all(np.isfinite(c_inv)):
            raise ValueError("C^{-1} overflows for these BLT parameters.")
        self.coefficients = c
        self.inverse_coefficients = c_inv
        b = np.cumsum(c_inv)
        k = np.arange(self.n_rounds)
        self.sensitivity_squared = float(c @ c)
        self.frobenius_B_squared = float(np.sum((self.n_rounds - k) * b * b))

    @property
    def C(self):
        """Dense lower-triangular Toeplitz ``C``, shape ``(R, R)``."""
        return _lower_toeplitz(self.coefficients)

    @property
    def B(self):
        """Dense lower-triangular Toeplitz ``B = A C^{-1}``, shape ``(R, R)``."""
        return _lower_toeplitz(np.cumsum(self.inverse_coefficients))

    def _make_stream(self, draw, shape):
        return _BLTStream(self.n_rounds, shape, draw, self.theta, self.omega)

    def __repr__(self):
        return f"BLTFactorization(n_rounds={self.n_rounds}, n_buffers={self.n_buffers})"
