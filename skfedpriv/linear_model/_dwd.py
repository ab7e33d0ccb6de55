"""Generalized distance-weighted discrimination over federated sites."""

import copy
import math
import numbers
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.class_weight import compute_class_weight

from .._losses import count_models, penalty_mask
from .._param_validation import Interval, InvalidParameterError, Options, Registry
from ._base import FederatedClassifierMixin, TrainingState, is_balanced_class_weight
from ..privacy import (
    PrivacyBudget,
    as_generator,
    gaussian_epsilon,
    make_factorization,
    warn_if_seeded,
)
from ..privacy._objective_perturbation import (
    CALIBRATIONS,
    PublishedCalibration,
    local_gaussian_releases,
    local_gaussian_sigma,
)
from ..privacy._continual_summaries import (
    NoiseDominatesWarning,
    SiteNoiseStreams,
    continual_sensitivities,
    continual_sigma,
    noise_to_signal,
)
from ..privacy._horizon import HorizonExceededError
from ._dwd_private import continual_update, local_gaussian_update, published_private_update
from ._dwd_secagg import SECAGG, SecAggDWDStream, secagg_plan, warn_if_wraps
from ._dwd_settings import CONTINUAL, dwd_settings
from ._dwd_sites import DWDSites
from ._dwd_solver import SiteData, published_step
from ._inference_private import ROUNDS, inference_releases, private_refinement
from ._inference_private_stream import (private_stream_batch, private_stream_rates,
                                        private_stream_start)
from ._inference import (
    CoefficientInferenceMixin,
    inference_attributes,
    renewable_covariance,
    score_covariance,
)
from ._inference_stream import require_every_side, track_stream_shift
from ._renewable import renewable_step
from ._second_order import (SHIFT_CORRECTIONS, check_second_order_sites, second_order_step,
                            shift_remedy, uses_second_order)


@dataclass(frozen=True)
class DWDStream:
    """What one batch's update starts from (:meth:`DWDClassifier._stream_start`).

    Attributes
    ----------
    theta : ndarray of shape (p1, K)
    prior : ndarray of shape (K, p1, p1) or None
        The accumulated curvature of the earlier batches (None: first batch).
    seen : float
        Row weight of the earlier batches.
    n_batches : int
    started : ndarray of bool of shape (K,)
    curvature_noise_var : float
        Noise variance per entry carried by ``prior`` (site-local Gaussian).
    privacy_spent : tuple of float or None
    rng : numpy.random.Generator or None
        The batch's noise generator (a copy of the stream's).
    extra : dict
        A mechanism's own stream state (a copy of the stream's, which the
        batch's update may change): the noise streams and running sums of
        'local-tree' / 'local-blt'.
    coef_cov : ndarray of shape (K, p1, p1) or None
        The parameters' covariance after the earlier batches (``inference``).
    """

    theta: np.ndarray
    prior: object
    seen: float
    n_batches: int
    started: np.ndarray
    curvature_noise_var: float
    privacy_spent: object
    rng: object
    extra: dict
    coef_cov: object


def _renewable_step(sites, stream, settings):
    """Non-private update: eq. 26 for a model's first batch, then eq. 30/37
    (:func:`~skfedpriv.linear_model._renewable.renewable_step`)."""
    return renewable_step(
        sites, stream.theta, stream.prior, stream.started, stream.seen, loss=settings.loss,
        alpha=settings.alpha, fit_intercept=settings.fit_intercept,
        max_iter=settings.max_iter, tol=settings.tol,
        online_steps=settings.online_steps,
        # Algorithm 1 as published (eq. 37)
        first_step=published_step if settings.online_steps == 1 else None,
        # few rows: the curvature as rows (inference keeps the dense form)
        factored=not settings.inference,
    )


def _inference_step(sites, stream, settings, theta, curvature, started):
    """The covariance of every model's estimate after a non-private batch
    (sandwich, propagated over the stream: see :mod:`._inference`), from one
    more summary of the sites at the new estimate."""
    summary = sites.inference_summary(theta, settings.loss.derivative, settings.loss.curvature)
    penalty = settings.alpha * penalty_mask(theta.shape[0], settings.fit_intercept)
    return renewable_covariance(
        stream.coef_cov, starting=started & ~stream.started,
        continuing=started & stream.started, prior=stream.prior, exact=summary.curvature,
        used=curvature, ridge=penalty * sites.weight_sum,
        score_cov=score_covariance(summary, theta, penalty),
        one_step=settings.online_steps == 1,
    )


def _second_order_step(sites, stream, settings, theta, curvature, coef_cov, previous,
                       impute=False):
    """The published estimate of ``shift_correction='second-order'``, its
    covariance and the correction's new state (:mod:`._second_order`;
    ``impute``: a first batch whose moments are left out)."""
    total = curvature if stream.prior is None else stream.prior + curvature
    return second_order_step(sites, previous, theta, coef_cov, total, settings.loss,
                             impute=impute)


def _charge(settings, epsilon, delta, *, note, **details):
    """Charge the shared budget, if any (raises before any noise is drawn)."""
    if settings.budget is not None:
        settings.budget.spend(
            epsilon, delta,
            note=f"DWDClassifier(mechanism={settings.mechanism!r}): {note}", **details,
        )


def _local_gaussian(sites, stream, settings, *, first):
    """Site-local Gaussian perturbation of every summary; the budget is
    charged once per stream, before any noise is drawn. With ``inference``
    the first batch's pilot is refined and gets its noise-aware covariance
    (:mod:`._inference_private`), charged in the same mechanism; a later
    batch makes one renewable step and propagates the covariance
    (:mod:`._inference_private_stream`), its releases calibrated alike."""
    epsilon, delta = settings.epsilon, settings.delta
    n_models = stream.theta.shape[1]
    if not sites.noises_summaries:
        raise ValueError(
            "mechanism='local-gaussian' needs every site to noise its own summaries: "
            "in-process sites, or remote sites that each hold a SitePrivacy. Nothing "
            "was charged.")
    if settings.inference and not isinstance(sites, SiteData):
        raise NotImplementedError(
            "inference=True with mechanism='local-gaussian' runs with sites in this "
            "process only (its refinement rounds are not a site request yet). Nothing "
            "was charged.")
    if settings.inference and not first:
        return private_stream_batch(sites, stream, settings)
    releases = local_gaussian_releases(n_models, settings.online_steps, first)
    if settings.inference:
        releases += inference_releases(n_models)
    sigma = local_gaussian_sigma(epsilon, delta, releases, settings.calibration)
    if first:
        spent = (_gaussian_claim(epsilon, delta, sigma, releases), delta)
        _charge(settings, *spent, note="a new stream (all batches: disjoint rows)",
                mechanism="gaussian", sigma=sigma, sensitivity=math.sqrt(releases))
    else:
        spent = stream.privacy_spent
    theta, curvature, noise_var = local_gaussian_update(
        sites, stream.theta, stream.prior, first, sigma, stream.rng,
        prior_noise_var=stream.curvature_noise_var,
        online_steps=settings.online_steps, loss=settings.loss,
        alpha=settings.alpha, fit_intercept=settings.fit_intercept,
        clip_norm=settings.clip_norm, step_radius=settings.step_radius,
    )
    release = dict(privacy_spent_=spent, noise_scale_=sigma, rho_=None)
    n_iter = settings.online_steps
    if settings.inference:
        refinement = private_refinement(
            sites, theta, sigma, stream.rng, loss=settings.loss, alpha=settings.alpha,
            fit_intercept=settings.fit_intercept, clip_norm=settings.clip_norm)
        theta = refinement.theta
        release.update(inference_attributes(refinement.cov, settings.fit_intercept),
                       private_refinement_=refinement)
        # the refined fit's repaired system starts the stream's; its rates per
        # row serve the later batches
        curvature, noise_var = private_stream_start(refinement, sites, settings)
        stream.extra.update(first_batch_weight=sites.weight_sum,  # a row count: public
                            rates=private_stream_rates(refinement, sites.weight_sum))
        n_iter += ROUNDS
    return theta, curvature, n_iter, release, (noise_var + stream.curvature_noise_var)


