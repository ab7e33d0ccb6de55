"""The distributed discrete Gaussian: integer noise shares whose sum is private.

Each of ``n`` parties adds an independent discrete Gaussian vector
``N_Z(0, σ²)^d`` (``P(x) ∝ exp(-x² / (2σ²))`` on the integers) to an integer
vector; only the sum reaches the analyst. Kairouz, Liu and Steinke (2021,
Prop. 14) bound the Rényi divergence of that sum between integer inputs
differing by at most ``Δ`` in L2 norm, for ``σ >= 1/2``:

``D_α <= α Δ² / (2 n σ²) + τ d``,  ``τ = 10 Σ_{k=1}^{n-1} exp(-2π² σ² k/(k+1))``,

so the sum is ``ρ``-zCDP with ``ρ = Δ² / (2 n σ²) + τ d`` (``τ d <= α τ d`` for
``α >= 1``); :func:`~skfedpriv.privacy.zcdp_to_dp` converts it (Canonne,
Kamath and Steinke 2020, Prop. 12). For one party (``n = 1``) ``τ = 0``: the
discrete Gaussian itself is exactly as private as the continuous one in zCDP
(CKS 2020, Thm. 4). The sampler is CKS 2020 Algorithm 3 (rejection from a
discrete Laplace), vectorized; its acceptance test is computed in floating
point, the release itself is an integer.

References
----------
.. [1] Canonne, Kamath, Steinke (2020). The discrete Gaussian for
   differential privacy. NeurIPS. Algorithm 3, Theorem 4, Proposition 12.
.. [2] Kairouz, Liu, Steinke (2021). The distributed discrete Gaussian
   mechanism for federated learning with secure aggregation. ICML, Prop. 14.
"""

import math

import numpy as np
from scipy.optimize import brentq

from ._calibration import check_privacy_params, zcdp_to_dp

__all__ = [
    "discrete_gaussian",
    "distributed_rho",
    "distributed_sigma",
    "distributed_epsilon",
]

#: Smallest per-party σ the bound of Kairouz, Liu and Steinke holds for.
MIN_SIGMA = 0.5


def discrete_gaussian(rng, sigma, size):
    """Draw iid ``N_Z(0, σ²)`` integers (CKS 2020, Algorithm 3).

    Parameters
    ----------
    rng : numpy.random.Generator
    sigma : float
        Scale, > 0.
    size : int or tuple of int

    Returns
    -------
    draws : ndarray of int64
    """
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be finite and > 0, got {sigma!r}.")
    shape = (size,) if np.isscalar(size) else tuple(size)
    out = np.empty(int(np.prod(shape)), dtype=np.int64)
    todo = np.arange(out.size)
    t = math.floor(sigma) + 1
    success = -math.expm1(-1.0 / t)  # discrete Laplace(t) = difference of geometrics
    while todo.size:
        y = rng.geometric(success, todo.size) - rng.geometric(success, todo.size)
        accept = rng.random(todo.size) < np.exp(
            -((np.abs(y) - sigma**2 / t) ** 2) / (2.0 * sigma**2))
        out[todo[accept]] = y[accept]
        todo = todo[~accept]
    return out.reshape(shape)


def _tau(sigma, n_parties):
    k = np.arange(1, int(n_parties))
    return 10.0 * float(np.sum(np.exp(-2.0 * math.pi**2 * sigma**2 * k / (k + 1.0))))


def distributed_rho(sigma, sensitivity, n_parties, dim):
    """ρ (zCDP) of the sum of ``n_parties`` shares ``N_Z(0, σ²)^dim`` on
    integer inputs that differ by at most ``sensitivity`` in L2 norm
    (KLS 2021, Prop. 14; see the module docstring).

    Parameters
    ----------
    sigma : float
        Each party's σ, at least 1/2.
    sensitivity : float
    n_parties : int
        The parties whose noise is in the sum (the honest ones).
    dim : int

    Returns
    -------
    rho : float
    """
    if sigma < MIN_SIGMA:
        raise ValueError(f"each party's sigma must be at least {MIN_SIGMA}, got {sigma!r}.")
    return sensitivity**2 / (2.0 * n_parties * sigma**2) + _tau(sigma, n_parties) * dim


def distributed_epsilon(sigma, delta, sensitivity, n_parties, dim):
    """ε at ``delta`` of the distributed discrete Gaussian (ρ-zCDP converted)."""
    return zcdp_to_dp(distributed_rho(sigma, sensitivity, n_parties, dim), delta)


def distributed_sigma(epsilon, delta, sensitivity, n_parties, dim):
    """The smallest per-party σ (to root-finding precision, never below it)
    whose sum over ``n_parties`` is ``(epsilon, delta)``-DP for inputs at L2
    distance ``sensitivity``.

    Returns
    -------
    sigma : float
    """
    epsilon, delta = check_privacy_params(epsilon, delta, require_delta=True)
    # the ρ whose conversion is ε (zcdp_to_dp is increasing in ρ)
    high = 1.0
    while zcdp_to_dp(high, delta) < epsilon:
        high *= 2.0
    rho = brentq(lambda r: zcdp_to_dp(r, delta) - epsilon, 0.0, high, xtol=1e-15, rtol=1e-13)
    while zcdp_to_dp(rho, delta) > epsilon:  # the root's safe side
        rho *= 1.0 - 1e-12
    sigma = max(sensitivity / math.sqrt(2.0 * n_parties * rho), MIN_SIGMA)
    while distributed_rho(sigma, sensitivity, n_parties, dim) > rho:  # τ d or rounding
        sigma *= 1.0 + 1e-6
    return sigma
