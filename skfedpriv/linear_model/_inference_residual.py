"""The pilot's error the private refinement may leave, from released numbers.

:func:`~._inference_private.private_refinement` starts from the
'local-gaussian' pilot ``θ_0`` and takes gradient steps on lifted systems
``d_k A_s``. Linearized at the non-private minimizer ``θ̂`` (``G(θ) ≈
H (θ - θ̂)``, the linearization of the variance), the refined estimate is

``θ̃ - θ̂ = P (θ_0 - θ̂) + n``,  ``P = Π_k (I - (d_k A_s)⁻¹ H)``,

``n`` the propagated privacy noise (covariance ``V``, the refinement's
privacy error covariance). Where the repair lifted the system far above
the curvature, ``P`` is close to ``I`` along those directions, and the
pilot's residual ``r = P (θ_0 - θ̂)`` is a bias of the interval's centre
that ``V`` does not hold. The move ``m = θ̃ - θ_0 = (P - I)(θ_0 - θ̂) + n``
identifies it:

``r = Q (m - n)``,  ``Q = P (P - I)⁻¹``,

so ``|r_j| <= |(Q m)_j| + z sqrt((Q V Qᵀ)_jj)``, ``z`` the 99.5 % normal
quantile (:data:`RESIDUAL_QUANTILE`), with probability 0.99 per parameter
over the noise *for the true* ``H``. ``H`` is not released: a smaller
plug-in makes the steps contract less and the bound larger, so
:func:`residual_bound` plugs in a pessimistic one, :data:`CURVATURE_SHARE`
(0.15) times the variance's spread-matching shrinkage estimate of the last
released curvature (:func:`~._inference_private_curvature.shrunk_curvature`:
its mean eigenvalue is resolved where single eigenvalues are not) plus the
ridge. The nearest PSD matrix of the release, used before, puts
eigenvalues near zero wherever the noise pushed them down, and gave
bounds of 7-280 standard errors (median of a fit's largest) at n = 20 000,
p = 5, ε = 1, where the true residual is under 0.1 standard error:
54-99 % of those fits withheld. The shrinkage estimate itself (share 1)
bounds too little: the true residual was above it in up to 69 % of the
parameters of a cell (benchmarks/results/private_bound.md). It is not a
certified bound: the noise's spectral
norm, the only certified margin for ``H``, is above the smallest released
eigenvalue in these cells. What it achieves is measured
(benchmarks/README.md, "Private intervals").

The interval a published model gets is bias-aware [1]_: with ``s_j`` the
noise-aware standard error and ``b_j`` the bound, ``θ̃_j ± cv(b_j / s_j) s_j``,
``cv(t)`` the ``level`` quantile of ``|N(t, 1)|`` (:func:`bias_aware_critical`).
If the centre is normal with standard deviation ``s_j`` and a bias of
magnitude at most ``b_j``, it covers with probability at least ``level``
(exactly ``level`` at ``|bias| = b_j``). It is narrower than the Wald
interval on ``s_j² + b_j²`` (``cv(t) ≈ t + 1.645`` against
``1.96 sqrt(1 + t²)`` at 95 %), and unlike that one it is right at every
level, not only near 95 %.

Everything here is post-processing of the refinement's releases: no draw,
no charge.

References
----------
.. [1] Armstrong, T. B. and Kolesár, M. (2020). Simple and honest
   confidence intervals in nonparametric regression. Quantitative
   Economics 11, 1-39 (the critical value ``cv``).
"""

import numpy as np
from scipy.stats import ncx2, norm

__all__ = ["CURVATURE_SHARE", "RESIDUAL_QUANTILE", "bias_aware_critical", "bias_aware_intervals",
           "pilot_transfer", "residual_bound"]