def _published(sites, stream, settings, *, first):
    """Algorithm 2: one release per batch, each charged before its noise is
    drawn; one-vs-rest models split the budget."""
    epsilon, delta = settings.epsilon, settings.delta
    p1, n_models = stream.theta.shape
    per_model = (epsilon / n_models, delta / n_models)
    calibration = PublishedCalibration(
        settings.mechanism, *per_model, loss=settings.loss, alpha=settings.alpha,
        clip_norm=settings.clip_norm, step_radius=settings.step_radius,
        rho=settings.rho, p1=p1, n_seen=stream.seen + sites.weight_sum,
    )
    _warn_if_release_noise_dominates(calibration, sites, p1, n_models, settings)
    _charge(settings, epsilon, delta, note=f"release of batch {stream.n_batches}",
            mechanism="laplace" if settings.mechanism == "laplace" else "approx")
    before = (0.0, 0.0) if first else stream.privacy_spent
    spent = (before[0] + epsilon, before[1] + delta)
    theta, h_bar = published_private_update(
        sites, stream.theta, stream.prior, [calibration] * n_models, stream.rng,
        loss=settings.loss, alpha=settings.alpha, fit_intercept=settings.fit_intercept,
        step_radius=settings.step_radius,
    )
    release = dict(privacy_spent_=spent, noise_scale_=calibration.scale, rho_=calibration.rho)
    return theta, h_bar, 1, release, 0.0




def _check_stream_step(sites, stream, settings, *, remote_ok=False):
    """The prefix-sum mechanisms run with sites in this process (with
    ``remote_ok``, also with sites that hold their own noise streams), up to
    their horizon (raises before any change); returns the horizon."""
    if not (isinstance(sites, SiteData) or (remote_ok and sites.holds_noise_streams)):
        where = ("or sites that hold their own noise streams "
                 "(skfedpriv.federated.ContinualSitePrivacy)" if remote_ok
                 else "only; remote sites do not run it through fit_sites yet")
        raise NotImplementedError(
            f"mechanism={settings.mechanism!r} runs with sites in this process "
            f"(fit / partial_fit) {where}."
        )
    horizon = settings.n_batches
    if stream.n_batches >= horizon:
        raise HorizonExceededError(
            f"the stream was calibrated for n_batches={horizon} batches; start a new "
            "stream (fit) to train further."
        )
    return horizon


def _secagg(sites, stream, settings, *, first):
    """Distributed DP under secure aggregation (:mod:`._dwd_secagg`): each
    site adds an integer share of the noise, the server sees the modular
    sum; one zCDP charge per stream before any noise is drawn."""
    horizon = _check_stream_step(sites, stream, settings)
    p1, n_models = stream.theta.shape
    if first:
        n_rows = sites.weight_sum * horizon
        plan = secagg_plan(settings.mechanism, horizon, sites.n_sites, settings.honest_sites,
                           p1, n_models, settings, n_rows)
        warn_if_wraps(plan, settings.mechanism)
        # the summed shares per site in the summary's units, as 'local-tree'
        _warn_if_noise_dominates(plan.factorization, plan.unit_sigma, sites, p1,
                                 n_models, settings)
        spent = (plan.epsilon, settings.delta)
        _charge(settings, *spent, note=f"a new stream of {horizon} batches under secure "
                f"aggregation ({plan.honest_sites} of {plan.n_sites} sites honest)",
                mechanism="zcdp", rho=plan.rho)
        secagg = SecAggDWDStream(plan, stream.rng.spawn(1)[0])
    else:
        secagg, spent = stream.extra["secagg"], stream.privacy_spent
        if sites.n_sites > secagg.plan.n_sites:
            raise ValueError(
                f"the stream's shares were set up for {secagg.plan.n_sites} sites; this "
                f"batch has {sites.n_sites}."
            )
    theta, summed = secagg.step(
        sites.site_parts(), stream.theta, stream.seen + sites.weight_sum, q=settings.q,
        alpha=settings.alpha, fit_intercept=settings.fit_intercept)
    stream.extra.update(secagg=secagg)
    curvature = summed - (0.0 if stream.prior is None else stream.prior)
    release = dict(privacy_spent_=spent, noise_scale_=secagg.plan.unit_sigma, rho_=None)
    return theta, curvature, 1, release, 0.0


def _continual(sites, stream, settings, *, first):
    """Correlated noise across a site's batches (:mod:`skfedpriv.privacy.
    _continual_summaries`): one Gaussian mechanism per stream, charged once
    before any noise is drawn; in-process sites, or sites that hold their
    own noise streams (``holds_noise_streams``: the server draws nothing)."""
    remote = sites.holds_noise_streams
    horizon = _check_stream_step(sites, stream, settings, remote_ok=True)
    p1, n_models = stream.theta.shape
    if first:
        factorization = make_factorization(CONTINUAL[settings.mechanism], horizon)
        sigma = continual_sigma(settings.epsilon, settings.delta, factorization,
                                settings.calibration)
        sensitivity = factorization.sensitivity
        _warn_if_noise_dominates(factorization, sigma, sites, p1, n_models, settings)
        spent = (_gaussian_claim(settings.epsilon, settings.delta, sigma, sensitivity**2),
                 settings.delta)
        _charge(settings, *spent, note=f"a new stream of {horizon} batches",
                mechanism="gaussian", sigma=sigma, sensitivity=sensitivity)
        # the sites' streams own a child generator: no draw shares a state
        noise = SiteNoiseStreams(
            factorization, sites.n_sites, p1, n_models, sigma,
            continual_sensitivities(settings.q, settings.clip_norm),
            None if remote else stream.rng.spawn(1)[0])
        linear = None
    else:
        noise, linear, spent = stream.extra["noise"], stream.extra["linear"], stream.privacy_spent
        if remote == bool(noise.streams):
            raise ValueError(
                "a 'local-tree' / 'local-blt' stream's sites either all run in this process "
                "or all hold their own noise streams; start a new stream (fit).")
        if sites.n_sites > noise.n_sites:
            raise ValueError(
                f"the stream's noise was set up for {noise.n_sites} sites; this batch "
                f"has {sites.n_sites}."
            )
    theta, linear, curvature = continual_update(
        sites, stream.theta, noise, linear, stream.prior, stream.n_batches,
        stream.seen + sites.weight_sum, q=settings.q, alpha=settings.alpha,
        fit_intercept=settings.fit_intercept)
    stream.extra.update(noise=noise, linear=linear)
    release = dict(privacy_spent_=spent, noise_scale_=noise.sigma, rho_=None)
    return theta, curvature, 1, release, 0.0


def _warn_if_noise_dominates(factorization, sigma, sites, p1, n_models, settings):
    """Warn, before any charge, when the stream's noise would swamp its
    rows: public quantities only (the first batch's size times the horizon
    stands for the stream's rows)."""
    n_rows = sites.weight_sum * factorization.n_rounds
    ratio = noise_to_signal(factorization, sigma, sites.n_sites, p1, n_models, settings.q,
                            settings.clip_norm, n_rows)
    _warn_noise_ratio(ratio, n_rows, settings, "the summed linear term",
                      "rows (the first batch's size times n_batches)",
                      "a larger epsilon, fewer sites, a smaller clip_norm")


