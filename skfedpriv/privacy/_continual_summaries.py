"""Continual release of DWD's linearized summaries with correlated noise.

The 'local-tree' / 'local-blt' mechanisms of
:class:`~skfedpriv.DWDClassifier`. At batch ``b`` each site forms, at the
public parameters ``θ_{b-1}``, the linear and quadratic coefficients of the
second-order model of its rows' loss, for every one-vs-rest model ``k``:

``a_k = Σ_i x̄_i c_ik``, ``c_ik = y_ik V_q'(u_ik) - h(u_ik) s_ik``,
``J_k = Σ_i h(u_ik) x̄_i x̄_iᵀ``

(``s_ik = x̄_iᵀθ_k``, ``u_ik = y_ik s_ik``), so that the model's gradient
at ``θ`` is ``a_k + J_k θ`` (the renewable idea of Luo & Song 2020 written
as sums). ``h`` is the smoothed ``V_q''`` (paper eq. 8) raised to
``κ (q+1)²/q`` on the band ``|u| <= 1`` (so that a model at a point where
every row is on the linear part of the loss, such as ``θ_0 = 0``, still
has curvature). The server needs the prefix sums ``Σ_{j<=b} a_j`` and
``Σ_{j<=b} J_j``: each site releases them continually through a prefix-sum
factorization ``A = B C`` (:mod:`._prefix_sum`), one noise stream per site.

**Enforced bounds.** Rows are clipped to ``‖x̄_i‖ <= C2``; per row the
vector ``(h(u_ik))_k`` is clipped to L2 norm ``L = (q+1)²/q`` and then
``(c_ik)_k`` to L2 norm :data:`COEFFICIENT_CLIP` (joint clipping over the
``K`` models: no ``sqrt(K)`` factor). So replacing one row moves the
stacked ``a`` by at most ``2 C2`` (L2) and the stacked ``J`` by at most
``sqrt(2) L C2²`` (Frobenius; each ``J_k`` term is PSD). A site's input of
one step is ``(w_a a / Δ_a, w_J vech(J) / Δ_J)`` with ``w_a² + w_J² = 1``:
unit L2 sensitivity per step.

**Claim.** A row is in one batch of one site, so it enters one step of one
site's stream: the site's messages are the Gaussian mechanism on ``C X``
with L2 sensitivity the largest column norm of ``C`` (any step's input
chosen adaptively from the earlier releases: adaptive continual release,
Denisov et al. 2022, Thm. 2.1), calibrated to (ε, δ) by
:func:`continual_sigma`. The server's sums and models are post-processing.
"""

import math

import numpy as np

from .._losses import (
    gendwd_curvature_bound,
    gendwd_derivative,
    gendwd_smoothed_curvature,
)
from ._calibration import gaussian_sigma
from ._clipping import clip_vectors

__all__ = [
    "BAND",
    "COEFFICIENT_CLIP",
    "CURVATURE_NOISE_RATIO",
    "KAPPA",
    "NoiseDominatesWarning",
    "SiteNoiseStreams",
    "continual_sensitivities",
    "continual_sigma",
    "linearized_summary",
    "model_curvature",
    "noise_to_signal",
    "pack_summary",
    "row_coordinate_bound",
    "summary_size",
    "unit_scales",
    "unpack_summary",
]

#: Curvature floor of the model on the band, as a fraction of ``(q+1)²/q``.
KAPPA = 0.25
#: Half-width of the margin band ``|u| <= BAND`` where the floor applies.
BAND = 1.0
#: Noise multiplier of the curvature part over that of the linear part (per
#: unit of sensitivity): the model's curvature is mostly repaired by the
#: server's floor, so most of the budget goes to the linear part (measured
#: in benchmarks/bench_private_utility.py).
CURVATURE_NOISE_RATIO = 4.0
#: L2 norm each row's coefficient vector ``(c_ik)_k`` is clipped to: the
#: bound of ``|V_q'|``, so the linear part has the sensitivity of a gradient
#: sum. ``|V_q'(u) - u h(u)|`` itself reaches 2.0-3.9 near the kink (q =
#: 0.5-3); clipping those rows' coefficients biases their model but cuts the
#: noise 2-4 fold, which measured better (benchmarks/README.md, issue #22).
COEFFICIENT_CLIP = 1.0