#: The bound's plug-in curvature is this share of the shrinkage estimate
#: (module doc), calibrated over the fits that PUBLISH (every bound at most
#: ``RESOLVED`` standard errors): publication selects fits whose noise made
#: the curvature look resolved, and the bound must hold on those. 0.15 is
#: the largest share tried (1, 0.5, 0.33, 0.25, 0.2, 0.15, 0.1, 0.0625) that
#: kept the true residual within the bound in at least 99 % of the
#: parameters of the published fits in every cell with 20 or more of them
#: (two-Gaussian design, n in {1 000, 2 000}, p = 5, 1 000 fits per cell,
#: seeds 0-999; n = 20 000, 200 fits, seeds 0-199; on the fresh seeds
#: 1000-1999 it held in every n <= 2 000 cell with 20 or more published
#: fits, one cell; the n = 20 000 cells were not re-run on fresh seeds):
#: 0.25 gave 82.9 % (n = 1 000, q = 1, 4:1, ε = 1, 42 fits) and 89.3 %
#: (n = 2 000, same, 92 fits), 0.2 gave 96.0 % (33 fits). Cells with fewer
#: published fits are reported, not used (benchmarks/README.md, "The
#: residual bound over the fits that publish").
CURVATURE_SHARE = 0.15
#: The noise term of :func:`residual_bound` is this quantile of ``|N(0, 1)|``
#: times its standard deviation.
RESIDUAL_QUANTILE = norm.ppf(0.995)


def pilot_transfer(refinement, hessian):
    """``P = Π_k (I - (d_k A_s)⁻¹ H)`` over every step of the refinement.

    Parameters
    ----------
    refinement : PrivateRefinement
    hessian : ndarray of shape (K, p1, p1)
        The curvature (ridge included) the steps are linearized with.

    Returns
    -------
    transfer : ndarray of shape (K, p1, p1)
        The factor the pilot's error is multiplied by.
    """
    n_models, p1, _ = hessian.shape
    out = np.broadcast_to(np.eye(p1), hessian.shape).copy()
    for inverse, damping in refinement.step_systems():
        out = (np.eye(p1) - inverse @ hessian / damping[:, None, None]) @ out
    return out


def residual_bound(refinement, privacy_cov):
    """A bound on ``|r_j|``, the pilot's error left in each parameter (module doc).

    Parameters
    ----------
    refinement : PrivateRefinement
        Its ``pilot`` and ``theta`` (the move) and its systems.
    privacy_cov : ndarray of shape (K, p1, p1)
        ``V``, the covariance of the propagated privacy noise.

    Returns
    -------
    bound : ndarray of shape (K, p1)
        ``inf`` for a model along whose plug-in curvature the steps do not
        contract (``P - I`` singular).
    """
    hessian = CURVATURE_SHARE * refinement.curvature_estimate() + refinement.ridge_matrix()
    transfer = pilot_transfer(refinement, hessian)
    moved = (refinement.theta - refinement.pilot).T
    n_models, p1, _ = transfer.shape
    out = np.full((n_models, p1), np.inf)
    for k in range(n_models):
        lifted = transfer[k] - np.eye(p1)
        if np.linalg.cond(lifted) > 1e12:
            continue
        carry = transfer[k] @ np.linalg.inv(lifted)
        spread = np.sqrt(np.maximum(np.diag(carry @ privacy_cov[k] @ carry.T), 0.0))
        out[k] = np.abs(carry @ moved[k]) + RESIDUAL_QUANTILE * spread
    return out


def bias_aware_critical(ratio, level=0.95):
    """``cv(t)``: the ``level`` quantile of ``|N(t, 1)|``, ``t = |bias| / std``.

    ``|N(t, 1)|²`` is noncentral chi-squared with one degree of freedom and
    noncentrality ``t²``, so ``cv(t) = sqrt(χ²₁(t²)⁻¹(level))``; ``cv(0)`` is
    the normal quantile ``z_{(1+level)/2}``. NaN stays NaN.
    """
    ratio = np.asarray(ratio, dtype=float)
    return np.sqrt(ncx2.ppf(level, 1, ratio**2))


def bias_aware_intervals(theta, std_err, bias_bound, level=0.95):
    """``theta ± cv(b / s) s`` (module doc) for every parameter.

    Parameters
    ----------
    theta, std_err, bias_bound : ndarray of shape (K, p1)
        The estimate, its noise-aware standard errors (NaN where withheld)
        and the bound on the bias of its centre.
    level : float, default=0.95

    Returns
    -------
    intervals : ndarray of shape (K, p1, 2)
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bias_bound > 0, bias_bound / std_err, 0.0)
    half = bias_aware_critical(ratio, level) * std_err
    return np.stack([theta - half, theta + half], axis=-1)
