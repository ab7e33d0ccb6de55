"""Private genDWD updates: Algorithm 2 as published, and site-local Gaussian.

Every bound below comes from the enforced clipping of the augmented rows,
``‖x̄_i‖₂ <= C2`` (``clip_norm``), and from the genDWD loss itself:
``|V_q'| <= 1`` and ``0 <= Ṽ_q'' <= (q+1)²/q``. Rows weigh one.

References
----------
.. [1] Guo et al. (2025), section 5, Algorithm 2, Conditions 1-2, eqs. 41-45,
   proof of Theorem 2 (eqs. 53-69).
.. [2] Kifer, Smith, Thakurta (2012). Private convex empirical risk
   minimization and high-dimensional regression. COLT, Theorem 1
   (objective perturbation over a closed convex set).
"""

import functools
import math

import numpy as np
from scipy.optimize import brentq

from .._losses import gendwd_curvature_bound
from ..privacy import (
    gaussian_sigma,
    laplace_noise,
    gaussian_noise,
    symmetric_gaussian_noise,
)
from .._param_validation import Registry
from ._dwd_solver import _ridge_mask, _solve_psd, augmented_gram

# -- bounds ------------------------------------------------------------------


def gradient_sensitivity(clip_norm):
    """L2 change of a gradient sum when one row is replaced: ``2 C2``."""
    return 2.0 * clip_norm


def curvature_sensitivity(q, clip_norm):
    """Frobenius change of ``Σ Ṽ''(u_i) x̄_i x̄_iᵀ`` when one row is replaced.

    Both rank-one terms are PSD with Frobenius norm ``<= (q+1)²/q C2²``; for
    PSD ``A, B``, ``‖A - B‖_F² = ‖A‖² + ‖B‖² - 2 tr(AB) <= ‖A‖² + ‖B‖²``.
    The upper triangle (what the symmetric noise perturbs) changes by at
    most as much.
    """
    return math.sqrt(2.0) * gendwd_curvature_bound(q) * clip_norm**2


def gram_sensitivity(clip_norm):
    """Frobenius change of ``Σ x̄_i x̄_iᵀ`` when one row is replaced."""
    return math.sqrt(2.0) * clip_norm**2


def clip_augmented_rows(X, clip_norm, fit_intercept):
    """Scale rows so that ``‖(1, x_i)‖₂ <= clip_norm`` (or ``‖x_i‖₂`` without
    intercept). Rows inside the ball are unchanged."""
    from ..privacy import clip_rows

    if fit_intercept:
        if clip_norm <= 1.0:
            raise ValueError(
                "clip_norm bounds the norm of (1, x) when fit_intercept=True and "
                f"must be > 1, got {clip_norm!r}."
            )
        return clip_rows(X, math.sqrt(clip_norm**2 - 1.0))
    return clip_rows(X, clip_norm)


# -- Algorithm 2 as published -------------------------------------------------


class PublishedCalibration:
    """Noise of Algorithm 2 for one release (eqs. 61, 64, Condition 2).

    Parameters
    ----------
    mechanism : {'laplace', 'gaussian'}
    epsilon, delta : float
        Budget of this release for one class model.
    q, alpha : float
    clip_norm : float
        C2; the L1 bound is ``C1 = sqrt(p1) C2``.
    step_radius : float
        R, the enforced bound of ``‖θ_b - θ_{b-1}‖`` that replaces the
        proof's ``C_{p-1}/sqrt(N_{b-1})`` (an O_p(1) quantity, not a bound).
    rho : float or None
        The paper's ρ; None picks the smallest value with Condition 2 and
        ``T2 <= epsilon / 2``.
    p1 : int
        Number of parameters.
    n_seen : float
        Rows seen up to and including this batch; ``Σ_j J_j ⪰ n_seen λ I``.
    """

    def __init__(self, mechanism, epsilon, delta, *, q, alpha, clip_norm, step_radius, rho, p1, n_seen):
        bound = gendwd_curvature_bound(q)
        c2 = clip_norm
        c1 = math.sqrt(p1) * c2
        floor = n_seen * alpha
        # T2 <= min(1/2, eps/2) <=> bound C2² / (Nλ + ρ) <= exp(min(1, eps)/4) - 1
        needed = bound * c2**2 / math.expm1(min(1.0, epsilon) / 4.0)
        self.rho = max(0.0, needed - floor) if rho is None else float(rho)
        self.t2 = 2.0 * math.log1p(bound * c2**2 / (floor + self.rho)) if floor + self.rho > 0 else math.inf
        self.t1 = 2.0 * c1 + 2.0 * bound * c1 * c2 * step_radius
        self.delta_1 = 2.0 * c2 + 2.0 * bound * c2**2 * step_radius
        self.mechanism = mechanism
        if mechanism == "laplace":
            if not epsilon > self.t2:
                raise ValueError(
                    f"No valid Laplace scale: epsilon per class model ({epsilon:.4g}) must "
                    f"exceed T2 = {self.t2:.4g} (eq. 61). Increase rho (or alpha, or epsilon), "
                    "or leave rho=None."
                )
            self.scale = self.t1 / (epsilon - self.t2)
        else:
            if self.t2 > epsilon / 2.0 * (1 + 1e-12):
                raise ValueError(
                    f"The Gaussian proof (eq. 68) needs T2 = {self.t2:.4g} <= epsilon/2 = "
                    f"{epsilon / 2:.4g} per class model. Increase rho (or alpha, or epsilon), "
                    "or leave rho=None."
                )
            log_inv = math.log(1.0 / delta)
            self.scale = self.delta_1 * (math.sqrt(2 * log_inv) + math.sqrt(2 * log_inv + epsilon)) / epsilon

    def draw(self, shape, rng):
        if self.mechanism == "laplace":
            return laplace_noise(self.scale, shape, random_state=rng)
        return gaussian_noise(self.scale, shape, random_state=rng)


