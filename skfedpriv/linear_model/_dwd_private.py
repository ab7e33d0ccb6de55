"""Server-side math of the private genDWD updates (post-processing).

Algorithm 2 as published (one release per batch, the perturbed objective
minimized over a trust region) and the server's part of site-local Gaussian
(Newton steps on noisy sums). The sensitivities, the calibration and every
noise draw live in :mod:`skfedpriv.privacy._objective_perturbation`; the
site-local noise is added by the sites themselves
(:meth:`~skfedpriv.linear_model.DWDSites.noised_summary`), wherever they run.
The prefix-sum mechanisms ('local-tree', 'local-blt') sum the batches'
second-order models released continually by the sites
(:mod:`skfedpriv.privacy._continual_summaries`) and minimize the sum.

References
----------
.. [1] Guo et al. (2025), section 5, Algorithm 2, eqs. 41-45.
.. [2] Kifer, Smith, Thakurta (2012). Private convex empirical risk
   minimization and high-dimensional regression. COLT, Theorem 1
   (objective perturbation over a closed convex set).
"""

import math

import numpy as np
import scipy.sparse as sp
from scipy.optimize import brentq

from .._loss import as_loss
from ..privacy._continual_summaries import linearized_summary
from .._losses import penalty_mask
from ..privacy._objective_perturbation import summary_sensitivity
from ._dwd_sites import loss_message
from ._dwd_solver import _solve_psd


# -- Algorithm 2 as published -------------------------------------------------


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


def published_private_update(sites, theta, prior, calibrations, rng, *, loss, alpha,
                             fit_intercept, step_radius):
    """One release of Algorithm 2 (eq. 45), restricted to ``‖θ - θ_{b-1}‖ <= R``.

    Returns the new parameters and ``H̄_b`` (eq. 38) for the prior.
    """
    p1, n_models = theta.shape
    _, grad, curvature = sites.summaries(theta, loss_message(sites, loss), True)
    ridge = alpha * sites.weight_sum
    grad = grad + ridge * penalty_mask(p1, fit_intercept)[:, None] * theta
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


def local_gaussian_update(sites, theta, prior, first, sigma_unit, rng, *, online_steps, loss,
                          alpha, fit_intercept, clip_norm, step_radius, prior_noise_var=0.0):
    """One batch with site-local Gaussian perturbation of every summary.

    Each site adds ``N(0, (σ Δ)²)`` noise to every summary it sends
    (``sites.noised_summary``; Δ of
    :func:`~skfedpriv.privacy._objective_perturbation.summary_sensitivity`):
    the gradient sums, the curvature matrix (upper triangle) and, in the
    first batch, the Gram matrix. ``rng`` is the generator of sites that
    draw in this process. The server only post-processes the noisy sums.

    Returns the new parameters, the noisy ``J_b`` (unbiased, not projected:
    only the matrix of each Newton system is repaired) and the variance of
    the noise it carries per entry.
    """
    p1, n_models = theta.shape
    n_sites = sites.n_sites
    ridge = alpha * sites.weight_sum * penalty_mask(p1, fit_intercept)
    loss = as_loss(loss)
    q = loss_message(sites, loss)
    std = {kind: sigma_unit * summary_sensitivity(kind, loss, clip_norm)
           for kind in ("gradient", "curvature", "gram")}
    sigma_h = std["curvature"]

    def noisy_gradient(point):
        return sites.noised_summary("gradient", point, q, std["gradient"], rng) + ridge[:, None] * point

    def noisy_curvature(point):
        return sites.noised_summary("curvature", point, q, sigma_h, rng) + np.diag(ridge)[None]

    if first:
        gram = sites.noised_summary("gram", theta, q, std["gram"], rng)
        gram_noise_std = math.sqrt(n_sites) * std["gram"]
        majorizer = loss.curvature_bound * _project_psd(gram[None], gram_noise_std)[0] + np.diag(ridge)
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


# -- continual release of the linearized summaries ('local-tree', 'local-blt') --


_DENSE_ROWS = 4096


def _dense_blocks(X):
    """Row slices of a site's rows to densify one at a time (all rows of a
    dense ``X``)."""
    if not sp.issparse(X):
        return [slice(None)]
    return [slice(start, start + _DENSE_ROWS) for start in range(0, X.shape[0], _DENSE_ROWS)]


def continual_update(sites, theta, noise, linear, curvature, step, n_seen, *, q, alpha, fit_intercept):
    """One batch of the prefix-sum mechanisms: the sites' ``(a_b, J_b)`` at
    ``θ_{b-1}`` plus each site's correlated noise, added to the prefix sums;
    ``θ_b`` minimizes the sum of the batches' quadratic models plus the
    ridge (post-processing of the noisy prefix sums).

    ``sites`` are in this process (their rows in ``sites.parts``; CSR rows
    are densified ``_DENSE_ROWS`` rows at a time, as the per-row joint
    clipping of :func:`~skfedpriv.privacy._continual_summaries.linearized_summary`
    works on dense rows: ``(a, J)`` are sums over rows);
    ``noise`` is the sites' :class:`~skfedpriv.privacy._continual_summaries.
    SiteNoiseStreams` (sites that ``holds_noise_streams`` add their own
    increments: ``noise`` then describes their streams, it draws nothing); ``linear`` and ``curvature`` are the noisy prefix sums
    up to the previous batch (None on the first); ``step`` is the batch's
    index in the stream and ``n_seen`` the rows seen including it (public).

    Returns the new parameters, the noisy prefix sum of ``a`` and the noisy
    ``J_b`` (its increment of the curvature prefix sum).
    """
    if sites.holds_noise_streams:  # each site adds its own stream's increment
        a, increment = sites.continual_summary(theta, q, noise, step)
    else:
        a, J = rows_summary(sites.parts, theta, q, fit_intercept)
        noise_a, noise_J = noise.next()
        a, increment = a + noise_a, J + noise_J
    linear = (0.0 if linear is None else linear) + a
    summed = (0.0 if curvature is None else curvature) + increment
    theta = summed_model_minimizer(linear, summed, noise.prefix_variance(step), n_seen,
                                   alpha=alpha, fit_intercept=fit_intercept)
    return theta, linear, increment


def rows_summary(parts, theta, q, fit_intercept):
    """``(a, J)`` of :func:`~skfedpriv.privacy._continual_summaries.
    linearized_summary` summed over ``parts`` (``(X, Y, ...)`` tuples; CSR
    rows densified ``_DENSE_ROWS`` at a time)."""
    p1, n_models = theta.shape
    a, J = np.zeros_like(theta), np.zeros((n_models, p1, p1))
    for X, Y, *_ in parts:
        for rows in _dense_blocks(X):
            Xb = X[rows].toarray() if sp.issparse(X) else X
            part_a, part_J = linearized_summary(Xb, Y[rows], theta, q, fit_intercept)
            a, J = a + part_a, J + part_J
    return a, J


def summed_model_minimizer(linear, summed, noise_variance, n_seen, *, alpha, fit_intercept):
    """``θ`` minimizing the summed quadratic models ``θᵀ a + ½ θᵀ J θ`` plus
    the ridge, from noisy prefix sums (post-processing); ``noise_variance``
    is the variance per entry of the noise in ``summed``."""
    p1 = linear.shape[0]
    ridge = alpha * n_seen * penalty_mask(p1, fit_intercept)
    # curvature below the prefix noise's spectral norm is taken at that level
    system = _project_psd(summed, math.sqrt(noise_variance)) + np.diag(ridge)[None]
    return -_solve_psd(system, linear)
