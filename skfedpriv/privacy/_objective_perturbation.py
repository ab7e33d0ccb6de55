"""Privacy math of :class:`~skfedpriv.DWDClassifier`: bounds, calibration, noise.

Every bound below comes from the enforced clipping of the augmented rows,
``‖x̄_i‖₂ <= C2`` (``clip_norm``, :func:`clip_augmented_rows`), and from the
loss (a :mod:`skfedpriv._loss` object; genDWD: ``|V_q'| <= 1`` and
``0 <= Ṽ_q'' <= (q+1)²/q``). Rows weigh one. Two mechanisms use them:

* objective perturbation as published (Algorithm 2): the noise ξ of the
  perturbed objective (eq. 41), calibrated by :class:`PublishedCalibration`;
* site-local Gaussian: each site adds Gaussian noise to every summary it
  sends (:func:`site_noise`), of std ``σ Δ`` with σ the unit noise
  multiplier (:func:`local_gaussian_sigma`) and Δ the summary's sensitivity
  (:func:`summary_sensitivity`).

The server-side solver math that uses the noisy numbers (post-processing)
lives in :mod:`skfedpriv.linear_model._dwd_private`.

References
----------
.. [1] Guo et al. (2025), section 5, Algorithm 2, Conditions 1-2, eqs. 41-45,
   proof of Theorem 2 (eqs. 53-69).
.. [2] Kifer, Smith, Thakurta (2012). Private convex empirical risk
   minimization and high-dimensional regression. COLT, Theorem 1
   (objective perturbation over a closed convex set).
.. [3] Balle, B. and Wang, Y.-X. (2018). Improving the Gaussian mechanism
   for differential privacy: analytical calibration and optimal denoising.
   ICML.
"""

import functools
import math

import numpy as np

from .._loss import as_loss
from .._param_validation import InvalidParameterError, Registry
from ._calibration import gaussian_sigma
from ._clipping import clip_rows
from ._mechanisms import gaussian_noise, laplace_noise, symmetric_gaussian_noise

__all__ = [
    "CALIBRATIONS",
    "PublishedCalibration",
    "SUMMARY_KINDS",
    "check_augmented_clip_norm",
    "clip_augmented_rows",
    "curvature_sensitivity",
    "gradient_sensitivity",
    "gram_sensitivity",
    "local_gaussian_releases",
    "local_gaussian_sigma",
    "site_noise",
    "summary_sensitivity",
]

# -- bounds ------------------------------------------------------------------


def check_augmented_clip_norm(clip_norm, fit_intercept):
    """Raise :class:`~skfedpriv._param_validation.InvalidParameterError` when
    no row fits: with an intercept ``‖(1, x)‖₂ >= 1``, so ``clip_norm`` must
    exceed 1."""
    if fit_intercept and clip_norm <= 1.0:
        raise InvalidParameterError(
            "clip_norm bounds the norm of (1, x) when fit_intercept=True and "
            f"must be > 1, got {clip_norm!r}."
        )


def clip_augmented_rows(X, clip_norm, fit_intercept):
    """Scale rows so that ``‖(1, x_i)‖₂ <= clip_norm`` (or ``‖x_i‖₂`` without
    intercept). Rows inside the ball are unchanged."""
    check_augmented_clip_norm(clip_norm, fit_intercept)
    if fit_intercept:
        return clip_rows(X, math.sqrt(clip_norm**2 - 1.0))
    return clip_rows(X, clip_norm)


def gradient_sensitivity(clip_norm, loss=None):
    """L2 change of a gradient sum when one row is replaced: ``2 D C2``,
    ``D`` the loss's derivative bound (1 for genDWD, the default)."""
    bound = 1.0 if loss is None else _derivative_bound(as_loss(loss))
    return 2.0 * bound * clip_norm


def _derivative_bound(loss):
    """The loss's ``|ℓ'|`` bound; ValueError when it has none (a gradient
    sum of clipped rows is then unbounded: no sensitivity)."""
    if not math.isfinite(loss.derivative_bound):
        raise ValueError(
            f"the {loss.name} loss has an unbounded derivative: clipping the rows "
            "bounds no gradient sum, so no mechanism here can be calibrated for it."
        )
    return loss.derivative_bound


def curvature_sensitivity(loss, clip_norm):
    """Frobenius change of ``Σ Ṽ''(u_i) x̄_i x̄_iᵀ`` when one row is replaced.

    ``loss``: a loss object, or genDWD's ``q``. Both rank-one terms are PSD
    with Frobenius norm ``<= c C2²``, ``c`` the loss's curvature bound
    (``(q+1)²/q`` for genDWD); for
    PSD ``A, B``, ``‖A - B‖_F² = ‖A‖² + ‖B‖² - 2 tr(AB) <= ‖A‖² + ‖B‖²``.
    The upper triangle (what the symmetric noise perturbs) changes by at
    most as much.
    """
    return math.sqrt(2.0) * as_loss(loss).curvature_bound * clip_norm**2