def model_curvature(u, q):
    """``h(u) = max(Ṽ_q''(u), κ (q+1)²/q 1{|u| <= BAND})``, in ``[0, (q+1)²/q]``."""
    u = np.asarray(u, dtype=float)
    floor = KAPPA * gendwd_curvature_bound(q) * (np.abs(u) <= BAND)
    return np.maximum(gendwd_smoothed_curvature(u, q), floor)


def continual_sensitivities(q, clip_norm):
    """``(Δ_a, Δ_J)``: L2 change of the stacked ``a`` and Frobenius change of
    the stacked ``J`` when one row is replaced."""
    return (2.0 * clip_norm * COEFFICIENT_CLIP,
            math.sqrt(2.0) * gendwd_curvature_bound(q) * clip_norm**2)


def _weights():
    """``(w_a, w_J)`` with ``w_a² + w_J² = 1`` and ``w_a / w_J`` the ratio."""
    r = CURVATURE_NOISE_RATIO
    return r / math.sqrt(1.0 + r * r), 1.0 / math.sqrt(1.0 + r * r)


def linearized_summary(X, Y, theta, q, fit_intercept):
    """One site's ``(a, J)`` at ``theta``, with the per-row joint clipping.

    Parameters
    ----------
    X : ndarray of shape (n, p)
        The site's rows, already clipped to ``‖x̄‖ <= C2``.
    Y : ndarray of shape (n, K)
        One-vs-rest targets in {-1, +1}.
    theta : ndarray of shape (p1, K)
    q : float
    fit_intercept : bool

    Returns
    -------
    a : ndarray of shape (p1, K)
    J : ndarray of shape (K, p1, p1)
    """
    Xb = np.hstack([np.ones((len(X), 1)), X]) if fit_intercept else np.asarray(X, float)
    scores = Xb @ theta
    margins = Y * scores
    h = clip_vectors(model_curvature(margins, q), gendwd_curvature_bound(q))
    c = clip_vectors(Y * gendwd_derivative(margins, q) - h * scores, COEFFICIENT_CLIP)
    return Xb.T @ c, np.einsum("ik,ij,il->kjl", h, Xb, Xb)


def continual_sigma(epsilon, delta, factorization, calibration="analytic"):
    """Noise multiplier σ of every site's stream: one Gaussian mechanism of
    L2 sensitivity ``factorization.sensitivity`` (a row enters one step of
    one site's stream with unit sensitivity) calibrated to (ε, δ)."""
    return gaussian_sigma(epsilon, delta, factorization.sensitivity, method=calibration)


def summary_size(p1, n_models):
    """Length of the packed ``(a, vech(J))`` of one step."""
    return p1 * n_models + n_models * p1 * (p1 + 1) // 2


def unit_scales(sensitivities):
    """``(Δ_a / w_a, Δ_J / w_J)``: a summary's ``(a, J)`` over these is its
    unit-sensitivity input (noise std per unit of σ)."""
    w_a, w_J = _weights()
    return sensitivities[0] / w_a, sensitivities[1] / w_J


def pack_summary(a, J, scales):
    """The unit-sensitivity input ``(a / s_a, vech(J) / s_J)`` of a step."""
    rows, cols = np.triu_indices(J.shape[-1])
    return np.concatenate([np.ravel(a) / scales[0], np.ravel(J[:, rows, cols]) / scales[1]])


def unpack_summary(z, p1, n_models, scales):
    """Inverse of :func:`pack_summary`: ``(s_a a, s_J J)`` with the upper
    triangle mirrored."""
    rows, cols = np.triu_indices(p1)
    upper = np.zeros((n_models, p1, p1))
    upper[:, rows, cols] = z[p1 * n_models:].reshape(n_models, -1)
    sym = upper + np.triu(upper, 1).transpose(0, 2, 1)
    return scales[0] * z[:p1 * n_models].reshape(p1, n_models), scales[1] * sym


