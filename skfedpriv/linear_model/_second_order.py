"""A second-order correction of the renewable stream's shift (opt-in).

The renewable estimate ``θ_B`` solves ``Σ_j Ũ_j(θ) = 0``, each batch's
score linearized at the estimate ``θ_j`` the stream had after it (see
:mod:`._inference_stream`); the offline estimate solves ``Σ_j U_j(θ) = 0``.
Their difference is ``C_B⁻¹ Σ_j R_j(θ_B)`` (``C_B`` the accumulated
curvature), and the linearization remainder has the expectation

``E R_j ≈ ½ T_j : Cov(θ_B - θ_j) = ½ T_j : (V_j - V_B)``,

with ``T_j = Σ_{i∈j} w_i y_i ℓ'''(u_i) x̄_i^{⊗3}`` (``p1³`` numbers) and
``V_j`` the covariance of ``θ_j`` (nested estimators:
``Cov(θ_j, θ_B) = V_B``). Taking ``T_j ≈ (W_j / N_B) S_B`` (the batches
share one expected third derivative; ``S_B = Σ_j T_j``) and
``V_j ≈ (N_B / N_j) V_B`` (the covariance shrinks like one over the rows)
the correction aggregates into a stream-length-independent state,

``b_B = ½ r_B S_B : V_B``,  ``r_B = Σ_{j≥2} W_j / N_j``

(the sum the shift index is made of), and the published estimate is
``θ_B - C_B⁻¹ b_B`` (one step of the corrected equation). Using the
well-estimated final ``V_B`` rather than each batch's own ``V_j`` matters:
with ``Σ_j W_j V_j`` the early batches' noisy covariances made the
correction noisier than the shift it removed (benchmarks/README.md).
The chain itself (the estimate the next batch starts
from) is left as it is: the default stream is unchanged.

The loss's third derivative is smoothed by a uniform kernel of half-width
``h``: ``ℓ'''_h(u) = (ℓ''(u + h) - ℓ''(u - h)) / 2h``. For genDWD the
jump of ``V_q''`` at the kink ``q/(q+1)`` enters as a bin count of the
margins within ``h`` of it (the empirical third derivative is zero almost
surely). The expected remainder is a Gaussian smoothing of ``ℓ'`` at the
scale of the perturbation ``θ_B - θ_j`` (heat equation: its second-order
term is ``ℓ'''`` smoothed at scales up to that one), so ``h`` follows that
scale: ``h_j = (tr(V_j G_j) / W_j)^½`` (``G_j`` the batch's Gram matrix),
the root mean square of the margin's standard deviation over the batch's
rows, of order ``(p1 / N_j)^½``.

Measured (benchmarks/README.md, "Stream batch size"): it removes the
shift's mean (from 0.3-1.3 to at most 0.07 of the estimate's spread, every
batch size measured at n = 2 000, p = 20), but not the under-coverage: the
correction co-varies with the estimate's own error (it depends on ``θ_B``
through ``V_B`` and ``S``), which adds variance the propagated covariance
(the first-order chain's, published as ``coef_cov_``) does not include
(SE / SD down to 0.64 with 100-row batches, about 0.9-1.0 with 1 000-row
ones).
"""

from dataclasses import dataclass

import numpy as np

from ._dwd_solver import augmented_gram, augmented_scores

__all__ = ["MAX_THIRD_NUMBERS", "ShiftCorrection", "check_second_order_sites",
           "corrected_theta", "second_order_step", "site_third_moment",
           "smoothed_third_derivative"]

#: The largest ``n_models · p1³`` the correction keeps (8 bytes each: 80 MB).
MAX_THIRD_NUMBERS = 10_000_000
_BLOCK_NUMBERS = 1 << 20


def check_second_order_sites(sites, p1, n_models, name="DWDClassifier"):
    """Refuse, before any summary is asked, sites that cannot send the
    third-derivative summary (only in-process, unscattered ``SiteData``
    do) and a summary of more than :data:`MAX_THIRD_NUMBERS` numbers."""
    if not getattr(sites, "offers_curvature_rows", False) or not hasattr(sites, "parts"):
        raise NotImplementedError(
            f"{name}(shift_correction='second-order') runs with sites in this process "
            f"only (it needs a third-derivative summary {type(sites).__name__} does not "
            "send). Use shift_correction=None.")
    if n_models * p1 ** 3 > MAX_THIRD_NUMBERS:
        raise ValueError(
            f"{name}(shift_correction='second-order') keeps {n_models} x {p1}^3 = "
            f"{n_models * p1 ** 3} numbers (the summed third derivative), more than "
            f"{MAX_THIRD_NUMBERS}: use shift_correction=None (larger batches keep the "
            "shift small, see StreamShiftWarning).")


def smoothed_third_derivative(curvature, margins, width):
    """``(ℓ''(u + h) - ℓ''(u - h)) / 2h``: the loss's third derivative
    smoothed by a uniform kernel of half-width ``width`` (a kink's jump of
    ``ℓ''`` counted over the margins within ``width`` of it)."""
    return (curvature(margins + width) - curvature(margins - width)) / (2.0 * width)


