"""Coefficient inference under site-local Gaussian noise ('local-gaussian').

The published 'local-gaussian' fit stops after ``online_steps``
majorization steps from 0, short of the minimizer (on the paper's
two-Gaussian design at n = 20 000 its coefficients sit 25 % below the
target): an interval around it would not cover. With ``inference=True``
the fit is therefore refined from that pilot in :data:`CURVATURE_RELEASES`
stages. A stage opens with every site releasing, per one-vs-rest model,
its exact curvature ``Σ V_q''(u_i) x̄_i x̄_iᵀ`` at the current estimate
(noise ``σ Δ_H / κ_s``, ``κ_s`` of :data:`STAGE_PRECISION`); the server
repairs it into the system ``A_s = [C̃_s]_F + αW P`` (eigenvalues floored
at the noise's spectral norm ``F``, :func:`~._dwd_private._project_psd`)
and takes the stage's :data:`GRADIENT_STEPS` steps ``θ ← θ - (d A_s)⁻¹ (g̃(θ) + αW P θ)``,
each on a fresh gradient release (noise ``σ Δ_g``), the damping ``d``
doubled when the released gradient grows (:func:`safeguarded_step`: a
curvature taken short of the minimizer can be below the curvature there,
and undamped steps diverge). The last stage also releases the score
outer products ``Σ V_q'(u_i)² x̄_i x̄_iᵀ`` (noise ``σ Δ_B /`` :data:`PRECISION`;
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
and the damped steps average the gradient noise. The first stages only
set the steps' scale (low precision); the last, at a point near the
minimizer, is precise: it is the variance's ``H``.

The variance is noise-aware, from released numbers only. Linearizing the
gradient at the non-private minimizer ``θ̂`` (``G(θ) ≈ H (θ - θ̂)``), the
privacy error ``e = θ - θ̂`` of a step is ``e ← M e - (d A_s)⁻¹ ξ`` with
``M = I - (d A_s)⁻¹ H`` and ``ξ`` the summed gradient noise (covariance
``S_g = n_sites σ_g² I``), so

``V ← M V Mᵀ + (d A_s)⁻¹ S_g (d A_s)⁻¹``

over every step from ``V = 0``. The pilot's own error is not noise: what
the steps leave of it is a bias, bounded from released numbers in
:mod:`._inference_residual`; the published covariance adds the bound's
square to each parameter's variance and the intervals are bias-aware
(``θ̃ ± cv(b / s) s``, :func:`~._inference_residual.bias_aware_intervals`),
or both are withheld where the bound is above :data:`RESOLVED` standard
errors (:func:`_withhold_unresolved`).
``H`` is unknown: the plug-in ``Ĥ`` (:meth:`PrivateRefinement.hessian`)
is the spread-matching shrinkage of the last released curvature towards
its mean eigenvalue (:mod:`._inference_private_curvature`), plus the
ridge. The nearest PSD matrix of the release, used before, took the
directions where the noise pushed its eigenvalues down as nearly flat,
and over-stated the variance at ε = 1 (SE / SD 1.4-1.7;
benchmarks/README.md, "Calibrating the variance at eps = 1"). The
released covariance adds the sampling sandwich ``Ĥ⁻¹ B̃ Ĥ⁻¹`` with the
noisy score outer products ``B̃`` and the same ``Ĥ``, its eigenvalues
floored at :data:`~._inference_private_curvature.SANDWICH_FLOOR` noise
stds (the lifted system ``A`` in its place under-stated the sampling part
by half at ε = 1). :meth:`confint(method='bootstrap')
<skfedpriv.linear_model._inference.CoefficientInferenceMixin.confint>`
replays the whole refinement instead (:mod:`._inference_bootstrap`). The
target is the population minimizer at the same ``alpha`` **on clipped
rows**: a ``clip_norm`` below the rows' norms changes the estimand.

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
from ._inference import propagate_covariance, score_covariance, standard_errors
from ._inference_private_curvature import SANDWICH_FLOOR, shrunk_curvature
from ._inference_residual import bias_aware_intervals, residual_bound
from ._inference_sites import InferenceSummary, site_inference_summary

__all__ = ["CURVATURE_RELEASES", "GRADIENT_STEPS", "PRECISION", "RESOLVED", "STAGE_PRECISION",
           "ROUNDS", "GROWTH", "PrivateRefinement", "inference_releases",
           "noised_inference_summary", "privacy_error_covariance", "private_refinement",
           "safeguarded_step"]

#: Each stage's curvature precision ``κ_s``: its curvature gets ``1/κ_s`` of
#: the gradient's noise per unit of sensitivity and costs ``κ_s²`` unit
#: releases. The first stages only set the step's scale (the safeguard of
#: :func:`safeguarded_step` covers a poor one); the last one is the
#: variance's ``H``. Two stages at (3, 3) left the variance's ``H`` and
#: ``B`` at a point short of the minimizer (q = 4, 4:1 classes: the
#: sandwich 7 times too large without noise).
STAGE_PRECISION = (1.5, 1.5, 5.0)
#: Curvature releases (stages) of the refinement after the 'local-gaussian' pilot.
CURVATURE_RELEASES = len(STAGE_PRECISION)
#: Gradient-only steps on each stage's released curvature (one entry per
#: stage of :data:`STAGE_PRECISION`; each step is one gradient release).
GRADIENT_STEPS = (10, 10, 10)
#: Refinement steps (gradient releases) in all (``n_iter_`` counts them).
ROUNDS = sum(GRADIENT_STEPS)
#: The score outer products (released with the last curvature) get
#: ``1/PRECISION`` of the gradient's noise per unit of sensitivity.
PRECISION = 3.0
#: A gradient (in the system's norm) more than this many times the smallest
#: of its stage means the steps overshoot: they are halved from then on.
GROWTH = 2.0
#: The largest bound on the pilot's residual error
#: (:mod:`._inference_residual`) a parameter may have, in its standard
#: errors, for the model's covariance (widened by the bound) and its
#: bias-aware intervals to be published; above it in some parameter they
#: are NaN. At 8 a bias-aware 95 % interval is at most ``cv(8) / 1.96 =
#: 4.9`` times the noise-aware one (benchmarks/README.md, "Private
#: intervals": 2, 4, 8 and 16 measured).
RESOLVED = 8.0


def inference_releases(n_models):
    """Unit-sensitivity releases the refinement adds to the stream's count:
    per model one gradient per step of the plan (:data:`GRADIENT_STEPS`,
    ``ROUNDS`` in all), the stages' curvatures at ``κ_s²`` each
    (:data:`STAGE_PRECISION`) and one score outer product at
    ``PRECISION²``. How the steps are spread over the stages does not
    change it."""
    return n_models * (sum(GRADIENT_STEPS) + sum(k**2 for k in STAGE_PRECISION) + PRECISION**2)


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
    curvature_stds : list of float
        Each stage's noise std of one entry of one site's curvature release.
    grad_std : float
        The noise std of one entry of one site's gradient release.
    n_sites : int
    ridge : ndarray of shape (p1,)
        ``α W`` times the penalty mask.
    steps : tuple of int
        Each stage's gradient steps (:data:`GRADIENT_STEPS`).
    damping : list of ndarray of shape (steps[s], K)
        Per stage, the factor each step's system was multiplied by
        (:func:`safeguarded_step`).
    score_cov : ndarray of shape (K, p1, p1)
        ``B̃``: the noisy score covariance (the released score outer
        products made PSD, with the penalty's cross terms from the released
        gradient; :func:`~._inference.score_covariance`).
    sampling_cov : ndarray of shape (K, p1, p1)
        The sandwich ``Ĥ⁻¹ B̃ Ĥ⁻¹`` (sampling error of the non-private fit;
        ``Ĥ`` of :meth:`hessian`, floored).
    residual_bound : ndarray of shape (K, p1)
        The bound on the pilot's error left in each parameter
        (:func:`~._inference_residual.residual_bound`).
    std_err : ndarray of shape (K, p1)
        The noise-aware standard errors (before the widening); NaN for the
        models :func:`_withhold_unresolved` withholds.
    cov : ndarray of shape (K, p1, p1)
        The published covariance: the noise-aware covariance plus
        ``diag(residual_bound²)`` (a bound on the mean squared error); NaN
        for the models :func:`_withhold_unresolved` withholds.
    """

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def intervals(self, level=0.95):
        """The bias-aware intervals ``θ̃ ± cv(b / s) s`` of every parameter
        (:func:`~._inference_residual.bias_aware_intervals`; NaN where
        withheld), shape ``(K, p1, 2)``."""
        return bias_aware_intervals(self.theta.T, self.std_err, self.residual_bound, level)

    def floor_std(self, stage=-1):
        """Entry std of a stage's summed curvature noise (the repair's scale)."""
        return math.sqrt(self.n_sites) * self.curvature_stds[stage]

    def ridge_matrix(self):
        """``αW P`` as a ``(1, p1, p1)`` matrix (broadcasts over the models)."""
        return np.diag(self.ridge)[None]

    def system(self, stage):
        """``[C̃_s]_F + αW P``: the repaired system stage ``s`` solves."""
        return _project_psd(self.curvatures[stage], self.floor_std(stage)) + self.ridge_matrix()

    def step_systems(self):
        """Per gradient step of the refinement, in order: the inverse of its
        stage's repaired system ``A_s⁻¹`` (shape ``(K, p1, p1)``, one
        inversion per stage) and the step's damping ``d`` (shape ``(K,)``):
        the step was ``(d A_s)⁻¹`` times its gradient."""
        for stage, dampings in enumerate(self.damping):
            inverse = np.linalg.inv(self.system(stage))
            for damping in dampings:
                yield inverse, damping

    def curvature_estimate(self, floor=0.0):
        """The spread-matching shrinkage of the last released curvature
        (:func:`~._inference_private_curvature.shrunk_curvature`, its
        eigenvalues floored at ``floor``), without the ridge."""
        return shrunk_curvature(self.curvatures[-1], self.floor_std(), floor)

    def hessian(self, floor=0.0):
        """``Ĥ``: the variance's plug-in curvature,
        :meth:`curvature_estimate` plus the ridge."""
        return self.curvature_estimate(floor) + self.ridge_matrix()


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
        damping=[np.ones((steps, n_models)) for steps in GRADIENT_STEPS],
        ridge=penalty * sites.weight_sum,
        grad_std=sigma * summary_sensitivity("gradient", loss, clip_norm),
        curvature_stds=[sigma / k * exact_curvature_sensitivity(loss, clip_norm)
                        for k in STAGE_PRECISION])
    outer_std = sigma / PRECISION * score_outer_sensitivity(loss, clip_norm)
    for stage in range(CURVATURE_RELEASES):
        last = stage == CURVATURE_RELEASES - 1
        curvature, outer = noised_inference_summary(sites, theta, loss, out.curvature_stds[stage],
                                                    outer_std if last else None, rng)
        out.curvatures.append(curvature)
        system = out.system(stage)
        damping, last_norm = np.ones(n_models), np.full(n_models, np.inf)
        for step in range(out.steps[stage]):
            grad = sites.noised_summary("gradient", theta, message, out.grad_std, rng)
            if last and step == 0:
                # the score sum is the gradient sum (rows weigh one): no new release
                summary = InferenceSummary(curvature, _project_psd(outer), grad, sites.weight_sum)
                out.score_cov = score_covariance(summary, theta, penalty)
                out.sampling_cov = propagate_covariance(
                    None, out.hessian(SANDWICH_FLOOR * out.floor_std()), None, out.score_cov)
            move, damping, last_norm = safeguarded_step(
                (grad + out.ridge[:, None] * theta).T, system, damping, last_norm)
            out.damping[stage][step] = damping
            theta = theta - move.T
    out.theta = theta
    out.cov = privacy_error_covariance(out) + out.sampling_cov
    _withhold_unresolved(out)
    return out