def row_coordinate_bound(q, clip_norm, sensitivities):
    """Largest magnitude one row can give a coordinate of the packed input:
    ``|x̄_j c_k| <= C2`` (coefficients clipped to 1) in ``a`` and
    ``|h x̄_j x̄_l| <= (q+1)²/q C2²`` in ``J``, over their unit scales."""
    s_a, s_J = unit_scales(sensitivities)
    return max(clip_norm * COEFFICIENT_CLIP / s_a,
               gendwd_curvature_bound(q) * clip_norm**2 / s_J)


class SiteNoiseStreams:
    """The correlated noise of ``n_sites`` sites, one stream each.

    Each site's stream draws ``z ~ N(0, σ² I)`` on the unit-sensitivity
    input and adds ``B z`` to its prefix sums (increment by increment). In
    the linear part that is std ``σ Δ_a / w_a``, in the curvature part
    (upper triangle, mirrored) ``σ Δ_J / w_J``.

    Parameters
    ----------
    factorization : PrefixSumFactorization
        Of every site's stream; its ``n_rounds`` is the horizon in batches.
    n_sites, p1, n_models : int
    sigma : float
        Noise multiplier (:func:`continual_sigma`).
    sensitivities : (float, float)
        ``(Δ_a, Δ_J)`` (:func:`continual_sensitivities`).
    rng : numpy.random.Generator, list of Generator, or None
        One generator all streams draw from, one per site, or None: no
        streams, the public description only (remote sites each draw their
        own stream, :class:`~skfedpriv.federated.ContinualSitePrivacy`).
    """

    def __init__(self, factorization, n_sites, p1, n_models, sigma, sensitivities, rng):
        self.factorization = factorization
        self.sigma = float(sigma)
        self.shape = (p1, n_models)
        self.n_sites = int(n_sites)
        self.std = tuple(sigma * s for s in unit_scales(sensitivities))
        size = summary_size(p1, n_models)
        # None: the sites draw their own noise (remote sites); a list: one
        # generator per site
        rngs = [] if rng is None else rng if isinstance(rng, (list, tuple)) else [rng] * n_sites
        self.streams = [self.factorization.noise_stream(r, 1.0, shape=(size,)) for r in rngs]

    def next(self):
        """The summed noise increments of all sites for the next step:
        ``(noise of a, noise of J)``."""
        z = sum(stream.next() for stream in self.streams)
        return unpack_summary(z, *self.shape, self.std)

    def prefix_variance(self, step):
        """Variance per entry of the summed curvature noise in the prefix sum
        of steps ``0..step`` (``n_sites Σ_k B[step, k]²`` times std²)."""
        row = np.asarray(self.factorization.B)[step]
        return self.n_sites * float(row @ row) * self.std[1] ** 2


class NoiseDominatesWarning(UserWarning):
    """A private stream's noise is expected to swamp what its rows can say.

    Emitted before any budget is spent, from public quantities only.
    """


def noise_to_signal(factorization, sigma, n_sites, p1, n_models, q, clip_norm, n_rows):
    """Expected norm of the noise of the last prefix sum of ``a`` over the
    largest norm that sum can have without noise.

    Computed from public quantities only: the horizon's factorization, σ,
    the number of sites, the parameter layout, ``q``, the clip and the
    number of rows of the stream (``n_rows``, from the public batch sizes).
    At ``θ_0 = 0`` every row's coefficient is ``±1`` (``V_q'(0) = -1``) and
    its row has norm at most C2, so no stream's summed linear term exceeds
    ``n_rows C2`` there; a ratio above one means the noise alone is larger
    than anything the rows could add (the model is mostly noise).

    Returns
    -------
    ratio : float
    """
    std = sigma * unit_scales(continual_sensitivities(q, clip_norm))[0]
    B = np.asarray(factorization.B)
    last = float(B[-1] @ B[-1])
    return std * math.sqrt(n_sites * last * p1 * n_models) / (n_rows * clip_norm)
