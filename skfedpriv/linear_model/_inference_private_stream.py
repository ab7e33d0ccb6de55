"""Coefficient inference over a 'local-gaussian' stream's later batches.

The first batch of a ``DWDClassifier(mechanism='local-gaussian',
inference=True)`` stream is the one-batch fit of
:mod:`._inference_private` (pilot, gradient steps on 3 released curvatures,
noise-aware covariance).
Every later batch ``b`` makes one renewable Newton step (the DWD paper's
eq. 37) and propagates the covariance, with the first batch's curvature.

**What the sites release.** At the released ``θ_{b-1}``, each site of
batch ``b`` sends, per one-vs-rest model, its gradient sum
``G_b(θ_{b-1}) = Σ_i y_i V_q'(u_i) x̄_i`` with its own Gaussian noise
(L2 sensitivity ``Δ_g = 2 C2``, noise ``σ_b Δ_g``), and nothing else: a
batch makes ``K`` unit releases (:func:`stream_batch_releases`), counted
before any noise is drawn, and ``σ_b`` calibrates that count, as one
Gaussian mechanism of sensitivity ``sqrt(K)``, to the stream's
``(epsilon, delta)``. The rows (clipped to ``‖x̄‖ <= C2``, weighing one)
are the batch's own; nothing of an earlier batch's rows is released again.

**Why no curvature per batch.** A batch's exact curvature has sensitivity
``sqrt(2) (q+1)²/q C2²`` whatever its size: released by each of 20 equal
batches of 1 000 rows, the summed noise is ``sqrt(20)`` times one batch's,
and on the benchmark's design (n = 20 000, p = 5, 5 sites) its spectral
norm is 1.0-2.6 times the smallest eigenvalue of the whole stream's
curvature at ε = 4 and 3.6-9.1 times at ε = 1, even with each batch's
whole budget on it (``benchmarks/README.md``, "Private streams"): the
summed curvature does not resolve, and a stream that re-solved the sum of
the batches' released quadratic models under-covered (21-73 %).
The per-row curvature and score variance are the same in every batch of a
stream of rows from one distribution (what the renewable estimator's
normality assumes), so the first batch's released ones serve every batch,
and a later batch spends its budget on its gradient only.

**The update** (post-processing). With ``Ĥ_F`` and ``Ĥ_0`` the first
batch's last released curvature (:class:`~._inference_private.PrivateRefinement`),
repaired at its noise floor and nearest PSD, per unit of row weight
(:func:`private_stream_rates`), ``W_b`` the batch's rows and ``R_b = α W_b P``
its ridge, the system is ``L_b = L_{b-1} + W_b Ĥ_F + R_b`` (``L_1`` the
refinement's repaired system) and

``θ_b = θ_{b-1} - L_b⁻¹ (G̃_b + R_b θ_{b-1})``.

**The covariance.** Linearizing the batch's penalized gradient at the
target ``θ*`` (``G_b + R_b θ ≈ -U_b + (W_b H + R_b)(θ - θ*)``, ``U_b`` the
batch's summed scores at ``θ*``, independent of the earlier batches, ``H``
the per-row curvature), the error ``e_b = θ_b - θ*`` obeys
``L_b e_b = M e_{b-1} + U_b - ξ_b`` with ``M = L_b - W_b H - R_b`` and
``ξ_b`` the summed gradient noise (covariance ``n_sites σ_g² I``). The
published covariance, with the plug-in ``H = Ĥ_0`` (the spread-matching
shrinkage of the first batch's last released curvature,
:func:`~._inference_private_curvature.shrunk_curvature`, the one-batch
refinement's own variance's plug-in without its ridge and floor; the
nearest PSD matrix, used before, took noise-lowered directions as flat,
so ``M`` carried too much: 8-10 % wider streams at ε = 4, measured in
benchmarks/README.md, "Private streams"), is

``Σ_b = L_b⁻¹ (M Σ_{b-1} Mᵀ + W_b B̂ + n_sites σ_g² I) L_b⁻¹``

(:func:`~._inference.propagate_covariance`), ``B̂ = B̃ / W_1`` with ``B̃``
the first batch's noisy score covariance
(:attr:`~._inference_private.PrivateRefinement.score_cov`: its released
score outer products made PSD, post-processing). It was rebuilt before as
``A Σ_s A / W_1`` from the first batch's sandwich ``Σ_s = Ĥ_f⁻¹ B̃ Ĥ_f⁻¹``
and repaired system ``A``, which scales ``B̃`` by ``A Ĥ_f⁻¹`` on each side
where the lifted ``A`` and the floored shrinkage ``Ĥ_f`` differ
(``benchmarks/README.md``, "Private streams", for both measured).
The first batch's curvature error enters the estimate only
times the distance of the points where later gradients are taken from the
target: small while the first batch holds most of the rows, which the
published interval therefore needs. A later batch publishes its interval
only while the first batch holds at least :data:`FIRST_BATCH_SHARE` of the
rows seen (a measured rule: streams of equal small batches under-covered),
NaN with a warning from the batch that takes it below. A model whose first
batch published no covariance (NaN: its refinement could not be trusted
to converge) publishes none in later batches either
(``docs/guide_inference.md``). ``p1 × p1`` numbers per model whatever the
stream's length.

**The claim.** Neighbouring data sets differ in one row replaced in one
site's batch. Each site adds its own noise to everything it sends, so
the guarantee holds against the server and the other sites, over every
message of every batch and every released attribute (``coef_``,
``intercept_``, ``coef_cov_``, ``coef_se_``, ``intercept_se_`` after each
batch): a row enters the releases of its own batch only, calibrated to
``(epsilon, delta)`` as one Gaussian mechanism; the other batches'
releases depend on it only through released, noised numbers
(post-processing: the first batch's curvature and score variance a later
batch uses are the first batch's releases), so the stream is
``(epsilon, delta)``-DP and the budget is charged once, with the first
batch (every batch's releases have the same ratio of sensitivity to σ).
The charge does not depend on the number of batches, so the stream needs
no horizon: each batch's count is fixed by ``K`` (the declared classes),
never by the data or a request. In this process the sites' noise is drawn
from the stream's generator (each draw from a fresh state: the batch works
on a copy, committed only when the batch succeeds); the claim describes
the protocol in which each site draws its own. Remote sites are refused
before anything is drawn or changed: the inference releases are not a
site request yet.

References
----------
.. [1] Guo et al. (2025), eqs. 30 and 37 (the renewable update).
.. [2] Luo, L. and Song, P. X.-K. (2020), JRSS-B 82(1): renewable
   estimation and its sandwich.
"""