def safeguarded_step(gradient, system, damping, smallest):
    """A step ``(d A)⁻¹ g`` of each of a batch of systems, ``d`` doubled
    where the gradient's norm ``sqrt(gᵀ A⁻¹ g)`` is more than
    :data:`GROWTH` times the smallest of the stage so far (the steps
    overshoot: the system, from a curvature taken away from the minimizer,
    is below the curvature along some direction; a slow divergence or an
    oscillation is caught too). Post-processing of released numbers.

    Parameters
    ----------
    gradient : ndarray of shape (B, p1)
    system : ndarray of shape (B, p1, p1)
    damping, smallest : ndarray of shape (B,)
        The stage's damping and smallest gradient norm so far (1 and inf
        at its start).

    Returns
    -------
    step : ndarray of shape (B, p1)
    damping, smallest : ndarray of shape (B,)
    """
    direction = np.linalg.solve(system, gradient[..., None])[..., 0]
    norm = np.sqrt(np.maximum(np.einsum("bi,bi->b", gradient, direction), 0.0))
    damping = np.where(norm > GROWTH * smallest, 2.0 * damping, damping)
    return direction / damping[:, None], damping, np.minimum(smallest, norm)


def privacy_error_covariance(refinement):
    """Covariance of the refinement's privacy error ``θ̃ - θ̂`` (module doc):
    ``V ← M V Mᵀ + (dA_s)⁻¹ S_g (dA_s)⁻¹``, ``M = I - (dA_s)⁻¹ Ĥ``, over
    every step (damping ``d``) from ``V = 0``, with ``Ĥ`` the shrinkage
    estimate of :meth:`PrivateRefinement.hessian`.

    Returns
    -------
    cov : ndarray of shape (K, p1, p1)
    """
    curvature = refinement.curvatures[-1]
    n_models, p1, _ = curvature.shape
    eye = np.eye(p1)
    hessian = refinement.hessian()
    gradient_var = refinement.n_sites * refinement.grad_std**2
    out = np.zeros_like(curvature)
    for inverse, damping in refinement.step_systems():
        step = inverse / damping[:, None, None]
        carried = eye - step @ hessian
        out = carried @ out @ carried.transpose(0, 2, 1) + gradient_var * step @ step
    return out