def _warn_if_release_noise_dominates(calibration, sites, p1, n_models, settings):
    """Algorithm 2: warn, before the charge, when the noise ξ of a release's
    linear term is expected to exceed the largest gradient sum the batch's
    rows could give (``n_b`` times the loss's derivative bound times the
    clip). Public quantities only: the batch's row count, p, K, the scale."""
    n_rows = sites.weight_sum
    draws = 2.0 if settings.mechanism == "laplace" else 1.0  # E ξ_j² per scale²
    noise = calibration.scale * math.sqrt(draws * p1)
    signal = n_rows * settings.loss.derivative_bound * settings.clip_norm
    ratio = noise / signal if signal > 0 else math.inf
    _warn_noise_ratio(ratio, n_rows, settings, f"each of the {n_models} released models",
                      "rows of this batch", "a larger epsilon, larger batches")


def _warn_noise_ratio(ratio, n_rows, settings, what, rows, remedies):
    """Emit :class:`~skfedpriv.privacy.NoiseDominatesWarning` when the
    expected noise exceeds the largest signal ``n_rows`` rows could give."""
    if ratio > 1.0:
        warnings.warn(NoiseDominatesWarning(
            f"mechanism={settings.mechanism!r}: the noise of {what} is expected to be "
            f"{ratio:.3g} times the largest sum {n_rows:.0f} {rows} could give; the model "
            f"will be mostly noise. About {ratio * n_rows:.0f} rows at this epsilon (or "
            f"{remedies}) bring the ratio to one."), stacklevel=5)


def _gaussian_claim(epsilon, delta, sigma, releases):
    """ε of ``releases`` composed unit-sensitivity Gaussian releases of noise
    multiplier σ: exactly one Gaussian mechanism of sensitivity
    ``sqrt(releases)`` (Dong, Roth, Su 2022, Cor. 3.3), its exact analytic ε
    at δ. The analytic calibration meets ``epsilon`` up to root-finding
    rounding, which is reported as ``epsilon``; the classic and zCDP
    calibrations add more noise, and their exact, smaller ε is reported."""
    exact = gaussian_epsilon(sigma, delta, math.sqrt(releases))
    return float(epsilon) if abs(exact - epsilon) <= 1e-9 * epsilon else exact


#: Privacy mechanisms of :class:`DWDClassifier`: name -> the private update
#: ``(sites, stream, settings, *, first) -> (theta, curvature, n_iter,
#: release, curvature noise variance)``.
MECHANISMS = Registry("mechanism", {
    "laplace": _published,
    "gaussian": _published,
    "local-gaussian": _local_gaussian,
    **{name: _continual for name in CONTINUAL},
    **{name: _secagg for name in SECAGG},
})


#: Accepted values of each hyperparameter of :class:`DWDClassifier` (see
#: :mod:`skfedpriv._param_validation`).
PARAMETER_CONSTRAINTS = {
    "q": [Interval(numbers.Real, 0, None, closed="neither")],
    "alpha": [Interval(numbers.Real, 0, None, closed="left")],
    "fit_intercept": ["boolean"],
    "class_weight": [dict, Options("balanced"), None],
    "max_iter": [Interval(numbers.Integral, 1, None)],
    "tol": [Interval(numbers.Real, 0, None, closed="neither")],
    "online_steps": [Interval(numbers.Integral, 1, None)],
    "n_jobs": [Interval(numbers.Integral, None, None), None],
    "random_state": ["random_state"],
    "mechanism": [None, MECHANISMS],
    "epsilon": [Interval(numbers.Real, 0, None, closed="neither")],
    "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
    "clip_norm": [Interval(numbers.Real, 0, None, closed="neither"), None],
    "rho": [Interval(numbers.Real, 0, None, closed="left"), None],
    "step_radius": [Interval(numbers.Real, 0, None, closed="neither"), None],
    "calibration": [CALIBRATIONS],
    "budget": [PrivacyBudget, None],
    "classes": ["array-like", None],
    "n_batches": [Interval(numbers.Integral, 1, None), None],
    "honest_sites": [Interval(numbers.Integral, 1, None), None],
    "inference": ["boolean"],
    "shift_correction": [Options(*SHIFT_CORRECTIONS), None],
}