import warnings

import numpy as np

from .._losses import penalty_mask
from ..privacy._continual_summaries import NoiseDominatesWarning
from ..privacy._objective_perturbation import local_gaussian_sigma, summary_sensitivity
from ._dwd_sites import loss_message
from ._inference import inference_attributes, propagate_covariance
from ._newton import _solve_psd

__all__ = ["FIRST_BATCH_SHARE", "private_stream_batch", "private_stream_rates",
           "private_stream_start", "private_stream_step", "stream_batch_releases"]

#: A later batch publishes its interval only while the stream's first batch
#: holds at least this share of the rows seen: its curvature is the
#: stream's. Measured (``benchmarks/README.md``, "Private streams"): with 20
#: equal batches (first batch 5 % of the rows) the streams under-covered in
#: 6 of 8 cells (41.7–88.8 %), with a first batch of half the rows none did
#: (96.0–99.0 %). A measured rule, not a theorem.
FIRST_BATCH_SHARE = 0.5


def stream_batch_releases(n_models):
    """Unit-sensitivity releases of one later batch: one gradient per model."""
    return n_models


def private_stream_start(refinement, sites, settings):
    """The stream's accumulated curvature after the one-batch fit: the
    refinement's last repaired system (its floored curvature plus the batch's
    ridge), and the entry variance of the noise it carries."""
    return refinement.system(-1), refinement.floor_std() ** 2


