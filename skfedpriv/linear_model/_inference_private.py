"""Coefficient inference under site-local Gaussian noise ('local-gaussian').

The published 'local-gaussian' fit stops after ``online_steps``
majorization steps from 0, short of the minimizer (on the paper's
two-Gaussian design at n = 20 000 its coefficients sit 25 % below the
target): an interval around it would not cover. With ``inference=True``
the fit is therefore refined from that pilot in :data:`CURVATURE_RELEASES`
stages. A stage opens with every site releasing, per one-vs-rest model,
its exact curvature ``Σ V_q''(u_i) x̄_i x̄_iᵀ`` at the current estimate
(noise ``σ Δ_H / κ``, ``κ =`` :data:`PRECISION`); the server repairs it
into the system ``A = [C̃]_F + αW P`` (eigenvalues floored at the noise's
spectral norm ``F``, :func:`~._dwd_private._project_psd`) and takes
:data:`GRADIENT_STEPS` steps ``θ ← θ - A⁻¹ (g̃(θ) + αW P θ)``, each on a
fresh gradient release (noise ``σ Δ_g``). The last stage also releases
the score outer products ``Σ V_q'(u_i)² x̄_i x̄_iᵀ`` (noise ``σ Δ_B / κ``;
the sensitivities in :mod:`skfedpriv.privacy._score_outer`). A release at
``κ`` times less noise per unit of sensitivity costs as much as ``κ²``
unit releases (:func:`inference_releases`); everything is charged, with
the pilot, as one Gaussian mechanism.

Why many gradient steps per curvature: where the noised curvature's
eigenvalues are below ``F`` the repair lifts them, a step removes only a
fraction ``h / F`` of the error along them, and three Newton rounds left
part of the pilot's error (coverage 60-77 % in some cells at n = 20 000).
The steps' fixed point is the minimizer of the noised gradient whatever
``A`` is: cheap gradient steps drive the pilot's error down geometrically,
and the damped steps average the gradient noise.

The variance is noise-aware, from released numbers only. Linearizing the
gradient at the non-private minimizer ``θ̂`` (``G(θ) ≈ H (θ - θ̂)``), the
privacy error ``e = θ - θ̂`` of a step of stage ``s`` is
``e ← M_s e - A_s⁻¹ ξ`` with ``M_s = I - A_s⁻¹ H`` and ``ξ`` the summed
gradient noise (covariance ``S_g = n_sites σ_g² I``), so

``V ← M_s V M_sᵀ + A_s⁻¹ S_g A_s⁻¹``

over every step from ``V = 0`` (the pilot's own error is left out: the
steps remove it; :func:`_unresolved` withholds the interval where they
may not have). ``H`` is known only through the last release
``C̃ = H + Ξ``, whose noise law is known: the covariance is averaged over
``H = [C̃ - Ξ_d]_0`` for draws ``Ξ_d`` of that law
(:func:`privacy_error_covariance`; a plug-in ``H`` under-stated the
spread by about 25 % at ε = 4, since ``M_s`` is the same noisy matrix at
every step of a stage). The released covariance adds the sampling
sandwich ``A⁻¹ B̃ A⁻¹`` with the noisy score outer products ``B̃`` and the
last system for ``H``. :meth:`confint(method='bootstrap')
<skfedpriv.linear_model._inference.CoefficientInferenceMixin.confint>`
replays the whole refinement instead (:mod:`._inference_bootstrap`). The
target is the population minimizer at the same
``alpha`` **on clipped rows**: a ``clip_norm`` below the rows'
norms changes the estimand.

References
----------
.. [1] Huber, P. J. (1967); White, H. (1982): the sandwich.
.. [2] Guo et al. (2025), eq. 5 (the objective), Proposition 2 (normality).
"""

import math
import warnings

import numpy as np

from .._losses import penalty_mask
from ..privacy._continual_summaries import NoiseDominatesWarning
from ..privacy._mechanisms import symmetric_gaussian_noise
from ..privacy._objective_perturbation import summary_sensitivity
from ..privacy._score_outer import exact_curvature_sensitivity, score_outer_sensitivity
from ._dwd_private import _project_psd
from ._dwd_sites import loss_message
from ._inference import propagate_covariance, score_covariance
from ._inference_sites import InferenceSummary, site_inference_summary
from ._dwd_solver import _solve_psd