class DWDClassifier(CoefficientInferenceMixin, FederatedClassifierMixin, BaseEstimator):
    """Linear generalized DWD classifier, fitted federated and online.

    Minimizes the genDWD objective (paper eq. 5)

    ``(1/W) Σ_i w_i V_q(y_i (x_iᵀβ + β_0)) + (alpha/2) ‖β‖²``

    where ``w_i`` is ``sample_weight`` times ``class_weight`` and ``W`` their
    sum (``W = n`` without weights). Rows live at sites named by
    ``sample_group``; sites only ever send sums over their rows (loss,
    gradient, curvature) to the server, which updates the model. Multiclass
    problems are fitted one-vs-rest, one model per class, on the same rows.

    ``fit`` is the offline federated fit (the paper's OffWP): a Newton
    iteration on the summed site summaries, every step accepted by an Armijo
    test so the objective never increases, run to the minimizer.
    ``partial_fit`` is the online update from summary statistics only
    (renewable estimation, paper section 4, eqs. 30-37): the estimator keeps
    the current parameters and the accumulated curvature ``Σ_j J_j`` of the
    earlier batches (``O(p²)`` numbers per class model, whatever the stream
    length) and no rows.

    Parameters
    ----------
    q : float, default=1.0
        Exponent of the genDWD loss, any ``q > 0``; ``q = 1`` is classical
        DWD.
    alpha : float, default=1e-3
        Ridge strength, the paper's λ of eq. 5 (twice kerndwd's ``lambda``).
        The default suits standardized features; larger values shrink more.
    fit_intercept : bool, default=True
        Fit an unpenalized intercept ``β_0``.
    class_weight : dict, 'balanced' or None, default=None
        Weights of the classes, multiplied into ``sample_weight``.
        ``'balanced'`` uses ``n / (n_classes * count)`` and is available in
        ``fit`` only (a stream has no class counts to balance by; pass a dict
        to ``partial_fit``). In one-vs-rest, every class model uses the
        weights of the rows' own labels.
    max_iter : int, default=300
        Maximum iterations of ``fit`` (and of the first batch of a
        ``partial_fit`` stream): Newton steps, and with ``p + 1 >= 256``
        parameters per model or three or more classes the L-BFGS iterations
        that come first (at most half of ``max_iter``; each one summary
        round, the curvature matrix formed only once a model is close to
        the optimum). Every bundled scikit-learn dataset
        (standardized) converges well within it at q in {0.5, 1, 4}; a fit
        that runs out warns (``ConvergenceWarning``) with the relative
        objective gap at the returned point.
    tol : float, default=1e-12
        Relative objective gap to stop at: a class model stops at ``θ`` once
        half its Newton decrement, ``½ gᵀH⁻¹g`` (the gap ``F(θ) - min F`` of
        the quadratic model of the objective ``F``), is at most
        ``tol |F(θ)|``. In ``fit`` the test uses the curvature matrix formed
        at ``θ``, the one kept as ``curvature_``; in ``partial_fit`` the
        renewable system of the batch (eq. 35), and ``F`` is the renewable
        objective scaled to the weight of the stream so far (the objective
        it stands for).
    online_steps : int, default=10
        Iterations of each ``partial_fit`` after the first. ``1`` is the
        published single step of Algorithm 1 (eq. 37, with the paper's
        ``H̄``, which puts the ridge on the intercept too); larger values
        solve the renewable estimating equation (30) for the batch while it
        is in memory (Newton steps with the accumulated curvature of earlier
        batches and the batch's curvature at the previous estimate, eq. 35,
        each accepted by an Armijo test), which closes most of the gap to
        the offline fit. Each such step taken in full is one round to the
        sites (they send the loss and gradient at the step); a refused
        full step backtracks in one more round.
    n_jobs : int or None, default=None
        Sites computed in parallel through joblib. ``None`` means 1 unless a
        ``joblib.parallel_config`` context says otherwise, so a Dask or Ray
        joblib backend spreads the sites over a cluster.
    random_state : int, numpy Generator or None, default=None
        Randomness of the privacy noise (a generator made once per stream
        and carried across ``partial_fit`` calls in the training state).
        ``None`` draws fresh OS entropy: use it for any real release. An
        integer makes the noise reproducible, and anyone who knows it can
        remove the noise, so a private stream started from an integer seed
        emits a :class:`~skfedpriv.privacy.SeededNoiseWarning` (fixed seeds
        are for tests and experiments). A ``Generator`` or ``RandomState`` is refused with a mechanism
        (``clone`` would copy it into every candidate, fold and refit), and
        a release has ``random_state=None``. The non-private model is
        deterministic.
    mechanism : {None, 'laplace', 'gaussian', 'local-gaussian', 'local-tree', 'local-blt', \
            'secagg-tree'}, default=None
        Differential privacy (see Notes). ``None`` is the non-private model.
    epsilon : float, default=1.0
        ε of the guarantee (finite, > 0).
    delta : float, default=1e-5
        δ of the guarantee (0 < δ < 1) for the Gaussian mechanisms; ignored
        by 'laplace' (pure ε).
    clip_norm : float or None, default=None
        Bound on the Euclidean norm of the augmented row (1, x) (of ``x``
        without intercept), the paper's C2: every training row is scaled into
        that ball before any summary is formed. Required with a mechanism; never
        read from the data. The paper's L1 bound ``C1 = sqrt(p + 1) C2``
        follows from it. Prediction uses unclipped rows.
    rho : float or None, default=None
        ρ of eq. 41 ('laplace', 'gaussian'). ``None`` takes, per batch, the
        smallest ρ >= 0 that meets Condition 2 and ``T2 <= epsilon / 2``
        (Condition 2 alone only gives ``T2 <= 1/2``, which leaves no valid
        Laplace scale for ε <= 1/2 and breaks the Gaussian proof's eq. 68
        for ε < 1). A given ρ with no valid calibration raises ValueError.
    step_radius : float or None, default=None
        R, the enforced bound on how far one private update may move the
        parameters (``‖θ_b - θ_{b-1}‖ <= R``, a trust region). It replaces
        the proof's ``C_{p-1}/sqrt(N_{b-1})``, which is O_p(1) and not a
        bound. ``None`` uses ``q / ((q+1)² C2)``, which makes the curvature
        part of T1 (eq. 61) equal to its gradient part.
    calibration : {'analytic', 'classic', 'zcdp'}, default='analytic'
        Gaussian calibration of 'local-gaussian', 'local-tree' and
        'local-blt': the exact analytic Gaussian
        mechanism (Balle & Wang 2018), or the classic / zCDP conversions for
        comparison.
    budget : PrivacyBudget or None, default=None
        A budget shared with other estimators (it survives ``clone``),
        charged before any state changes; a charge that would overspend
        raises :class:`~skfedpriv.PrivacyBudgetError` and changes nothing.
        'local-gaussian' charges once per stream (``fit`` or the first
        ``partial_fit``), as one Gaussian mechanism (``mechanism='gaussian'``
        with its noise multiplier σ and sensitivity ``sqrt(releases)``, see
        Notes); so do 'local-tree'/'local-blt' (σ and the factorization's
        sensitivity); 'secagg-tree' once per stream as ρ-zCDP
        (``mechanism='zcdp'``); 'laplace'/'gaussian' charge every batch, each a release
        (``(epsilon, 0)`` as 'laplace', ``(epsilon, delta)`` as 'approx').
    classes : array-like of shape (n_classes,) or None, default=None
        The label set, declared. Required with a mechanism (here or as the
        ``classes`` argument of the first ``partial_fit``): a label set read
        from the data would reveal a row's label through ``classes_`` and
        the shape of ``coef_``. Rows with a label outside it are refused
        before any state changes. ``None`` without a mechanism: ``fit``
        takes the labels of ``y``, as in scikit-learn.
    n_batches : int or None, default=None
        The horizon of a 'local-tree'/'local-blt'/'secagg-tree' stream: its noise is
        calibrated for this many batches (``fit`` is the first of them);
        one more raises :class:`~skfedpriv.privacy.HorizonExceededError`
        and changes nothing. Required by those mechanisms, ignored by the
        others.
    inference : bool, default=False
        Standard errors and confidence intervals of every parameter
        (``coef_se_``, ``intercept_se_``, ``coef_cov_``, :meth:`confint`,
        :meth:`summary`), after ``fit`` and after every ``partial_fit``
        batch: the sandwich variance of the M-estimator, from one more
        summary the sites send per batch (two ``p1 × p1`` sums per model, no
        rows), propagated over the stream in ``O(p1²)`` memory per model
        (see :doc:`/guide_inference`). The target is the population
        minimizer of the objective at the same ``alpha``. Without a mechanism, with sites
        that send the summary (in this process, or remote non-private
        sites; :meth:`fit_sites` refuses others). Under ``mechanism='local-gaussian'``
        (sites in this process only): ``fit`` (or a stream's first
        ``partial_fit``) refined by gradient steps on 3 noised exact
        curvatures, then one renewable step per later batch, the interval
        widened by the privacy noise of every batch and by a bound on the
        pilot's error the refinement may have left (see Notes; coverage,
        width and the share of fits that publish none measured in
        ``benchmarks/README.md``; a first batch whose bound exceeds 8
        standard errors publishes NaN for the whole stream, with a
        NoiseDominatesWarning
        issued after the charge: raised as an error it refuses the fit, the
        budget still charged); the one-batch fit's interval
        can also be replayed by a parametric bootstrap
        (``confint(method='bootstrap')``); the other mechanisms raise.
    honest_sites : int or None, default=None
        'secagg-tree' only: the number of sites assumed honest (not
        colluding with the server, not dropping out). Each site adds the
        share of the noise that makes the sum of ``honest_sites`` shares
        private (std ``∝ 1/sqrt(honest_sites)``); ``None`` is every site of
        the stream's first batch. More than the stream's sites raises
        ValueError before any charge. See Notes.
    shift_correction : {'auto', 'second-order'} or None, default='auto'
        The second-order correction of a non-private stream with
        ``inference=True`` (no effect without inference or under a
        mechanism): after each ``partial_fit`` batch, publish the renewable
        estimate minus its expected linearization shift,
        ``θ_B - C_B⁻¹ ½ r S : V_B`` with ``S`` the summed third derivative
        of the loss (genDWD's kink smoothed over the margin's standard
        deviation), ``r = Σ_{j≥2} W_j / N_j`` and ``V_B`` the covariance;
        ``coef_cov_`` (and the standard errors, :meth:`confint`) is then
        the delta-method covariance of the corrected estimate, ``A V_B Aᵀ``.
        It keeps ``n_models (2 p1³ + p1⁴)`` numbers whatever the stream
        length. ``'auto'``: the correction wherever that is at most 10⁷
        numbers (``p <= 54`` for one model), the first-order stream beyond;
        in a stream started by ``fit`` (which publishes the uncorrected
        estimate, one batch having nothing to correct) ``fit`` computes no
        moments (its cost and outputs are the first-order fit's) and the
        later batches' moments stand in for the fit batch's
        (``S ≈ N / (N - N_1) Σ_{j≥2} S_j``, a relative error of order
        ``N^-½`` for batches from one distribution; see
        :mod:`~skfedpriv.linear_model._second_order`); ``'second-order'``:
        the correction, the fit batch's moments computed in ``fit`` (``p1⁴``
        operations per row, 16x a p = 20 fit), more than 10⁷ numbers raise
        ValueError (and without ``inference=True`` or under a mechanism,
        InvalidParameterError); None: the first-order stream. The decision
        is made at the stream's first batch from these (the parameter and
        class counts, the call), never from the data, and kept by the
        stream. The stream itself (the state the next batch starts from,
        its covariance, ``curvature_``) is the first-order one.
        Measured: it removes the shift's mean and its intervals cover
        where small batches make the first-order stream's under-cover, at
        5-30 % more width (and over-covers one small-shift cell); it costs
        about 8 times the time of a first-order stream of p = 20; see
        :doc:`/guide_inference`. Sites send the moments it needs (remote
        sites: ``second_order_summary``, non-private sites only); sites
        that do not raise ``NotImplementedError`` before any summary is
        asked (use None with them).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        With a mechanism: the declared label set (data-independent).
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        With a mechanism: the noised release, covered by the claim of the
        mechanism (see Notes).
    intercept_ : ndarray of shape (1,) or (n_classes,)
        Covered as ``coef_``.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Defined when X has string feature names. Public by assumption, as
        is the number of features.
    curvature_ : ndarray or CurvatureStack of shape (n_models, p1, p1)
        Accumulated curvature ``Σ_j J_j`` (eq. 34) of all batches seen, the
        only memory of past batches; ``p1 = n_features + fit_intercept``.
        Beyond 200 parameters, while the rows seen and their Gram matrix
        take fewer numbers than the matrix (``m p1 + m² < p1²``,
        ``inference=False``), a
        ``CurvatureStack``: the rows ``D^½ X̄`` of every batch (a copy of
        the rows and one scale per row and model), which behaves as the
        array (``np.asarray(curvature_)`` forms it, ``8 n_models p1²``
        bytes; ``curvature_[k]`` is model k's factored matrix, array-like
        too) and turns into it once that is the smaller. It then holds the
        training rows themselves: so do ``release()`` and a pickle of the
        estimator (the dense matrix holds only their weighted sum).
        Defined **only without a mechanism**: under 'laplace'/'gaussian' it
        is the raw ``Σ_j J_j`` of the rows (not covered by any claim), and
        under every mechanism it lives in the training state, never in a
        release.
    coef_cov_ : ndarray of shape (n_models, p1, p1)
        With ``inference=True``: the estimated covariance of each model's
        parameters ``(intercept, coef)`` (intercept first when
        ``fit_intercept``); NaN for a model without an estimate yet. Under
        'local-gaussian' it includes the privacy noise and, from the
        refined fit, the square of a bound on the pilot's error the
        refinement may have left, added to each variance (a bound on the
        mean squared error; NaN, with a NoiseDominatesWarning, where that
        bound exceeds 8 standard errors); it is formed from noised releases
        only (post-processing, covered as ``coef_``). :meth:`confint` then
        gives the bias-aware intervals (``private_refinement_.intervals``),
        narrower than a Wald interval on ``coef_se_``.
    coef_se_ : ndarray of shape (n_models, n_features)
        With ``inference=True``: standard errors of ``coef_``.
    intercept_se_ : ndarray of shape (n_models,)
        With ``inference=True``: standard errors of ``intercept_`` (0
        without an intercept).
    private_refinement_ : PrivateRefinement
        With ``mechanism='local-gaussian', inference=True``: the refinement's
        noised curvature releases, its pilot and the noise stds (releases
        and post-processing of them), which ``confint(method='bootstrap')``
        replays.
    n_batches_ : int
        Batches seen (``fit`` counts as one); public (the number of
        batches is public).
    n_samples_seen_ : float
        Total row weight seen; with a mechanism every row weighs one and
        this is the number of rows, public (batch sizes are public).
    n_iter_ : int
        Iterations of the last ``fit`` or ``partial_fit``; with a mechanism
        it is ``online_steps`` ('local-gaussian'; plus the 30 refinement
        steps with ``inference=True``, and 1 for its later batches) or 1 (Algorithm 2,
        'local-tree', 'local-blt', 'secagg-tree'), data-independent.
    privacy_spent_ : tuple of float
        ``(epsilon, delta)`` charged for the stream so far; ``(inf, 0.0)``
        without a mechanism (no finite guarantee). 'local-gaussian',
        'local-tree', 'local-blt': the exact
        ε at δ of the one Gaussian mechanism the stream is (``epsilon`` with the default
        analytic calibration, smaller with 'classic'/'zcdp'), fixed over the
        stream. 'secagg-tree': the ε at δ of its ρ (at most ``epsilon``).
        'laplace'/'gaussian': the sum over the stream's batches of
        the per-release ``(epsilon, delta)`` (basic composition), which is
        what the budget was charged; see Notes for what it does and does
        not cover.
    noise_scale_ : float
        Last noise scale: Laplace η or Gaussian τ of Algorithm 2, or the
        unit noise multiplier σ of 'local-gaussian' (a summary with
        sensitivity Δ gets noise of std ``σ Δ``) or of the sites' streams of
        'local-tree'/'local-blt' (of a site's share over ``γ`` under
        'secagg-tree'); 0 without a mechanism. A
        function of the hyperparameters and the (public) row count.
    rho_ : float or None
        Defined with a mechanism. ρ used by the last 'laplace'/'gaussian'
        release (a function of the hyperparameters and the row count); None
        under the site-local mechanisms.

    See Also
    --------
    sklearn.svm.LinearSVC : Hinge-loss linear classifier on pooled rows.

    Notes
    -----
    The paper's offline update (16) uses ``H̄`` (eq. 12) as if it were a
    global majorizer of the loss; it is not, so (16) need not descend.
    Here each Newton step is backtracked until the objective decreases
    enough, which makes every iterate a descent and the limit the minimizer
    of eq. 5. The smoothed curvature of eq. 8 is only the Newton model.

    **Differential privacy.** Neighbouring data differ in one row replaced
    (its features and label) by any other row; every row weighs one
    (``sample_weight`` and ``class_weight`` are refused with a mechanism),
    and each row is in one batch of the stream only: feeding a row twice
    is outside the guarantee. Batch sizes, the site of each row and the
    number of batches are public. So is the label set: it is declared
    (``classes``), never read from the rows, and a row with another label
    is refused.

    * ``'local-gaussian'`` (rigorous over the whole stream, against the
      server): each site adds Gaussian noise to every summary it sends —
      the gradient sums (L2 sensitivity ``2 C2``, as ``|V_q'| <= 1``), the
      curvature matrix at the previous estimate (upper triangle, Frobenius
      sensitivity ``sqrt(2) (q+1)²/q C2²``) and, in the first batch, the Gram
      matrix (``sqrt(2) C2²``). A batch makes ``K (online_steps + 1)``
      such releases (+1 in the first batch), ``K`` the number of one-vs-rest
      models (one for two classes), composed exactly as one Gaussian
      mechanism of sensitivity ``sqrt(releases)`` and calibrated to
      ``(epsilon, delta)``. Everything the server does after is
      post-processing (the PSD repair of noisy curvature, the trust region
      of radius R on each step), so every model released after every batch
      — the whole stream — is ``(epsilon, delta)``-DP for each row against
      the server and anyone who sees the messages or the models. Batches
      are disjoint (a row's summaries are released in its own batch only;
      later batches see them through noised sums), so the cost does not
      grow with the stream: the budget is charged once, as one Gaussian
      mechanism of noise multiplier σ and sensitivity ``sqrt(releases)``
      of the first batch (every batch has the same ratio), so it composes
      exactly with other Gaussian charges. With ``inference=True`` the
      fit (one batch) makes, per model, more releases from the pilot: 3
      exact curvatures ``Σ V_q''(u_i) x̄_i x̄_iᵀ`` (upper triangle,
      ``sqrt(2) (q+1)²/q C2²``) at ``σ / 1.5``, ``σ / 1.5`` and ``σ / 5``
      per unit of sensitivity (2.25, 2.25 and 25 releases), each followed
      by 10 gradient sums (sensitivity ``2 C2``, noise ``σ`` per unit), and
      with the third the score outer products ``Σ V_q'(u_i)² x̄_i x̄_iᵀ``
      (``sqrt(2) C2²``) at ``σ / 3`` (9 releases), so ``releases`` grows by
      ``K (30 + 38.5)`` and the one charge (and the claim above, for every
      site message and every released attribute,
      ``coef_se_``/``coef_cov_``/``private_refinement_`` included) covers
      them. ``confint(method='bootstrap')`` is
      post-processing of those releases (no further cost).
      Each later batch of such a stream releases instead, per model and
      at the previous estimate, the gradient sum only (its curvature and
      score variance are the first batch's released ones per row): ``K``
      unit releases, counted before any noise is drawn and calibrated, as
      one Gaussian mechanism, to the same ``(epsilon, delta)`` (the same
      ratio as the first batch's: the one charge covers them; see
      :mod:`~skfedpriv.linear_model._inference_private_stream`).
    * ``'laplace'`` / ``'gaussian'``: Algorithm 2 as published, one release
      per batch: ``θ_b`` minimizes the perturbed objective ``Q`` (eq. 41)
      over the ball ``‖θ - θ_{b-1}‖ <= R`` (objective perturbation over a
      convex set, Kifer et al. 2012) with ξ Laplace of scale
      ``η = T1 / (ε - T2)`` (ε-DP) or Gaussian with τ of step 7 (eq. 64,
      (ε, δ)-DP), ``T1``, ``Δ1`` computed with R in place of
      ``C_{p-1}/sqrt(N_{b-1})``. One-vs-rest models share the budget
      (``ε/K``, ``δ/K`` each). Before each charge a
      :class:`~skfedpriv.privacy.NoiseDominatesWarning` says when the
      expected norm of ξ exceeds the largest gradient sum the batch's rows
      could give (``n_b C2``; public quantities only). **What this covers:** the single release
      ``θ_b`` with respect to one row of batch ``D_b``, the earlier batches
      and releases held fixed, against an observer of the released models.
      **What it does not cover:** the server sees raw summaries (it is
      trusted), and a row of batch ``b`` also shapes every later release
      through the accumulated curvature ``J_b``; no accounting covers those
      later releases, so the stream as a whole carries no guarantee.
      Every batch is charged as a release: ``privacy_spent_`` is the sum
      of the per-release ``(epsilon, delta)`` over the stream's batches
      (basic composition), the figure the budget was charged. What it
      covers: each release, for the rows of its own batch, as above (the
      sum is what the releases cost if a row entered every one of them at
      its per-release cost). What it does not cover: the later releases a
      row shapes through ``J_b``, whose effect no sensitivity bound
      controls, so even the sum is not a proven guarantee for the stream
      as a whole. Use
      ``'local-gaussian'`` for a guarantee over the whole stream.
    * ``'local-tree'`` / ``'local-blt'`` (rigorous over the whole stream,
      against the server; adaptive continual release, Denisov et al. 2022,
      Thm. 2.1): at batch ``b`` each site forms, at the released
      ``θ_{b-1}``, the coefficients ``(a_b, J_b)`` of the second-order model
      of its rows' loss (its gradient at ``θ`` is ``a_b + J_b θ``; see
      :mod:`skfedpriv.privacy._continual_summaries`), each row's
      coefficients over the ``K`` models jointly clipped (the linear ones to
      norm 1, the curvature ones to ``(q+1)²/q``), so replacing a row moves
      the stacked ``a`` by at most ``2 C2`` and the stacked ``J`` by
      ``sqrt(2) (q+1)²/q C2²``. The site releases the prefix sums
      ``Σ_{j<=b} (a_j, J_j)`` continually, through a Honaker binary tree
      or an optimized BLT factorization ``A = B C`` of horizon
      ``n_batches``, with its own noise (the curvature part 4 times
      noisier per unit of sensitivity). A row is in one batch of one site,
      so the stream is one Gaussian mechanism of sensitivity the largest
      column norm of ``C``: every site's messages and every model released
      after every batch are ``(epsilon, delta)``-DP for each row, against
      the server and anyone who sees messages or models. The server
      minimizes the summed models plus the ridge (post-processing; the
      curvature below the noise's spectral norm is taken at that level).
      Batches should be of about equal size: before any charge the first
      batch's size times ``n_batches`` estimates the stream's rows, and a
      :class:`~skfedpriv.privacy.NoiseDominatesWarning` says when the noise
      of the summed linear term is expected to exceed the largest sum
      those rows could give (the model would be mostly noise). In this
      process (``fit``/``partial_fit``) or with remote sites that each
      hold their own stream
      (:class:`~skfedpriv.federated.ContinualSitePrivacy`); :meth:`fit_sites`
      with other sites raises ``NotImplementedError``. At small sizes (hundreds to
      tens of thousands of rows at ε = 1) the curvature is below the noise
      floor and the coefficients sit at their clip: the release is then a
      shrunk private class-mean-difference direction, whose accuracy is
      measured in ``benchmarks/README.md`` (issue #22) but whose
      ``decision_function`` is not on the non-private model's scale.

    * ``'secagg-tree'`` (rigorous over the whole stream, against the
      server and any coalition of sites that leaves ``honest_sites`` sites'
      noise unknown to it; distributed DP under secure aggregation, see
      :mod:`skfedpriv.linear_model._dwd_secagg`): the release of
      'local-tree', but each site scales and rounds its summaries to
      integers (scale ``γ`` fixed from public quantities), adds its own
      discrete Gaussian share to every tree node it completes, and the
      server sees only the sum over sites modulo ``2**32``. The sum of the
      honest sites' shares is calibrated (distributed discrete Gaussian,
      Kairouz, Liu & Steinke 2021, through zCDP; rounding enters the
      sensitivity as ``γ + sqrt(d)``), so the noise is about the central
      one, ``sqrt(n_sites)`` times less than 'local-tree''s summed noise.
      A site's own share does not protect it if its message is unmasked
      (failed secure aggregation, more than ``n_sites - honest_sites``
      colluders). Charged once per stream as one ρ-zCDP release
      (``mechanism='zcdp'``); ``noise_scale_`` is a site's share in the
      units of 'local-tree''s σ. In this process only, like 'local-tree'.

    **What to publish.** Every public fitted attribute is listed above
    with what covers it. The secret training state a stream needs to
    continue (the noise generator, the accumulated curvature, the
    parameters in solver layout, the stream's settings) is held in one
    private object, ``_training_state``, and the pickle of the fitted
    estimator carries it. Publish :meth:`release`, a fitted copy that
    predicts, scores and pickles without it (its ``partial_fit`` raises
    ``ReleasedModelError``); keep the training estimator private to
    continue the stream. A copy of the training estimator (pickle, deep copy) and its
    original continue the stream once from each point: the second
    continuation raises :class:`~skfedpriv.StreamReplayError` (in this
    process always; in another process only with a file ``budget``). A
    Pipeline or meta-estimator holding it: publish
    :func:`skfedpriv.release`.

    ``fit`` is one batch: with 'laplace'/'gaussian' it is one release from
    ``θ_0 = 0`` (a single step, as Algorithm 2 starts a stream). The privacy
    settings (mechanism, ε, δ, clip, ρ, R, calibration, ``online_steps``,
    ``q``, ``alpha``) are fixed for a stream: changing them between
    ``partial_fit`` calls raises ``ValueError``; ``fit`` starts a new stream.

    References
    ----------
    .. [1] Guo, Xie, Lu, Jiang, Dai, Kong (2025). Online federated learning
       for classification with generalized DWD. Eqs. 5, 16, 30-37, 41-45,
       61, 64, Algorithms 1-2.
    .. [2] Wang, B. and Zou, H. (2018). Another look at distance-weighted
       discrimination. JRSS-B 80(1), 177-198.
    .. [3] Luo, L. and Song, P. X.-K. (2020). Renewable estimation and
       incremental inference in generalized linear models with streaming
       data sets. JRSS-B 82(1), 69-97.
    .. [4] Kifer, D., Smith, A. and Thakurta, A. (2012). Private convex
       empirical risk minimization and high-dimensional regression. COLT.
    .. [5] Balle, B. and Wang, Y.-X. (2018). Improving the Gaussian mechanism
       for differential privacy: analytical calibration and optimal
       denoising. ICML.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skfedpriv import DWDClassifier
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> sites = [i % 3 for i in range(len(y))]
    >>> clf = DWDClassifier().fit(X, y, sample_group=sites)
    >>> round(clf.score(X, y), 2)
    0.99

    A private fit declares its labels; publish its release:

    >>> private = DWDClassifier(mechanism="local-gaussian", epsilon=1.0,
    ...                         clip_norm=6.0, classes=[0, 1])
    >>> published = private.fit(X, y, sample_group=sites).release()
    >>> bool((published.predict(X) == private.predict(X)).all())
    True
    >>> hasattr(published, "_training_state"), hasattr(published, "curvature_")
    (False, False)
    """

    def __init__(
        self,
        q=1.0,
        alpha=1e-3,
        fit_intercept=True,
        class_weight=None,
        max_iter=300,
        tol=1e-12,
        online_steps=10,
        n_jobs=None,
        random_state=None,
        mechanism=None,
        epsilon=1.0,
        delta=1e-5,
        clip_norm=None,
        rho=None,
        step_radius=None,
        calibration="analytic",
        budget=None,
        classes=None,
        n_batches=None,
        inference=False,
        honest_sites=None,
        shift_correction="auto",
    ):
        self.q = q
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.max_iter = max_iter
        self.tol = tol
        self.online_steps = online_steps
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.rho = rho
        self.step_radius = step_radius
        self.calibration = calibration
        self.budget = budget
        self.classes = classes
        self.n_batches = n_batches
        self.inference = inference
        self.honest_sites = honest_sites
        self.shift_correction = shift_correction

    _parameter_constraints = PARAMETER_CONSTRAINTS

    def fit(self, X, y, sample_group=None, sample_weight=None):
        """Offline federated fit on all rows (the paper's OffWP).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Sparse rows are used as CSR and never densified: the sites'
            sums are sparse products (the dense rows' model, to rounding);
            the curvature matrices are dense, ``(p + 1)²`` numbers per
            class model. A private fit clips CSR rows to ``clip_norm`` as
            dense rows; 'local-tree' / 'local-blt' densify 4096 rows at a
            time for their per-row clipping.
        y : array-like of shape (n_samples,)
        sample_group : array-like of shape (n_samples,), default=None
            Site of each row (any hashable labels); None is one site.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : DWDClassifier
        """
        return self._fit_batch(X, y, sample_group, sample_weight, new_stream=True)

    def partial_fit(self, X, y, sample_group=None, sample_weight=None, classes=None):
        """Update the model with one batch of a stream (renewable estimation).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Sparse rows as in :meth:`fit`.
        y : array-like of shape (n_samples,)
        sample_group : array-like of shape (n_samples,), default=None
            Site of each row of this batch.
        sample_weight : array-like of shape (n_samples,), default=None
        classes : array-like of shape (n_classes,), default=None
            All classes of the stream; required on the first call unless the
            ``classes`` hyperparameter declares them (then it must match).

        Raises
        ------
        ReleasedModelError
            On a release (see :meth:`release`), which holds no training state.

        Returns
        -------
        self : DWDClassifier
        """
        return self._fit_batch(X, y, sample_group, sample_weight, classes, new_stream=False)

    # -- parameters -------------------------------------------------------

    def _check_param_combinations(self, params):
        """Cross-parameter rules; returns the settings the update reads."""
        return dwd_settings(params)

    def fit_sites(self, sites, classes=None):
        """Offline federated fit on rows held at ``sites`` (``fit`` without rows).

        The same update as :meth:`fit` (same parameter checks, budget
        charges and errors), every sum over rows computed by the sites: a
        federated runtime (e.g. :mod:`skfedpriv.flower`) passes an object
        implementing :class:`~skfedpriv.linear_model.DWDSites`.

        Parameters
        ----------
        sites : DWDSites
            The sites of one batch.
        classes : array-like of shape (n_classes,), default=None
            The label set; default the ``classes`` hyperparameter, else the
            labels the sites report. Required under a privacy mechanism
            unless the hyperparameter declares it (private sites do not
            report their labels).

        Returns
        -------
        self : DWDClassifier
        """
        return self._fit_sites(sites, classes, new_stream=True)

    def partial_fit_sites(self, sites, classes=None):
        """Update the model with one batch held at ``sites`` (``partial_fit``
        without rows).

        The same update as :meth:`partial_fit` (checks, charges, errors:
        a release raises :class:`ReleasedModelError`), the sums over rows
        computed by the sites.

        Parameters
        ----------
        sites : DWDSites
            The sites of the next batch of the stream.
        classes : array-like of shape (n_classes,), default=None
            As for :meth:`partial_fit`: the stream's label set, needed on
            the first call unless the ``classes`` hyperparameter holds it.

        Returns
        -------
        self : DWDClassifier
        """
        return self._fit_sites(sites, classes, new_stream=False)

    def _check_call(self, settings, new_stream):
        if not new_stream and is_balanced_class_weight(self.class_weight):
            raise InvalidParameterError(
                "class_weight='balanced' is not supported by partial_fit (a "
                "stream has no class counts to balance by); pass a dict."
            )

    def _fit_sites(self, sites, classes, *, new_stream):
        """:meth:`_fit_batch` for a :class:`DWDSites`: validate, update, commit."""
        if not isinstance(sites, DWDSites):
            raise TypeError(f"sites must be a DWDSites, got {type(sites).__name__}.")
        settings, first = self._begin_call(new_stream)
        classes = self._sites_classes(classes, sites.labels(), first=first,
                                      new_stream=new_stream, who="sites")
        self._check_sites_width(sites.n_features, first=first, who="sites")
        release, training_state = self._update_sites(sites, classes, settings, first=first,
                                                     new_stream=new_stream)
        self._commit_sites(release, training_state, sites.n_features, first=first)
        return self

    def _class_weight_vector(self, classes, y=None):
        """The weight of each class (``class_weight``), or None; 'balanced'
        needs the batch's labels ``y``."""
        class_weight = self.class_weight
        if class_weight is None:
            return None
        if is_balanced_class_weight(class_weight):
            if y is None:
                raise InvalidParameterError(
                    "class_weight='balanced' needs the class counts of every site; "
                    "pass a dict."
                )
            present = np.unique(y)
            lookup = dict(zip(present.tolist(),
                              compute_class_weight("balanced", classes=present, y=y)))
        else:
            unknown = set(class_weight) - set(classes.tolist())
            if unknown:
                raise ValueError(
                    f"class_weight names labels {sorted(unknown, key=str)!r} "
                    f"that are not classes {classes!r}."
                )
            lookup = class_weight
        return np.array([float(lookup.get(c, 1.0)) for c in classes.tolist()])

    # -- the algorithm box ------------------------------------------------

    def _update(self, batch, classes, settings, *, first, new_stream):
        """Validated batch -> sites in this process -> :meth:`_update_sites`."""
        sites = SiteData.from_site_codes(batch.X, batch.y, batch.sample_weight,
                                         batch.site_codes, batch.n_sites, settings.n_jobs)
        return self._update_sites(sites, classes, settings, first=first, new_stream=new_stream,
                                  class_weight=self._class_weight_vector(classes, batch.y))

    def _update_sites(self, sites, classes, settings, *, first, new_stream=False,
                      class_weight=None):
        """One batch: sites -> summaries -> server update -> release.

        Pure: reads the estimator's stream state, writes nothing (the random
        generator is a copy); returns ``(release, training_state)``.
        """
        if settings.inference and not getattr(sites, "offers_inference", False):
            raise NotImplementedError(
                f"inference=True needs sites that send the inference summary; "
                f"{type(sites).__name__} does not offer it (private remote sites do not). "
                "Fit with inference=False."
            )
        if class_weight is None:
            class_weight = self._class_weight_vector(classes)
        private = settings.mechanism is not None
        sites.prepare(classes, fit_intercept=settings.fit_intercept,
                      class_weight=class_weight,
                      clip_norm=settings.clip_norm if private else None)
        n_models = count_models(classes)
        p1 = sites.n_features + int(settings.fit_intercept)
        stream = self._stream_start(first, p1, n_models, settings)
        shift_ratio = correction = published = chain_cov = remedy = None
        if settings.mechanism is None:
            corrected, remedy = self._shift_decision(first, new_stream, settings, p1, n_models)
            if settings.inference:
                require_every_side(stream.started, sites.two_sided, "DWDClassifier")
            # 'auto' started by fit: the fit batch's moments are imputed from the
            # later batches' (no summary asked here, fit's cost unchanged)
            impute = corrected and first and new_stream and settings.shift_correction == "auto"
            if corrected and not impute:
                check_second_order_sites(sites, p1, n_models, settings.shift_correction)
            theta, curvature, n_iter, started = _renewable_step(sites, stream, settings)
            step = dict(privacy_spent_=(math.inf, 0.0), noise_scale_=0.0)
            noise_var, rng = 0.0, None
            if settings.inference:
                coef_cov = chain_cov = _inference_step(sites, stream, settings, theta, curvature,
                                                       started)
                shift_ratio = track_stream_shift(
                    None if first else getattr(self._training_state, "shift_ratio", 0.0),
                    sites.weight_sum, stream.seen + sites.weight_sum, p1, "DWDClassifier",
                    stacklevel=6, remedy=remedy)
                if corrected:
                    published, coef_cov, correction = _second_order_step(
                        sites, stream, settings, theta, curvature, coef_cov,
                        None if first else self._training_state.shift_correction,
                        impute=impute)
                step.update(inference_attributes(coef_cov, settings.fit_intercept))
        else:
            mechanism = MECHANISMS[settings.mechanism]
            theta, curvature, n_iter, step, noise_var = mechanism(
                sites, stream, settings, first=first)
            started, rng = np.ones(n_models, dtype=bool), stream.rng
            chain_cov = step.get("coef_cov_")
        training_state = TrainingState(
            theta=theta,
            curvature=(0.0 if stream.prior is None else stream.prior) + curvature,
            started=started,
            stream_privacy=settings.stream_key(),
            rng=rng,
            curvature_noise_var=noise_var,
            extra=stream.extra or None,
            # a copy: the published coef_cov_ / private_refinement_ must not alias it
            coef_cov=None if chain_cov is None else chain_cov.copy(),
            shift_ratio=shift_ratio,
            shift_correction=correction,
            shift_remedy=remedy,
        )
        release = dict(
            step,
            classes_=classes,
            n_samples_seen_=stream.seen + sites.weight_sum,
            n_batches_=stream.n_batches + 1,
            n_iter_=n_iter,
        )
        if settings.mechanism is None:
            # a raw statistic of the rows: public only without a mechanism
            release["curvature_"] = training_state.curvature
        if published is not None:
            theta = published  # the chain goes on from training_state.theta
        if settings.fit_intercept:
            release["intercept_"], release["coef_"] = theta[0].copy(), theta[1:].T.copy()
        else:
            release["intercept_"], release["coef_"] = np.zeros(theta.shape[1]), theta.T.copy()
        return release, training_state

    def _shift_decision(self, first, new_stream, settings, p1, n_models):
        """Whether this non-private stream with ``inference=True`` publishes
        the second-order correction, and the sentence its
        ``StreamShiftWarning`` says about it. Decided at the stream's first
        batch from ``shift_correction``, the parameter layout and whether
        ``fit`` started the stream (:func:`~._second_order.uses_second_order`;
        never from the data or the sites), then kept by the training state."""
        if not settings.inference:
            return False, None
        if not first:
            training = self._training_state
            return (getattr(training, "shift_correction", None) is not None,
                    getattr(training, "shift_remedy", None) or "")
        option = settings.shift_correction
        corrected = uses_second_order(option, p1, n_models)
        return corrected, shift_remedy(option, corrected, p1, n_models,
                                       from_fit=corrected and new_stream and option == "auto")

    def _check_continuation(self, settings):
        """Refuse a continuation whose settings differ from the stream's."""
        self._check_settings_unchanged(settings, self._training_state.stream_privacy)

    def _stream_start(self, first, p1, n_models, settings):
        """What the update starts from: nothing on a new stream, else the
        parameters and the accumulated curvature of the earlier batches, and
        the batch's noise generator (a copy of the stream's, so a call that
        raises leaves the stream's generator untouched)."""
        private = settings.mechanism is not None
        if first:
            if private:
                warn_if_seeded(settings.random_state, "DWDClassifier")
            return DWDStream(
                theta=np.zeros((p1, n_models)), prior=None, seen=0.0, n_batches=0,
                started=np.zeros(n_models, dtype=bool), curvature_noise_var=0.0,
                privacy_spent=None, coef_cov=None,
                rng=as_generator(settings.random_state) if private else None, extra={},
            )
        training = self._training_state
        return DWDStream(
            theta=training.theta, prior=training.curvature, seen=self.n_samples_seen_,
            n_batches=self.n_batches_, started=training.started,
            curvature_noise_var=training.curvature_noise_var,
            coef_cov=getattr(training, "coef_cov", None),
            privacy_spent=self.privacy_spent_,
            rng=copy.deepcopy(training.rng),
            extra=copy.deepcopy(getattr(training, "extra", None)) or {},
        )