def private_stream_rates(refinement, weight):
    """The first batch's per-row curvature and score variance, from its
    releases only (post-processing), which every later batch's update and
    covariance scale by the batch's rows (module doc).

    Returns
    -------
    rates : dict
        ``system`` (K, p1, p1): the repaired curvature (floored at its noise,
        no ridge) per unit of row weight; ``curvature``: the shrinkage of
        the released curvature per unit (the covariance's plug-in
        ``Ĥ_0``); ``outer``: the
        refinement's noisy score covariance ``B̃`` per unit (module doc).
    """
    return dict(system=(refinement.system(-1) - refinement.ridge_matrix()) / weight,
                curvature=refinement.curvature_estimate() / weight,
                outer=refinement.score_cov / weight)


def private_stream_step(sites, theta, prior, rates, previous_cov, sigma, rng, *,
                        loss, alpha, fit_intercept, clip_norm):
    """One later batch's gradient release, renewable step and covariance
    (module doc).

    Parameters
    ----------
    sites : SiteData
        The batch's sites in this process, prepared with ``clip_norm``.
    theta : ndarray of shape (p1, K)
        ``θ_{b-1}``.
    prior : ndarray of shape (K, p1, p1)
        ``L_{b-1}``: the system of the earlier batches.
    rates : dict
        :func:`private_stream_rates`.
    previous_cov : ndarray of shape (K, p1, p1)
        ``Σ_{b-1}``.
    sigma : float
        The batch's unit noise multiplier.
    rng : numpy.random.Generator
        The sites' generator.

    Returns
    -------
    theta : ndarray of shape (p1, K)
    increment : ndarray of shape (K, p1, p1)
        ``W_b Ĥ + R_b``, the batch's increment of the system.
    cov : ndarray of shape (K, p1, p1)
    """
    p1 = theta.shape[0]
    weight = sites.weight_sum
    ridge = alpha * penalty_mask(p1, fit_intercept) * weight
    grad_std = sigma * summary_sensitivity("gradient", loss, clip_norm)
    grad = sites.noised_summary("gradient", theta, loss_message(sites, loss), grad_std, rng)
    increment = weight * rates["system"] + np.diag(ridge)[None]
    system = prior + increment
    middle = sites.n_sites * grad_std**2 * np.eye(p1)[None] + weight * rates["outer"]
    carried = system - weight * rates["curvature"] - np.diag(ridge)[None]
    cov = propagate_covariance(previous_cov, system, carried, middle)
    theta = theta - _solve_psd(system, grad + ridge[:, None] * theta)
    return theta, increment, cov


def private_stream_batch(sites, stream, settings):
    """A later batch of a 'local-gaussian' inference stream, as a mechanism
    of :class:`~skfedpriv.DWDClassifier`: ``(theta, system increment,
    n_iter, release, entry noise variance of the system)``.

    The batch's unit releases are counted and ``σ_b`` calibrated before any
    noise is drawn; the stream's charge (made with its first batch) covers
    them (module doc), so nothing is charged here.
    """
    n_models = stream.theta.shape[1]
    sigma = local_gaussian_sigma(settings.epsilon, settings.delta,
                                 stream_batch_releases(n_models), settings.calibration)
    # row counts only (public): decided before any noise is drawn
    first_weight = stream.extra["first_batch_weight"]
    withheld = first_weight < FIRST_BATCH_SHARE * (stream.seen + sites.weight_sum)
    if withheld:
        warnings.warn(NoiseDominatesWarning(
            "mechanism='local-gaussian', inference=True: the stream's first batch holds "
            f"less than {FIRST_BATCH_SHARE:.0%} of the rows seen; such private streams were "
            "measured to under-cover, so no interval is published (NaN standard errors) "
            "from this batch on. Start the stream with a larger first batch."),
            stacklevel=7)
    theta, increment, cov = private_stream_step(
        sites, stream.theta, stream.prior, stream.extra["rates"], stream.coef_cov, sigma,
        stream.rng, loss=settings.loss, alpha=settings.alpha,
        fit_intercept=settings.fit_intercept, clip_norm=settings.clip_norm)
    if withheld:
        cov = np.full_like(cov, np.nan)
    release = dict(privacy_spent_=stream.privacy_spent, noise_scale_=sigma, rho_=None,
                   **inference_attributes(cov, settings.fit_intercept))
    # the system is the first batch's scaled by the rows seen, its noise too
    growth = (stream.seen + sites.weight_sum) / stream.seen
    return theta, increment, 1, release, stream.curvature_noise_var * growth**2