__all__ = ["CURVATURE_RELEASES", "GRADIENT_STEPS", "INTEGRATION_DRAWS", "PRECISION", "RESOLVED",
           "ROUNDS", "PrivateRefinement", "curvature_noise_term", "inference_releases",
           "noised_inference_summary", "privacy_error_covariance", "private_newton_inference",
           "private_refinement", "symmetric_draws"]

#: Curvature releases (stages) of the refinement after the 'local-gaussian' pilot.
CURVATURE_RELEASES = 2
#: Gradient-only steps on each released curvature.
GRADIENT_STEPS = 10
#: Refinement steps in all (``n_iter_`` counts them).
ROUNDS = CURVATURE_RELEASES * GRADIENT_STEPS
#: The curvature and score outer products get ``1/PRECISION`` of the
#: gradient's noise per unit of sensitivity (each costs ``PRECISION²``
#: unit releases). At n = 20 000, p = 5, ε = 1, PRECISION = 4 widened the
#: intervals and left more bias than 3 (the gradients get noisier).
PRECISION = 3.0
#: The largest error the steps may leave of the pilot's, per parameter, as
#: a fraction of the root mean standard error (:func:`_unresolved`): above
#: it the Wald covariance is not published (NaN).
RESOLVED = 0.5
#: Draws of the quadrature over the curvature noise (:func:`privacy_error_covariance`).
INTEGRATION_DRAWS = 200


def inference_releases(n_models):
    """Unit-sensitivity releases the refinement adds to the stream's count:
    per model ``ROUNDS`` gradients, and ``CURVATURE_RELEASES`` curvatures
    plus one score outer product at ``PRECISION²`` each."""
    return n_models * (ROUNDS + PRECISION**2 * (CURVATURE_RELEASES + 1))


def _site_matrix_noise(std, n_sites, p1, n_models, rng):
    """The sum of ``n_sites`` sites' symmetric noise, one matrix per model."""
    return sum(np.stack([symmetric_gaussian_noise(p1, std, random_state=rng)
                         for _ in range(n_models)]) for _ in range(n_sites))


def noised_inference_summary(sites, Theta, loss, curvature_std, outer_std, rng):
    """The sites' exact curvature and (``outer_std`` not None) score outer
    products at ``Theta``, each site adding its own symmetric noise.

    ``sites`` hold their rows in this process (``sites.parts``, prepared and
    clipped); ``rng`` is their generator. Returns ``(curvature, outer)``,
    each of shape ``(K, p1, p1)`` (``outer`` None when not asked for).
    """
    p1, n_models = Theta.shape
    total = None
    for X, Y, weights in sites.parts:
        part = site_inference_summary(X, Y, weights, Theta, sites.fit_intercept,
                                      loss.derivative, loss.curvature)
        total = part if total is None else total + part
    curvature = total.curvature + _site_matrix_noise(curvature_std, sites.n_sites, p1, n_models,
                                                     rng)
    if outer_std is None:
        return curvature, None
    return curvature, total.score_outer + _site_matrix_noise(outer_std, sites.n_sites, p1,
                                                             n_models, rng)


def curvature_noise_term(cov, entry_var):
    """``Cov(Ξ e)`` for a symmetric noise ``Ξ`` of entry variance
    ``entry_var`` (upper triangle i.i.d.) independent of ``e`` with
    covariance ``cov`` (K, p1, p1): ``s² (tr V I + V - diag V)``."""
    eye = np.eye(cov.shape[-1])[None]
    trace = np.trace(cov, axis1=1, axis2=2)[:, None, None]
    diagonal = np.diagonal(cov, axis1=1, axis2=2)[:, :, None] * eye
    return entry_var * (trace * eye + cov - diagonal)