def trust_region_step(matrix, gradient, radius):
    """Minimize ``½ dᵀ P d + gᵀ d`` subject to ``‖d‖ <= radius``.

    ``P`` is symmetric positive definite. The solution is
    ``d = -(P + μ I)^{-1} g`` with the smallest ``μ >= 0`` that puts it in
    the ball.
    """
    eigenvalues, vectors = np.linalg.eigh(matrix)
    coords = vectors.T @ gradient

    def norm(mu):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.linalg.norm(coords / (eigenvalues + mu))

    if np.min(eigenvalues) > 0 and norm(0.0) <= radius:
        mu = 0.0
    else:
        high = np.linalg.norm(gradient) / radius
        mu = brentq(lambda m: norm(m) - radius, 0.0, high, xtol=1e-14, rtol=1e-12)
    step = -vectors @ (coords / (eigenvalues + mu))
    length = np.linalg.norm(step)
    if length > radius:  # rounding
        step *= radius / length
    return step


def published_private_update(sites, theta, prior, calibrations, rng, *, q, alpha, fit_intercept, step_radius):
    """One release of Algorithm 2 (eq. 45), restricted to ``‖θ - θ_{b-1}‖ <= R``.

    Returns the new parameters and ``H̄_b`` (eq. 38) for the prior.
    """
    p1, n_models = theta.shape
    _, grad, curvature = sites.summaries(theta, q, True)
    ridge = alpha * sites.weight_sum
    grad = grad + ridge * _ridge_mask(p1, fit_intercept)[:, None] * theta
    h_bar = curvature + ridge * np.eye(p1)[None]
    summed = h_bar if prior is None else prior + h_bar
    new = np.empty_like(theta)
    for k, calibration in enumerate(calibrations):
        xi = calibration.draw(p1, rng)
        # Q(θ) of eq. 41 in d = θ - θ_{b-1}: ½ dᵀ(ΣJ + ρI)d + dᵀ(∇L_b + ρ θ_{b-1} + ξ)
        matrix = summed[k] + calibration.rho * np.eye(p1)
        linear = grad[:, k] + calibration.rho * theta[:, k] + xi
        new[:, k] = theta[:, k] + trust_region_step(matrix, linear, step_radius)
    return new, h_bar


# -- site-local Gaussian ------------------------------------------------------


def local_gaussian_releases(n_models, online_steps, first):
    """Number of unit-sensitivity Gaussian releases a batch makes.

    Each class model releases ``online_steps`` gradients and one curvature
    matrix; the first batch also releases the Gram matrix (shared by the
    models).
    """
    return n_models * (online_steps + 1) + (1 if first else 0)


#: Gaussian calibrations of 'local-gaussian': name -> ``(epsilon, delta,
#: sensitivity) -> sigma``: the exact analytic Gaussian mechanism (Balle &
#: Wang 2018), or the classic / zCDP conversions.
CALIBRATIONS = Registry("calibration", {
    name: functools.partial(gaussian_sigma, method=name)
    for name in ("analytic", "classic", "zcdp")
})


def local_gaussian_sigma(epsilon, delta, n_releases, calibration):
    """Noise multiplier of a unit-sensitivity release, for ``n_releases``
    composed adaptively: together one Gaussian mechanism of L2 sensitivity
    ``sqrt(n_releases)``."""
    return CALIBRATIONS[calibration](epsilon, delta, math.sqrt(n_releases))


