"""Privacy parameters and noise calibration: functions of numbers only.

Everything here is a function of (ε, δ, σ, Δ, ρ); no data is read. The
sensitivity ``Δ`` passed to these functions is the caller's claim about the
neighbouring relation it uses (in this package: one row replaced), and it is
made true by clipping (:mod:`skfedpriv.privacy._clipping`), never by reading a
bound from the data.

Contents
--------
* validation: :func:`check_privacy_params`;
* calibration: :func:`laplace_scale`, :func:`gaussian_sigma`;
* the Gaussian privacy profile: :func:`gaussian_delta`, :func:`gaussian_epsilon`;
* zero-concentrated DP: :func:`gaussian_zcdp`, :func:`zcdp_rho`, :func:`zcdp_to_dp`.
"""

import math
import numbers

import numpy as np
from scipy.optimize import brentq, minimize_scalar
from scipy.special import log_ndtr

__all__ = [
    "check_privacy_params",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_sigma",
    "gaussian_zcdp",
    "laplace_scale",
    "zcdp_rho",
    "zcdp_to_dp",
]


def _check_real(value, name):
    """Return ``value`` as a float; reject bools, strings, complex, None."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a real number, got {value!r} of type "
            f"{type(value).__name__}."
        )
    return float(value)


def _check_positive_finite(value, name):
    value = _check_real(value, name)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}.")
    return value


def _check_gaussian(sigma, sensitivity):
    """Validate the noise σ and L2 sensitivity Δ of a Gaussian release."""
    return (_check_positive_finite(sigma, "sigma"),
            _check_positive_finite(sensitivity, "sensitivity"))


def _check_delta(delta, name="delta", *, positive=False):
    delta = _check_real(delta, name)
    if positive:
        if not 0.0 < delta < 1.0:
            raise ValueError(f"{name} must satisfy 0 < {name} < 1, got {delta!r}.")
    elif not 0.0 <= delta < 1.0:
        raise ValueError(f"{name} must satisfy 0 <= {name} < 1, got {delta!r}.")
    return delta


def check_privacy_params(epsilon, delta=0.0, *, require_delta=False):
    """Validate a pair of differential-privacy parameters.

    Parameters
    ----------
    epsilon : float
        Privacy loss bound ε. Must be a real number (not a bool), finite and
        strictly positive. NaN and ±inf are rejected.
    delta : float, default=0.0
        Failure probability δ. Must be a real number with ``0 <= delta < 1``.
    require_delta : bool, default=False
        If True, ``delta`` must be strictly positive (as the Gaussian
        mechanism requires).

    Returns
    -------
    epsilon, delta : tuple of float
        The validated values as Python floats.

    Raises
    ------
    TypeError
        If a parameter is not a real number (e.g. a string, ``None`` or a
        bool).
    ValueError
        If a parameter is NaN, infinite or out of range. The message names
        the parameter.

    References
    ----------
    .. [1] C. Dwork and A. Roth, "The Algorithmic Foundations of Differential
       Privacy", Found. Trends Theor. Comput. Sci. 9(3-4), 2014, Def. 2.4
       ((ε, δ)-differential privacy).

    Examples
    --------
    >>> from skfedpriv.privacy import check_privacy_params
    >>> check_privacy_params(1, 1e-5)
    (1.0, 1e-05)
    >>> check_privacy_params(float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: epsilon must be finite and > 0, got nan.
    """
    epsilon = _check_positive_finite(epsilon, "epsilon")
    delta = _check_delta(delta, "delta", positive=require_delta)
    return epsilon, delta


def laplace_scale(epsilon, sensitivity):
    """Scale ``b`` of the Laplace mechanism for ε-differential privacy.

    Parameters
    ----------
    epsilon : float
        Target ε, finite and > 0.
    sensitivity : float
        L1 sensitivity Δ₁ of the released quantity, finite and > 0.

    Returns
    -------
    scale : float
        ``b = Δ₁ / ε``; adding iid Laplace(0, b) noise to every coordinate is
        ε-DP (with δ = 0).

    References
    ----------
    .. [1] C. Dwork and A. Roth, "The Algorithmic Foundations of Differential
       Privacy", 2014, Def. 3.3 and Thm. 3.6 (Laplace mechanism).

    Examples
    --------
    >>> from skfedpriv.privacy import laplace_scale
    >>> laplace_scale(0.5, 2.0)
    4.0
    """
    epsilon, _ = check_privacy_params(epsilon)
    sensitivity = _check_positive_finite(sensitivity, "sensitivity")
    return sensitivity / epsilon


def _log_delta_mu(mu, epsilon):
    """log δ(ε) of the Gaussian mechanism with signal-to-noise μ = Δ/σ.

    δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ)   (Balle & Wang 2018, Thm. 8),
    evaluated in log space with ``log_ndtr`` so that large ε and small δ stay
    accurate.
    """
    if mu == 0.0:
        return -math.inf
    if math.isinf(mu):
        return 0.0 if math.isfinite(epsilon) else -math.inf
    a = mu / 2.0 - epsilon / mu
    b = -mu / 2.0 - epsilon / mu
    x = float(log_ndtr(a))
    y = epsilon + float(log_ndtr(b))
    if y >= x:  # only by rounding, in the δ -> 0 limit
        return -math.inf
    return x + math.log(-math.expm1(y - x))


def gaussian_delta(sigma, epsilon, sensitivity):
    """Exact privacy profile δ(ε) of the Gaussian mechanism.

    For a query with L2 sensitivity Δ released with iid N(0, σ²) noise on each
    coordinate, the mechanism is (ε, δ)-DP if and only if ``δ >= δ(ε)`` with

    .. math::

        \\delta(\\varepsilon) = \\Phi\\Big(\\frac{\\Delta}{2\\sigma}
        - \\frac{\\varepsilon\\sigma}{\\Delta}\\Big)
        - e^{\\varepsilon}\\,\\Phi\\Big(-\\frac{\\Delta}{2\\sigma}
        - \\frac{\\varepsilon\\sigma}{\\Delta}\\Big).

    The value depends on σ and Δ only through ``μ = Δ/σ``.

    Parameters
    ----------
    sigma : float
        Noise standard deviation, finite and > 0.
    epsilon : float
        ε at which to evaluate the profile, finite and >= 0.
    sensitivity : float
        L2 sensitivity Δ, finite and > 0.

    Returns
    -------
    delta : float
        The smallest δ for which the mechanism is (ε, δ)-DP.

    References
    ----------
    .. [1] B. Balle and Y.-X. Wang, "Improving the Gaussian Mechanism for
       Differential Privacy: Analytical Calibration and Optimal Denoising",
       ICML 2018, Theorem 8.

    Examples
    --------
    >>> from skfedpriv.privacy import gaussian_delta
    >>> round(gaussian_delta(1.0, 0.0, 1.0), 6)   # 2Φ(1/2) − 1
    0.382925
    """
    sigma, sensitivity = _check_gaussian(sigma, sensitivity)
    epsilon = _check_real(epsilon, "epsilon")
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}.")
    return math.exp(_log_delta_mu(sensitivity / sigma, epsilon))


def _epsilon_for_mu(mu, delta):
    """Smallest ε >= 0 with δ_μ(ε) <= δ (exact, Balle & Wang 2018)."""
    log_delta = math.log(delta)
    if _log_delta_mu(mu, 0.0) <= log_delta:
        return 0.0

    def f(eps):
        return _log_delta_mu(mu, eps) - log_delta

    lo, hi = 0.0, 1.0
    for _ in range(2000):
        if f(hi) <= 0:
            break
        lo, hi = hi, 2.0 * hi
    else:  # pragma: no cover - needs mu ~ 1e300
        return math.inf
    eps = brentq(f, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    # Round towards the conservative side: δ(ε), as gaussian_delta computes
    # it, must not exceed the target.
    step = 1e-14
    for _ in range(200):
        if math.exp(_log_delta_mu(mu, eps)) <= delta:
            break
        eps = eps * (1 + step) + step
        step *= 2.0
    return eps


def gaussian_epsilon(sigma, delta, sensitivity):
    """Exact ε of the Gaussian mechanism at a given δ.

    The inverse of :func:`gaussian_delta` in ε: the smallest ``ε >= 0`` such
    that the Gaussian mechanism with noise σ and L2 sensitivity Δ is
    (ε, δ)-DP. Computed by root finding on the exact profile; the returned
    value is rounded up so that ``gaussian_delta(sigma, eps, sensitivity) <=
    delta`` holds in floating point.

    Parameters
    ----------
    sigma : float
        Noise standard deviation, finite and > 0.
    delta : float
        Target δ with ``0 < delta < 1``.
    sensitivity : float
        L2 sensitivity Δ, finite and > 0.

    Returns
    -------
    epsilon : float

    See Also
    --------
    gaussian_delta : the exact profile it inverts, with its reference.

    Examples
    --------
    >>> from skfedpriv.privacy import gaussian_epsilon, gaussian_sigma
    >>> s = gaussian_sigma(1.0, 1e-5, 1.0)
    >>> round(gaussian_epsilon(s, 1e-5, 1.0), 8)
    1.0
    """
    sigma, sensitivity = _check_gaussian(sigma, sensitivity)
    delta = _check_delta(delta, positive=True)
    return _epsilon_for_mu(sensitivity / sigma, delta)


_SIGMA_METHODS = ("analytic", "classic", "zcdp")


def gaussian_sigma(epsilon, delta, sensitivity, method="analytic"):
    """Noise standard deviation σ of the Gaussian mechanism for (ε, δ)-DP.

    Parameters
    ----------
    epsilon, delta : float
        The target guarantee: ε finite and > 0, ``0 < delta < 1``.
    sensitivity : float
        L2 sensitivity Δ of the released quantity, finite and > 0.
    method : {"analytic", "classic", "zcdp"}, default="analytic"
        * ``"analytic"``: the exact analytic Gaussian mechanism [1]_, the
          smallest σ with
          ``Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) <= δ``. Valid (and
          optimal) for every ε > 0. Solved by Brent's method on ``log(Δ/σ)``
          with ``scipy.special.log_ndtr``; rounded up so the inequality holds
          in floating point.
        * ``"classic"``: ``σ = Δ √(2 ln(1.25/δ)) / ε`` [2]_. The theorem is
          only proven for ε < 1; for ε >= 1 the value is still returned but
          carries no guarantee.
        * ``"zcdp"``: calibrate to ρ-zCDP with
          ``ρ = (√(ε + ln(1/δ)) − √(ln(1/δ)))²`` (the inverse of the
          conversion ``ε = ρ + 2√(ρ ln(1/δ))``, [3]_ Prop. 1.3) and return
          ``σ = Δ / √(2ρ)`` ([3]_ Prop. 1.6). Valid for every ε > 0, looser
          than ``"analytic"``.

    Returns
    -------
    sigma : float

    Notes
    -----
    At the papers' settings the classic and zCDP calibrations add roughly
    1.25–1.65 times the analytic σ; see the tests for exact ratios.

    References
    ----------
    .. [1] B. Balle and Y.-X. Wang, "Improving the Gaussian Mechanism for
       Differential Privacy: Analytical Calibration and Optimal Denoising",
       ICML 2018, Theorem 8 and Algorithm 1.
    .. [2] C. Dwork and A. Roth, "The Algorithmic Foundations of Differential
       Privacy", 2014, Theorem A.1.
    .. [3] M. Bun and T. Steinke, "Concentrated Differential Privacy:
       Simplifications, Extensions, and Lower Bounds", TCC 2016,
       Propositions 1.3 and 1.6.

    Examples
    --------
    >>> from skfedpriv.privacy import gaussian_sigma
    >>> round(gaussian_sigma(1.0, 1e-5, 1.0), 4)
    3.7306
    >>> round(gaussian_sigma(1.0, 1e-5, 1.0, method="classic"), 4)
    4.8448
    """
    epsilon, delta = check_privacy_params(epsilon, delta, require_delta=True)
    sensitivity = _check_positive_finite(sensitivity, "sensitivity")
    if method == "classic":
        return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
    if method == "zcdp":
        return sensitivity / math.sqrt(2.0 * zcdp_rho(epsilon, delta))
    if method != "analytic":
        raise ValueError(
            f"method must be one of {_SIGMA_METHODS}, got {method!r}."
        )
    log_delta = math.log(delta)

    def f(log_mu):
        return _log_delta_mu(math.exp(log_mu), epsilon) - log_delta

    # δ_μ(ε) increases from 0 (μ -> 0) to 1 (μ -> ∞): bracket the root.
    lo, hi = 0.0, 0.0
    for _ in range(2000):
        if f(lo) <= 0:
            break
        lo -= 1.0
    for _ in range(2000):
        if f(hi) >= 0:
            break
        hi += 1.0
    if lo == hi:
        log_mu = lo
    else:
        log_mu = brentq(f, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps,
                        maxiter=500)
    sigma = sensitivity / math.exp(log_mu)
    # Round towards the conservative side (larger σ), checking δ exactly as
    # gaussian_delta(sigma, epsilon, sensitivity) computes it.
    step = 1e-14
    for _ in range(200):
        if math.exp(_log_delta_mu(sensitivity / sigma, epsilon)) <= delta:
            break
        sigma = sigma * (1 + step)
        step = min(2.0 * step, 0.5)
    return sigma


def gaussian_zcdp(sigma, sensitivity):
    """zCDP parameter ρ of the Gaussian mechanism.

    Parameters
    ----------
    sigma : float
        Noise standard deviation, finite and > 0.
    sensitivity : float
        L2 sensitivity Δ, finite and > 0.

    Returns
    -------
    rho : float
        ``ρ = Δ² / (2σ²)``; the mechanism is ρ-zCDP, and ρ-zCDP composes by
        adding the ρ's.

    References
    ----------
    .. [1] M. Bun and T. Steinke, "Concentrated Differential Privacy:
       Simplifications, Extensions, and Lower Bounds", TCC 2016,
       Proposition 1.6 (Gaussian) and Lemma 2.3 (composition).

    Examples
    --------
    >>> from skfedpriv.privacy import gaussian_zcdp
    >>> gaussian_zcdp(2.0, 1.0)
    0.125
    """
    sigma, sensitivity = _check_gaussian(sigma, sensitivity)
    return sensitivity**2 / (2.0 * sigma**2)


def zcdp_rho(epsilon, delta):
    """Largest ρ whose simple conversion ``ρ + 2√(ρ ln(1/δ))`` is at most ε.

    Parameters
    ----------
    epsilon, delta : float
        The target guarantee: ε finite and > 0, ``0 < delta < 1``.

    Returns
    -------
    rho : float
        ``ρ = (√(ε + ln(1/δ)) − √(ln(1/δ)))²``. A ρ-zCDP mechanism is then
        (ε, δ)-DP.

    References
    ----------
    .. [1] M. Bun and T. Steinke, "Concentrated Differential Privacy:
       Simplifications, Extensions, and Lower Bounds", TCC 2016,
       Proposition 1.3.

    Examples
    --------
    >>> from skfedpriv.privacy import zcdp_rho
    >>> round(zcdp_rho(1.0, 1e-5), 6)
    0.02082
    """
    epsilon, delta = check_privacy_params(epsilon, delta, require_delta=True)
    log_inv = -math.log(delta)
    # (√(ε+L) − √L)² = ε² / (√(ε+L) + √L)²: cancellation-free form.
    return epsilon**2 / (math.sqrt(epsilon + log_inv) + math.sqrt(log_inv)) ** 2


def _zcdp_eps_at_order(alpha, rho, log_inv_delta):
    """CKS 2020 Prop. 12 bound at Rényi order α > 1, RDP value τ = αρ."""
    return (
        alpha * rho
        + (log_inv_delta - math.log(alpha)) / (alpha - 1.0)
        + math.log1p(-1.0 / alpha)
    )


def zcdp_to_dp(rho, delta):
    """Convert ρ-zCDP to (ε, δ)-DP with the conversion of Canonne et al.

    Returns

    .. math::

        \\varepsilon = \\min\\Big(\\rho + 2\\sqrt{\\rho\\ln(1/\\delta)},\\;
        \\inf_{\\alpha>1}\\; \\alpha\\rho
        + \\frac{\\ln(1/(\\alpha\\delta))}{\\alpha-1}
        + \\ln(1 - 1/\\alpha)\\Big),

    clipped at 0. The second term is Proposition 12 / Corollary 13 of [1]_
    applied to the Rényi curve ``τ(α) = αρ`` of ρ-zCDP; every α > 1 gives a
    valid bound, so the numerical minimisation over α only affects
    tightness, never validity. The first term is the simple bound that
    :func:`zcdp_rho` inverts (Bun and Steinke, Prop. 1.3), which the second
    never exceeds.

    Parameters
    ----------
    rho : float
        zCDP parameter, finite and >= 0.
    delta : float
        Target δ, ``0 < delta < 1``.

    Returns
    -------
    epsilon : float
        A valid ε such that every ρ-zCDP mechanism is (ε, δ)-DP.

    References
    ----------
    .. [1] C. L. Canonne, G. Kamath and T. Steinke, "The Discrete Gaussian for
       Differential Privacy", NeurIPS 2020, Proposition 12 and Corollary 13.

    Examples
    --------
    >>> from skfedpriv.privacy import zcdp_to_dp
    >>> rho = 0.05
    >>> eps = zcdp_to_dp(rho, 1e-5)
    >>> eps < rho + 2 * (rho * 11.512925464970229) ** 0.5
    True
    """
    rho = _check_real(rho, "rho")
    if not (math.isfinite(rho) and rho >= 0):
        raise ValueError(f"rho must be finite and >= 0, got {rho!r}.")
    delta = _check_delta(delta, positive=True)
    if rho == 0.0:
        return 0.0
    log_inv = -math.log(delta)
    simple = rho + 2.0 * math.sqrt(rho * log_inv)

    def g(t):  # α = 1 + e^t covers α > 1
        try:
            value = _zcdp_eps_at_order(1.0 + math.exp(t), rho, log_inv)
        except (OverflowError, ValueError):
            return math.inf
        return value if math.isfinite(value) else math.inf

    # The minimiser of the simple bound's α-curve is α = 1 + √(L/ρ): start there.
    t0 = 0.5 * (math.log(log_inv) - math.log(rho))
    candidates = [simple, g(t0)]
    try:
        res = minimize_scalar(
            g, bracket=(t0 - 1.0, t0 + 1.0), method="brent",
            options={"xtol": 1e-12},
        )
        # Re-evaluate at the returned order: any α > 1 gives a valid bound.
        candidates.append(g(float(res.x)))
    except (RuntimeError, ValueError, OverflowError):  # pragma: no cover
        pass
    return max(0.0, min(candidates))