def _withhold_unresolved(out):
    """Widen the covariance by the pilot's residual error, or withhold it.

    ``out.residual_bound`` (:func:`~._inference_residual.residual_bound`,
    post-processing of the releases) bounds the pilot's error left in each
    parameter. A model whose bound is at most :data:`RESOLVED` standard
    errors in every parameter publishes ``cov + diag(bound²)`` (a bound on
    the mean squared error) and its noise-aware standard errors
    ``out.std_err``, from which :meth:`PrivateRefinement.intervals` gives
    the bias-aware intervals (at least ``level`` coverage whenever the
    bound holds, whatever the bias below it); the others publish NaN, with
    a warning. The warning comes after
    the noise is drawn: raised as an error it refuses the fit with nothing
    fitted, but the charge stands (its outcome is post-processing of the
    drawn releases; a refund would let retries read it for free)."""
    out.residual_bound = residual_bound(out, out.cov - out.sampling_cov)
    out.std_err = standard_errors(out.cov)
    unresolved = _unresolved(out.residual_bound, out.std_err)
    widening = np.where(unresolved[:, None], 0.0, out.residual_bound) ** 2
    out.cov = out.cov + widening[:, :, None] * np.eye(widening.shape[1])[None]
    if unresolved.any():
        out.cov[unresolved] = np.nan
        out.std_err[unresolved] = np.nan
        warnings.warn(NoiseDominatesWarning(
            "mechanism='local-gaussian', inference=True: the sites' noised curvature is "
            "too close to its noise level for some models to bound the pilot's error the "
            f"refinement may have left within {RESOLVED:g} standard errors, so an interval "
            "around the estimate could under-cover; their standard errors are NaN. More "
            "rows per site, fewer sites or features, or a larger epsilon resolve it."),
            stacklevel=7)


def _unresolved(bound, std_err):
    """Models with a parameter whose residual ``bound`` (shape ``(K, p1)``)
    is above :data:`RESOLVED` times its standard error (or not finite)."""
    return ~(bound <= RESOLVED * std_err).all(axis=1)