def _project_psd(matrices, noise_std=0.0):
    """PSD repair of noisy symmetric matrices (post-processing).

    Eigenvalues are floored at ``2 noise_std sqrt(d)``, the spectral norm of
    a symmetric Gaussian noise matrix with entry std ``noise_std`` (Wigner):
    curvature below the noise level cannot be told apart from noise, and is
    taken at the noise level (small, safe steps). ``noise_std=0`` gives the
    nearest PSD matrix.
    """
    eigenvalues, vectors = np.linalg.eigh(matrices)
    floor = 2.0 * noise_std * math.sqrt(matrices.shape[-1])
    kept = np.maximum(eigenvalues, floor)
    return np.einsum("kij,kj,klj->kil", vectors, kept, vectors)


def local_gaussian_update(sites, theta, prior, first, sigma_unit, rng, *, n_sites, online_steps, q, alpha, fit_intercept, clip_norm, step_radius, prior_noise_var=0.0):
    """One batch with site-local Gaussian perturbation of every summary.

    Each site adds ``N(0, (σ Δ)²)`` noise to every summary it sends: the
    gradient sums (Δ = ``2 C2``) and the curvature matrix (upper triangle,
    Δ = ``sqrt(2) (q+1)²/q C2²``), and in the first batch the Gram matrix
    (Δ = ``sqrt(2) C2²``). The server only post-processes the noisy sums.

    Returns the new parameters, the noisy ``J_b`` (unbiased, not projected:
    only the matrix of each Newton system is repaired) and the variance of
    the noise it carries per entry.
    """
    p1, n_models = theta.shape
    ridge = alpha * sites.weight_sum * _ridge_mask(p1, fit_intercept)
    sigma_g = sigma_unit * gradient_sensitivity(clip_norm)
    sigma_h = sigma_unit * curvature_sensitivity(q, clip_norm)

    def site_noise(draw):
        return sum(draw() for _ in range(n_sites))

    # Sites that draw their own noise (separate processes, e.g. Flower
    # clients) expose ``noised_summary(kind, point, q, std)``: the sum over
    # sites of each site's summary plus its own N(0, std²) noise.
    site_noised = getattr(sites, "noised_summary", None)

    def noisy_gradient(point):
        if site_noised is not None:
            return site_noised("gradient", point, q, sigma_g) + ridge[:, None] * point
        _, grad, _ = sites.summaries(point, q, False)
        grad = grad + site_noise(lambda: gaussian_noise(sigma_g, (p1, n_models), random_state=rng))
        return grad + ridge[:, None] * point

    def noisy_curvature(point):
        if site_noised is not None:
            return site_noised("curvature", point, q, sigma_h) + np.diag(ridge)[None]
        _, _, curvature = sites.summaries(point, q, True)
        noise = site_noise(lambda: np.stack([
            symmetric_gaussian_noise(p1, sigma_h, random_state=rng) for _ in range(n_models)
        ]))
        return curvature + noise + np.diag(ridge)[None]

    if first:
        if site_noised is not None:
            gram = site_noised("gram", theta, q, sigma_unit * gram_sensitivity(clip_norm))
        else:
            gram = sum(
                augmented_gram(X, w, fit_intercept) for X, _, w in sites.parts
            ) + site_noise(lambda: symmetric_gaussian_noise(p1, sigma_unit * gram_sensitivity(clip_norm), random_state=rng))
        gram_noise_std = math.sqrt(n_sites) * sigma_unit * gram_sensitivity(clip_norm)
        majorizer = gendwd_curvature_bound(q) * _project_psd(gram[None], gram_noise_std)[0] + np.diag(ridge)
        system = np.broadcast_to(majorizer, (n_models, p1, p1))
        for _ in range(online_steps):  # majorization steps from θ_0
            theta = theta - _solve_psd(system, noisy_gradient(theta))
        return theta, noisy_curvature(theta), n_sites * sigma_h**2
    curvature = noisy_curvature(theta)
    # the noisy sums are unbiased: keep them raw in the prior (noise grows like
    # sqrt(b), the signal like b) and repair only the matrix that is solved
    total_noise_std = math.sqrt(prior_noise_var + n_sites * sigma_h**2)
    system = _project_psd(curvature + prior, total_noise_std) + np.diag(ridge)[None]
    start = theta
    for _ in range(online_steps):  # Newton steps on the renewable equation (30)
        residual = np.einsum("kij,jk->ik", prior, theta - start) + noisy_gradient(theta)
        # a trust region keeps a step on a poor (q=1: zero-curvature) model bounded
        theta = theta + np.stack([
            trust_region_step(system[k], residual[:, k], step_radius) for k in range(n_models)
        ], axis=1)
    return theta, curvature, n_sites * sigma_h**2