def gram_sensitivity(clip_norm):
    """Frobenius change of ``Σ x̄_i x̄_iᵀ`` when one row is replaced."""
    return math.sqrt(2.0) * clip_norm**2


# -- site-local Gaussian ------------------------------------------------------

#: Gaussian calibrations of 'local-gaussian': name -> ``(epsilon, delta,
#: sensitivity) -> sigma``: the exact analytic Gaussian mechanism [3]_, or
#: the classic / zCDP conversions.
CALIBRATIONS = Registry("calibration", {
    name: functools.partial(gaussian_sigma, method=name)
    for name in ("analytic", "classic", "zcdp")
})


def local_gaussian_releases(n_models, online_steps, first):
    """Number of unit-sensitivity Gaussian releases a batch makes.

    Each class model releases ``online_steps`` gradients and one curvature
    matrix; the first batch also releases the Gram matrix (shared by the
    models).
    """
    return n_models * (online_steps + 1) + (1 if first else 0)


def local_gaussian_sigma(epsilon, delta, n_releases, calibration):
    """Noise multiplier of a unit-sensitivity release, for ``n_releases``
    composed adaptively: together one Gaussian mechanism of L2 sensitivity
    ``sqrt(n_releases)``."""
    return CALIBRATIONS[calibration](epsilon, delta, math.sqrt(n_releases))


def _gradient_noise(std, p1, n_models, rng):
    return gaussian_noise(std, (p1, n_models), random_state=rng)


def _curvature_noise(std, p1, n_models, rng):
    return np.stack([
        symmetric_gaussian_noise(p1, std, random_state=rng) for _ in range(n_models)
    ])


def _gram_noise(std, p1, n_models, rng):
    return symmetric_gaussian_noise(p1, std, random_state=rng)


#: The summaries a site releases under 'local-gaussian': kind -> (its
#: sensitivity ``(loss, clip_norm) -> Δ``, the noise one site adds to it).
SUMMARY_KINDS = Registry("noised summary", {
    "gradient": (lambda loss, clip_norm: gradient_sensitivity(clip_norm, loss), _gradient_noise),
    "curvature": (curvature_sensitivity, _curvature_noise),
    "gram": (lambda loss, clip_norm: gram_sensitivity(clip_norm), _gram_noise),
})


def summary_sensitivity(kind, loss, clip_norm):
    """Sensitivity Δ of one site's summary ``kind`` ('gradient', 'curvature'
    or 'gram') when one of its rows is replaced (``loss``: a loss object or
    genDWD's ``q``)."""
    return SUMMARY_KINDS[kind][0](loss, clip_norm)


def site_noise(kind, std, p1, n_models, random_state):
    """The Gaussian noise one site adds to its summary ``kind``.

    'gradient': ``N(0, std²)`` entries of shape ``(p1, n_models)``;
    'curvature': one symmetric matrix (upper triangle i.i.d.) per model,
    shape ``(n_models, p1, p1)``; 'gram': one symmetric ``(p1, p1)`` matrix.
    """
    return SUMMARY_KINDS[kind][1](std, p1, n_models, random_state)


# -- Algorithm 2 as published -------------------------------------------------


class PublishedCalibration:
    """Noise of Algorithm 2 for one release (eqs. 61, 64, Condition 2).

    Parameters
    ----------
    mechanism : {'laplace', 'gaussian'}
    epsilon, delta : float
        Budget of this release for one class model.
    loss : loss object or float
        The loss (:mod:`skfedpriv._loss`; a float is genDWD's ``q``): its
        derivative and curvature bounds enter T1, T2 and Δ1.
    alpha : float
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

    def __init__(self, mechanism, epsilon, delta, *, loss, alpha, clip_norm, step_radius, rho,
                 p1, n_seen):
        loss = as_loss(loss)
        bound, slope = loss.curvature_bound, _derivative_bound(loss)
        c2 = clip_norm
        c1 = math.sqrt(p1) * c2
        floor = n_seen * alpha
        # T2 <= min(1/2, eps/2) <=> bound C2² / (Nλ + ρ) <= exp(min(1, eps)/4) - 1
        needed = bound * c2**2 / math.expm1(min(1.0, epsilon) / 4.0)
        self.rho = max(0.0, needed - floor) if rho is None else float(rho)
        self.t2 = 2.0 * math.log1p(bound * c2**2 / (floor + self.rho)) if floor + self.rho > 0 else math.inf
        self.t1 = 2.0 * slope * c1 + 2.0 * bound * c1 * c2 * step_radius
        self.delta_1 = 2.0 * slope * c2 + 2.0 * bound * c2**2 * step_radius
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
        """The noise ξ of one class model's perturbed objective."""
        if self.mechanism == "laplace":
            return laplace_noise(self.scale, shape, random_state=rng)
        return gaussian_noise(self.scale, shape, random_state=rng)