class PrivateRefinement:
    """What the refinement released, and the estimate and covariance the
    server computed from it (post-processing): everything
    :mod:`._inference_bootstrap` simulates from.

    Attributes
    ----------
    pilot : ndarray of shape (p1, K)
        The 'local-gaussian' estimate the refinement started from.
    theta : ndarray of shape (p1, K)
        The refined estimate.
    curvatures : list of ndarray of shape (K, p1, p1)
        Each stage's summed noised curvature (no ridge, not repaired).
    curvature_std : float
        The noise std of one entry of one site's curvature release.
    grad_std : float
        The noise std of one entry of one site's gradient release.
    n_sites : int
    ridge : ndarray of shape (p1,)
        ``α W`` times the penalty mask.
    steps : int
        Gradient steps per stage.
    sampling_cov : ndarray of shape (K, p1, p1)
        The sandwich ``A⁻¹ B̃ A⁻¹`` (sampling error of the non-private fit).
    cov : ndarray of shape (K, p1, p1)
        The Wald covariance (NaN for models :func:`_unresolved` withholds).
    """

    def __init__(self, **fields):
        self.__dict__.update(fields)

    @property
    def floor_std(self):
        """Entry std of the summed curvature noise (the repair's scale)."""
        return math.sqrt(self.n_sites) * self.curvature_std

    def system(self, curvature):
        """``[C̃]_F + αW P``: the repaired system a stage solves."""
        return _project_psd(curvature, self.floor_std) + np.diag(self.ridge)[None]


def private_refinement(sites, theta, sigma, rng, *, loss, alpha, fit_intercept, clip_norm):
    """The refined private estimate, its noise-aware covariance and what
    was released on the way (module doc).

    Parameters
    ----------
    sites : SiteData
        One batch's sites in this process, prepared with ``clip_norm``.
    theta : ndarray of shape (p1, K)
        The pilot (the 'local-gaussian' first batch's estimate).
    sigma : float
        The stream's unit noise multiplier (its charge counts
        :func:`inference_releases`).
    rng : numpy.random.Generator
        The sites' generator.
    loss, alpha, fit_intercept, clip_norm
        The estimator's settings.

    Returns
    -------
    refinement : PrivateRefinement
    """
    p1, n_models = theta.shape
    message = loss_message(sites, loss)
    penalty = alpha * penalty_mask(p1, fit_intercept)
    out = PrivateRefinement(
        pilot=theta.copy(), curvatures=[], n_sites=sites.n_sites, steps=GRADIENT_STEPS,
        ridge=penalty * sites.weight_sum,
        grad_std=sigma * summary_sensitivity("gradient", loss, clip_norm),
        curvature_std=sigma / PRECISION * exact_curvature_sensitivity(loss, clip_norm))
    outer_std = sigma / PRECISION * score_outer_sensitivity(loss, clip_norm)
    for stage in range(CURVATURE_RELEASES):
        last = stage == CURVATURE_RELEASES - 1
        curvature, outer = noised_inference_summary(sites, theta, loss, out.curvature_std,
                                                    outer_std if last else None, rng)
        out.curvatures.append(curvature)
        system = out.system(curvature)
        for step in range(GRADIENT_STEPS):
            grad = sites.noised_summary("gradient", theta, message, out.grad_std, rng)
            if last and step == 0:
                # the score sum is the gradient sum (rows weigh one): no new release
                summary = InferenceSummary(curvature, _project_psd(outer), grad, sites.weight_sum)
                out.sampling_cov = propagate_covariance(
                    None, system, None, score_covariance(summary, theta, penalty))
            theta = theta - _solve_psd(system, grad + out.ridge[:, None] * theta)
    out.theta = theta
    out.cov = privacy_error_covariance(out) + out.sampling_cov
    _withhold_unresolved(out)
    return out


def symmetric_draws(std, n_draws, p1, rng):
    """``n_draws`` symmetric ``p1 × p1`` matrices with i.i.d. ``N(0, std²)``
    upper triangles (the law of a summed curvature noise, for simulation)."""
    upper = np.triu(rng.normal(scale=std, size=(n_draws, p1, p1)))
    return upper + np.triu(upper, 1).transpose(0, 2, 1)