def site_third_moment(X, Y, weights, Theta, fit_intercept, curvature, widths):
    """One site's ``Σ_i w_i y_ik ℓ'''_h(u_ik) x̄_i^{⊗3}`` per model.

    Parameters
    ----------
    X, Y, weights, Theta, fit_intercept
        A site's prepared rows, one-vs-rest targets, row weights and the
        parameters (as for :func:`~._inference_sites.site_inference_summary`).
    curvature : callable
        ``ℓ''(u)``, elementwise on margins.
    widths : ndarray of shape (n_models,)
        The smoothing half-width ``h`` of each model.

    Returns
    -------
    third : ndarray of shape (n_models, p1, p1, p1)
    """
    margins = Y * augmented_scores(X, Theta, fit_intercept)
    rows = np.asarray(X.todense() if hasattr(X, "todense") else X, dtype=float)
    if fit_intercept:
        rows = np.column_stack([np.ones(len(rows)), rows])
    coef = np.column_stack([
        weights * Y[:, k] * smoothed_third_derivative(curvature, margins[:, k], widths[k])
        for k in range(Y.shape[1])])
    p1 = rows.shape[1]
    out = np.zeros((Y.shape[1], p1, p1 * p1))
    block = max(1, _BLOCK_NUMBERS // (p1 * p1))  # rows of x̄ ⊗ x̄ held at once
    for start in range(0, len(rows), block):
        part = rows[start:start + block]
        pairs = (part[:, :, None] * part[:, None, :]).reshape(len(part), p1 * p1)
        for k in range(Y.shape[1]):
            out[k] += (coef[start:start + block, k, None] * part).T @ pairs
    return out.reshape(Y.shape[1], p1, p1, p1)


@dataclass(frozen=True)
class ShiftCorrection:
    """The correction's stream state (secret: raw statistics of the rows).

    Attributes
    ----------
    third : ndarray of shape (n_models, p1, p1, p1)
        ``S = Σ_j T_j``, each at its batch's estimate.
    ratio_sum : float
        ``r = Σ_{j≥2} W_j / N_j``.
    seen : float
        ``N``, the row weight of the batches so far.
    """

    third: np.ndarray
    ratio_sum: float
    seen: float

    def advance(self, parts, theta, cov, batch_weight, curvature, fit_intercept):
        """Add one batch (its in-process sites' ``parts``, each ``(X, Y,
        weights)``) at its estimate ``theta`` with covariance ``cov``."""
        widths = smoothing_widths(parts, cov, batch_weight, fit_intercept)
        third = sum(site_third_moment(X, Y, w, theta, fit_intercept, curvature, widths)
                    for X, Y, w in parts)
        seen = self.seen + batch_weight
        ratio = batch_weight / seen if self.seen > 0 else 0.0
        return ShiftCorrection(self.third + third, self.ratio_sum + ratio, seen)

    @classmethod
    def start(cls, n_models, p1):
        return cls(np.zeros((n_models, p1, p1, p1)), 0.0, 0.0)


def second_order_step(sites, previous, theta, cov, total_curvature, curvature):
    """One batch of the correction: the new state and the published estimate.

    Parameters
    ----------
    sites : SiteData
        The batch's in-process sites (prepared).
    previous : ShiftCorrection or None
        The state after the earlier batches (None: the stream's first).
    theta : ndarray of shape (p1, n_models)
        The renewable estimate after this batch.
    cov : ndarray of shape (n_models, p1, p1)
        Its covariance.
    total_curvature : ndarray of shape (n_models, p1, p1)
        The stream's accumulated curvature with this batch.
    curvature : callable
        ``ℓ''``, elementwise on margins.

    Returns
    -------
    published : ndarray of shape (p1, n_models)
        The corrected estimate (``theta`` itself after the first batch).
    state : ShiftCorrection
    """
    n_models, p1 = cov.shape[0], cov.shape[1]
    start = ShiftCorrection.start(n_models, p1) if previous is None else previous
    state = start.advance(sites.parts, theta, cov, sites.weight_sum, curvature,
                          sites.fit_intercept)
    if previous is None:  # one batch: r = 0, no correction
        return theta, state
    return corrected_theta(theta, state, cov, total_curvature), state


def smoothing_widths(parts, cov, batch_weight, fit_intercept):
    """``h_k = (tr(V_k G) / W)^½`` per model (see the module doc)."""
    gram = sum(augmented_gram(X, w, fit_intercept) for X, _, w in parts)
    return np.sqrt(np.maximum(np.einsum("kab,ab->k", cov, gram), 0.0) / batch_weight)


def corrected_theta(theta, state, cov, total_curvature):
    """``θ_B - C_B⁻¹ b_B`` with ``b_B = ½ r S : V_B`` per model.

    Parameters
    ----------
    theta : ndarray of shape (p1, n_models)
        The renewable estimate.
    state : ShiftCorrection
    cov : ndarray of shape (n_models, p1, p1)
        ``V_B``.
    total_curvature : ndarray of shape (n_models, p1, p1)
        ``C_B``, the stream's accumulated curvature (with its ridge).

    Returns
    -------
    theta : ndarray of shape (p1, n_models)
    """
    bias = 0.5 * state.ratio_sum * np.einsum("kabc,kbc->ka", state.third, cov)
    step = np.linalg.solve(total_curvature, bias[..., None])[..., 0]
    return theta - step.T
