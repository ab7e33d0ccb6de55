"""The curvature the private variance plugs in, estimated from its noised release.

The refinement's last released curvature is ``C̃ = H + Ξ``, ``Ξ`` the sum of
the sites' symmetric noise: its upper triangle i.i.d. ``N(0, s²)`` with ``s``
known (the mechanism's σ and the sensitivity). At ε = 1 the noise spreads
the eigenvalues of ``C̃`` far beyond those of ``H`` (``s`` a quarter of the
mean eigenvalue at n = 20 000, p = 5): the nearest PSD matrix of ``C̃`` has
some eigenvalues near zero, and the variance recursion, a convex decreasing
function of the curvature along each direction, took those directions as
nearly flat (SE / SD 1.4-1.7 where the plug-in of the true ``H`` gives
1.0; benchmarks/README.md, "Calibrating the variance at eps = 1").

:func:`shrunk_curvature` keeps the mean eigenvalue ``μ = tr C̃ / p1`` and
shrinks the spread around it to what the noise leaves: with ``D = C̃ - μ I``
and ``D_H = H - tr H / p1 I``,

``E ‖D‖²_F = ‖D_H‖²_F + (p1² - 1) s²``

(``E ‖Ξ‖²_F = p1² s²``, ``E (tr Ξ)² = p1 s²``), so
``δ² = max(0, ‖D‖²_F - (p1² - 1) s²)`` estimates the true spread and

``Ĥ = μ I + ρ D``,  ``ρ = sqrt(δ² / ‖D‖²_F)``

has ``‖Ĥ - μ I‖²_F = δ²``: the spectrum's second moment that the
recursion's convexity needs, not the (smaller) Frobenius-optimal one of a
Ledoit-Wolf shrinkage (``ρ = δ² / ‖D‖²``, which under-stated the variance
where the true curvature is anisotropic: SE / SD down to 0.90 with 4:1
classes). As the noise vanishes ``ρ → 1`` and ``Ĥ → C̃``. Post-processing
of released numbers: no release, no charge.

References
----------
.. [1] Ledoit, O. and Wolf, M. (2004). A well-conditioned estimator for
   large-dimensional covariance matrices. J. Multivariate Anal. 88, 365-411
   (shrinkage towards a scaled identity).
"""

import numpy as np

from ._dwd_private import _project_psd

__all__ = ["SANDWICH_FLOOR", "noise_spread", "shrunk_curvature"]

#: The sampling sandwich inverts the curvature estimate: its eigenvalues
#: are floored at this many noise stds ``s`` (a quadratic form ``vᵀ Ξ v``
#: of the noise along a unit ``v`` has std between ``s`` and ``sqrt(2) s``:
#: a smaller eigenvalue is not told from zero, and its inverse would blow
#: the sandwich up). A floor at ``2 s`` under-stated the sampling part at
#: n = 2 000 (0.4-0.7 of its SD; coverage 90.5-94.0 % at ε = 4).
SANDWICH_FLOOR = 1.0


def noise_spread(p1, noise_std):
    """``E ‖Ξ - tr Ξ / p1 I‖²_F = (p1² - 1) s²`` of a symmetric ``p1 × p1``
    noise with i.i.d. ``N(0, s²)`` upper triangle."""
    return (p1**2 - 1) * noise_std**2


def shrunk_curvature(curvature, noise_std, floor=0.0):
    """The spread-matching shrinkage estimate ``Ĥ`` of the curvature (module doc).

    Parameters
    ----------
    curvature : ndarray of shape (K, p1, p1)
        The released (summed, noised) curvature ``C̃``, not repaired.
    noise_std : float
        ``s``: the std of one entry of the summed noise.
    floor : float, default=0.0
        The eigenvalues of ``Ĥ`` are floored at ``floor`` (0: the nearest
        PSD matrix).

    Returns
    -------
    estimate : ndarray of shape (K, p1, p1)
    """
    p1 = curvature.shape[-1]
    mean = np.trace(curvature, axis1=1, axis2=2) / p1
    isotropic = mean[:, None, None] * np.eye(p1)
    spread = curvature - isotropic
    observed = np.einsum("kij,kij->k", spread, spread)
    signal = np.maximum(observed - noise_spread(p1, noise_std), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(observed > 0, np.sqrt(signal / observed), 0.0)
    # _project_psd floors at 2 std sqrt(p1): the std that puts the floor at `floor`
    return _project_psd(isotropic + rho[:, None, None] * spread, floor / (2.0 * np.sqrt(p1)))