def privacy_error_covariance(refinement, n_draws=INTEGRATION_DRAWS):
    """Covariance of the refinement's privacy error ``θ̃ - θ̂`` (module doc).

    Given the curvature ``H``, each gradient step maps the error by
    ``M_s = I - A_s⁻¹ H`` and adds ``A_s⁻¹ ξ``: ``V ← M_s V M_sᵀ + A_s⁻¹ S_g A_s⁻¹``
    over every step from ``V = 0``. ``H`` is known only through the last
    release ``C̃ = H + Ξ``: the covariance is averaged over
    ``H = [C̃ - Ξ_d]_0 + αW P``, ``Ξ_d`` drawn from the known noise law
    (``n_draws`` draws of a fixed-seed generator: a quadrature over
    released numbers, no privacy noise).

    Returns
    -------
    cov : ndarray of shape (K, p1, p1)
    """
    quadrature = np.random.default_rng(0)
    curvature = refinement.curvatures[-1]
    n_models, p1, _ = curvature.shape
    eye, ridge = np.eye(p1), np.diag(refinement.ridge)
    gradient_var = refinement.n_sites * refinement.grad_std**2
    inverses = [np.linalg.inv(refinement.system(c)) for c in refinement.curvatures]
    out = np.empty_like(curvature)
    for k in range(n_models):
        noise = symmetric_draws(refinement.floor_std, n_draws, p1, quadrature)
        hessian = _project_psd(curvature[k] - noise)
        cov = np.zeros((n_draws, p1, p1))
        for inverse in inverses:
            carried = eye - inverse[k] @ (hessian + ridge)
            added = gradient_var * inverse[k] @ inverse[k]
            for _ in range(refinement.steps):
                cov = carried @ cov @ carried.transpose(0, 2, 1) + added
        out[k] = cov.mean(axis=0)
    return out


def private_newton_inference(sites, theta, sigma, rng, *, loss, alpha, fit_intercept, clip_norm):
    """``(theta, curvature, cov)`` of :func:`private_refinement`: the refined
    estimate, the last stage's noised curvature and the Wald covariance."""
    out = private_refinement(sites, theta, sigma, rng, loss=loss, alpha=alpha,
                             fit_intercept=fit_intercept, clip_norm=clip_norm)
    return out.theta, out.curvatures[-1], out.cov


def _withhold_unresolved(out):
    """NaN the Wald covariance of the models :func:`_unresolved` flags, with
    a warning."""
    unresolved = _unresolved(out.curvatures[-1], out.floor_std, out.theta - out.pilot, out.cov)
    if unresolved.any():
        out.cov[unresolved] = np.nan
        warnings.warn(NoiseDominatesWarning(
            "mechanism='local-gaussian', inference=True: the sites' noised curvature is "
            "below its noise level for some models, so the refined estimate may not have "
            "converged and an interval around it would under-cover; their standard "
            "errors are NaN. More rows per site, fewer sites or features, or a larger "
            "epsilon resolve it."),
            stacklevel=7)


def _unresolved(curvature, noise_std, moved, cov):
    """Models whose pilot error the steps may not have removed (from
    released sums only: post-processing).

    With ``m`` the mean eigenvalue of the last noised curvature (trace /
    p1) and ``F = 2 noise_std sqrt(p1)`` the repair floor of
    :func:`~._dwd_private._project_psd`, a step removes about a fraction
    ``m / max(F, m)`` of the error: after :data:`ROUNDS` steps a fraction
    ``r = (1 - m / max(F, m))^ROUNDS`` of the pilot's error is left, and
    the estimate ``moved`` from the pilot by ``1 - r`` of it. The error
    left, ``r / (1 - r)`` times the move, per parameter, is compared with
    the root mean standard error: above :data:`RESOLVED` times it, the
    interval would be centred off target.
    """
    p1 = curvature.shape[-1]
    mean_eigenvalue = np.trace(curvature, axis1=1, axis2=2) / p1
    level = np.maximum(2.0 * noise_std * math.sqrt(p1), mean_eigenvalue)
    with np.errstate(divide="ignore", invalid="ignore"):
        left = np.where(mean_eigenvalue > 0, (1.0 - mean_eigenvalue / level) ** ROUNDS, 1.0)
        error = np.linalg.norm(moved, axis=0) * left / (1.0 - left)
    rms_se = np.sqrt(np.trace(cov, axis1=1, axis2=2) / p1)
    return ~(error / math.sqrt(p1) <= RESOLVED * rms_se)
