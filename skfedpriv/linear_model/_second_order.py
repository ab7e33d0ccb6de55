"""A second-order correction of the renewable stream's shift
(``DWDClassifier(shift_correction='auto')``, the default, where its state
fits, streams started by ``fit`` too; ``'second-order'`` to require it).

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
from) is left as it is: the first-order stream is unchanged.

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

The correction co-varies with the estimate's own error (it depends on
``θ`` through ``C_B``, ``V_B`` and ``S``), so the published covariance is
the delta method's ``A V_B Aᵀ`` with ``A`` the Jacobian of the corrected
estimate (:func:`delta_covariance`): ``∂C/∂θ`` is ``S`` itself; ``∂B/∂θ``
(``B`` the score outer products, :func:`site_outer_derivative`, ``p1³``
numbers) and ``∂S/∂θ`` (:func:`site_fourth_moment`, ``p1⁴`` numbers) are
two more sums over the batches, each at its estimate like ``S``; ``∂S`` is
contracted with the final ``V_B`` when the covariance is published.
Left out: the rows' direct variation of ``C``, ``B`` and ``S`` at a fixed
``θ`` (its covariance with the estimate's error moved SE / SD by a few
percent in the prototype; its own variance needs fourth moments of the
scores).

Streams started by fit (``'auto'``): ``fit`` computes no moments (its cost
and outputs are those of the first-order fit), and the later batches'
moments, each at its estimate as above, stand in for the fit batch's,
``S ≈ N / (N - N_1) Σ_{j≥2} S_j`` (likewise ``∂B``, ``∂S``;
:meth:`ShiftCorrection.completed`), ``N_1`` the fit batch's row weight.
The model above already assumes one expected moment per unit of row weight
(``T_j ≈ (W_j / N_B) S_B``) and uses the moments only through their sums,
so the imputation adds no new assumption: batches from one distribution,
which the renewable estimator's normality assumes too. Its error has two
parts, both of lower order than the correction ``C⁻¹ b = O(p1 / N)``:
the later batches' sum estimates the fit batch's expected share with a
relative error ``O((N - N_1)^-½)`` (a sample mean of rows), and the moments
are taken at ``θ_j`` (j ≥ 2) rather than at ``θ_1``, which differ by
``O(N_1^-½)``, a relative change of that order in a smooth moment. The
imputed correction is therefore the exact one times ``1 + O(N^-½)``
(when ``N - N_1`` is a fixed fraction of ``N``); where the later batches
are few rows beside a large fit the relative error is larger, but then
``r`` and the correction are small. ``'second-order'`` still computes the
fit batch's moments (its exact state, at the fit's cost).

Measured (benchmarks/README.md, "A second-order correction with a
delta-method covariance", 300 data sets per cell): the shift's mean
removed (at most 0.07 of the estimate's spread at n = 2 000, p = 20), and
the intervals of the 20-batch streams cover 94.3-96.9 % pooled at
n = 2 000 (the first-order stream: 89.5-95.2 %), SE / SD 0.85-1.19; they are
5-30 % wider than the first-order stream's there. Without ``∂S`` they
over-stated the spread by about 10 %. Where the shift is small (q = 4,
4:1 classes, p = 5, n = 2 000) the correction over-corrects (its mean
0.43-0.56 of the estimate's spread against a shift of 0.10-0.28; four of
six parameters cover 97.0-97.5 % at 2 000 data sets): there the expected
remainders of a perturbation independent of the batch's rows (the model
above) over-predict the shift 3-6 times even with the simulated
``Cov(θ_B - θ_j)`` (``benchmarks/diagnose_stream_shift.py``).
"""

from dataclasses import dataclass

import numpy as np

from .._losses import add_intercept_column
from .._sites import map_sites
from ._dwd_solver import augmented_scores

__all__ = ["MAX_THIRD_NUMBERS", "SHIFT_CORRECTIONS", "ShiftCorrection", "batch_moments",
           "check_second_order_sites", "corrected_theta", "delta_covariance",
           "second_order_numbers", "second_order_step", "shift_remedy", "site_fourth_moment",
           "site_outer_derivative", "site_second_order_moments", "site_third_moment",
           "smoothed_third_derivative", "smoothing_widths", "uses_second_order"]

#: The most numbers the correction keeps, ``n_models (2 p1³ + p1⁴)`` (``S``,
#: ``∂B`` and ``∂S``; 8 bytes each: 80 MB).
MAX_THIRD_NUMBERS = 10_000_000
_BLOCK_NUMBERS = 1 << 20


#: The values of ``DWDClassifier(shift_correction=...)``: None is the
#: first-order stream.
SHIFT_CORRECTIONS = ("auto", "second-order")


def second_order_numbers(p1, n_models):
    """``n_models (2 p1³ + p1⁴)``: the numbers the correction keeps (and a
    site sends per batch)."""
    return n_models * (2 * p1 ** 3 + p1 ** 4)


def uses_second_order(option, p1, n_models):
    """Whether a non-private stream with ``inference=True`` publishes the
    correction: ``'second-order'`` always, ``'auto'`` where its state takes
    at most :data:`MAX_THIRD_NUMBERS` numbers, None never. A function of
    the parameter layout only (data-independent)."""
    if option == "auto":
        return second_order_numbers(p1, n_models) <= MAX_THIRD_NUMBERS
    return option == "second-order"


def shift_remedy(option, corrected, p1, n_models, from_fit=False):
    """The sentence of a ``DWDClassifier`` stream's
    :class:`~._inference_stream.StreamShiftWarning` about the correction:
    that it is on, or why it is not (``from_fit``: a corrected stream
    started by ``fit`` under ``'auto'``, the fit batch's moments imputed)."""
    if from_fit:
        return ("The second-order correction is on (shift_correction='auto'; this stream "
                "started with fit, whose batch's moments are imputed from the later "
                "batches'): the published estimate is corrected and its intervals include "
                "the correction's own variance. ")
    if corrected:
        return (f"The second-order correction is on (shift_correction={option!r}): the "
                "published estimate is corrected and its intervals include the "
                "correction's own variance (measured to cover at such batches, 5-30 % wider "
                "than the uncorrected ones). ")
    if option is None:
        return ("No second-order correction (shift_correction=None): 'auto' (the default) "
                "or 'second-order' corrects the estimate, with intervals that include the "
                "correction's own variance (measured to cover at such batches, 5-30 % "
                "wider). ")
    return (f"No second-order correction (shift_correction='auto'): its state would keep "
            f"{n_models} x (2 x {p1}^3 + {p1}^4) = {second_order_numbers(p1, n_models)} "
            f"numbers, more than {MAX_THIRD_NUMBERS}. ")


def offers_second_order(sites):
    """Whether ``sites`` send the correction's moments: in-process
    :class:`~._dwd_solver.SiteData` (rows here or scattered to a cluster) or
    sites that answer :meth:`~._dwd_sites.DWDSites.second_order_summary`."""
    return getattr(sites, "offers_second_order", False) or hasattr(sites, "parts")


def check_second_order_sites(sites, p1, n_models, option="second-order", name="DWDClassifier"):
    """Refuse, before any summary is asked, sites that cannot send the
    correction's moments and (``'second-order'``; ``'auto'`` decided on its
    size already) a state of more than :data:`MAX_THIRD_NUMBERS` numbers."""
    if not offers_second_order(sites):
        raise NotImplementedError(
            f"{name}(shift_correction={option!r}) needs the second-order moments of each "
            f"batch, which {type(sites).__name__} does not send (private remote sites never "
            "do). Use shift_correction=None (the first-order stream).")
    numbers = second_order_numbers(p1, n_models)
    if option == "second-order" and numbers > MAX_THIRD_NUMBERS:
        raise ValueError(
            f"{name}(shift_correction='second-order') keeps {n_models} x (2 x {p1}^3 + "
            f"{p1}^4) = {numbers} numbers (its summed derivative tensors), more than "
            f"{MAX_THIRD_NUMBERS}: use shift_correction=None or 'auto' (larger batches keep "
            "the shift small, see StreamShiftWarning).")


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
    coef = np.column_stack([
        weights * Y[:, k] * smoothed_third_derivative(curvature, margins[:, k], widths[k])
        for k in range(Y.shape[1])])
    return _weighted_cubes(X, fit_intercept, coef)


def site_outer_derivative(X, Y, weights, Theta, fit_intercept, derivative, curvature):
    """One site's ``Σ_i w_i² 2 ℓ'(u_ik) ℓ''(u_ik) y_ik x̄_i^{⊗3}`` per model:
    the derivative of the score outer products ``Σ_i w_i² ℓ'² x̄_i x̄_iᵀ``
    (the score covariance ``B`` of :func:`~._inference.score_covariance`
    without its ridge terms) along each parameter (the last axis).

    Parameters
    ----------
    X, Y, weights, Theta, fit_intercept
        As for :func:`site_third_moment`.
    derivative, curvature : callable
        ``ℓ'(u)`` and ``ℓ''(u)``, elementwise on margins.

    Returns
    -------
    outer_derivative : ndarray of shape (n_models, p1, p1, p1)
    """
    margins = Y * augmented_scores(X, Theta, fit_intercept)
    coef = 2.0 * (weights * weights)[:, None] * Y * derivative(margins) * curvature(margins)
    return _weighted_cubes(X, fit_intercept, coef)


def site_fourth_moment(X, Y, weights, Theta, fit_intercept, curvature, widths):
    """One site's ``Σ_i w_i ℓ⁗_h(u_ik) x̄_i^{⊗4}`` per model, as a
    ``(p1², p1²)`` matrix (``(x̄ ⊗ x̄)(x̄ ⊗ x̄)ᵀ`` weighted): the derivative
    of :func:`site_third_moment` along ``θ``, with
    ``ℓ⁗_h(u) = (ℓ''(u + h) - 2 ℓ''(u) + ℓ''(u - h)) / h²`` (the fourth
    derivative smoothed by a triangular kernel of half-width ``h``).

    Parameters
    ----------
    X, Y, weights, Theta, fit_intercept, curvature, widths
        As for :func:`site_third_moment`.

    Returns
    -------
    fourth : ndarray of shape (n_models, p1 * p1, p1 * p1)
    """
    margins = Y * augmented_scores(X, Theta, fit_intercept)
    u, h = margins, np.asarray(widths, dtype=float)
    coef = weights[:, None] * (curvature(u + h) - 2.0 * curvature(u) + curvature(u - h)) / (h * h)
    p1 = X.shape[1] + int(fit_intercept)
    out = np.zeros((Y.shape[1], p1 * p1, p1 * p1))
    for rows, part, pairs in _row_pair_blocks(X, fit_intercept):
        for k in range(Y.shape[1]):
            out[k] += (coef[rows, k, None] * pairs).T @ pairs
    return out


def site_second_order_moments(X, Y, weights, Theta, fit_intercept, loss, widths):
    """One site's share of a batch's correction moments: what a site sends
    (``second_order_summary``) and what in-process sites compute.

    Parameters
    ----------
    X, Y, weights, Theta, fit_intercept
        As for :func:`site_third_moment`.
    loss : object
        With elementwise ``derivative`` (``ℓ'``) and ``curvature`` (``ℓ''``).
    widths : ndarray of shape (n_models,)
        The smoothing half-widths (:func:`smoothing_widths` of the batch).

    Returns
    -------
    third : ndarray of shape (n_models, p1, p1, p1)
        :func:`site_third_moment`.
    outer_derivative : ndarray of shape (n_models, p1, p1, p1)
        :func:`site_outer_derivative`.
    fourth : ndarray of shape (n_models, p1 * p1, p1 * p1)
        :func:`site_fourth_moment`.
    """
    return (site_third_moment(X, Y, weights, Theta, fit_intercept, loss.curvature, widths),
            site_outer_derivative(X, Y, weights, Theta, fit_intercept, loss.derivative,
                                  loss.curvature),
            site_fourth_moment(X, Y, weights, Theta, fit_intercept, loss.curvature, widths))


def _moments_task(part, Theta, fit_intercept, loss, widths):
    X, Y, weights = part
    return site_second_order_moments(X, Y, weights, Theta, fit_intercept, loss, widths)


def _summed(replies):
    """Each of the sites' moment tuples summed over the sites."""
    return tuple(sum(values) for values in zip(*replies))


def batch_moments(sites, theta, cov, loss):
    """The batch's summed correction moments ``(S_j, ∂B_j, ∂S_j)`` at its
    estimate ``theta`` (covariance ``cov``): from sites that send them
    (``second_order_summary``, e.g. remote sites), else from the in-process
    sites' rows (two passes over them: the Gram matrix for the widths,
    then the moments)."""
    if getattr(sites, "offers_second_order", False):
        return sites.second_order_summary(theta, cov, loss)
    widths = smoothing_widths(sites.gram(), cov, sites.weight_sum)
    n_jobs = getattr(sites, "n_jobs", None)
    return _summed(map_sites(_moments_task, [(part, theta, sites.fit_intercept, loss, widths)
                                             for part in sites.task_parts], n_jobs=n_jobs))


def _row_pair_blocks(X, fit_intercept):
    """``(slice, x̄ rows, x̄ ⊗ x̄ rows)`` over blocks of the rows, at most
    :data:`_BLOCK_NUMBERS` numbers of ``x̄ ⊗ x̄`` at once (bounded memory)."""
    dense = np.asarray(X.todense() if hasattr(X, "todense") else X, dtype=float)
    augmented = add_intercept_column(dense, fit_intercept)
    p1 = augmented.shape[1]
    block = max(1, _BLOCK_NUMBERS // (p1 * p1))
    for start in range(0, len(augmented), block):
        rows = slice(start, start + block)
        part = augmented[rows]
        yield rows, part, (part[:, :, None] * part[:, None, :]).reshape(len(part), p1 * p1)


def _weighted_cubes(X, fit_intercept, coef):
    """``Σ_i coef_ik x̄_i^{⊗3}`` per column ``k`` of ``coef``, as matrix
    products over blocks of rows (:func:`_row_pair_blocks`)."""
    p1 = X.shape[1] + int(fit_intercept)
    out = np.zeros((coef.shape[1], p1, p1 * p1))
    for rows, part, pairs in _row_pair_blocks(X, fit_intercept):
        for k in range(coef.shape[1]):
            out[k] += (coef[rows, k, None] * part).T @ pairs
    return out.reshape(coef.shape[1], p1, p1, p1)


@dataclass(frozen=True)
class ShiftCorrection:
    """The correction's stream state (secret: raw statistics of the rows).

    Attributes
    ----------
    third : ndarray of shape (n_models, p1, p1, p1)
        ``S = Σ_j T_j``, each at its batch's estimate.
    outer_derivative : ndarray of shape (n_models, p1, p1, p1)
        ``∂B = Σ_j ∂B_j``, each batch's :func:`site_outer_derivative` at
        its estimate (for the covariance, :func:`delta_covariance`).
    fourth : ndarray of shape (n_models, p1 * p1, p1 * p1)
        ``∂S = Σ_j ∂T_j``, each batch's :func:`site_fourth_moment` at its
        estimate and smoothing width.
    ratio_sum : float
        ``r = Σ_{j≥2} W_j / N_j``.
    seen : float
        ``N``, the row weight of the batches so far.
    imputed : float, default=0.0
        ``N_1``, the row weight of a first batch whose moments were not
        computed (a stream started by ``fit`` under ``'auto'``): the sums
        hold the later batches only, and :meth:`completed` imputes its share.
    """

    third: np.ndarray
    outer_derivative: np.ndarray
    fourth: np.ndarray
    ratio_sum: float
    seen: float
    imputed: float = 0.0

    def advance(self, moments, batch_weight):
        """Add one batch: its summed ``moments`` (:func:`batch_moments`, at
        its estimate) and its row weight; ``moments`` None: the stream's
        first batch, its moments left to :meth:`completed`."""
        seen = self.seen + batch_weight
        ratio = batch_weight / seen if self.seen > 0 else 0.0
        if moments is None:
            if self.seen > 0:
                raise ValueError("only a stream's first batch can leave its moments out")
            return ShiftCorrection(self.third, self.outer_derivative, self.fourth,
                                   self.ratio_sum, seen, imputed=batch_weight)
        third, outer, fourth = moments
        return ShiftCorrection(self.third + third, self.outer_derivative + outer,
                               self.fourth + fourth, self.ratio_sum + ratio, seen,
                               imputed=self.imputed)

    def completed(self):
        """The state with the first batch's imputed share added:
        ``S ≈ N / (N - N_1) Σ_{j≥2} S_j`` (likewise ``∂B``, ``∂S``; see the
        module doc, "Streams started by fit"); the state itself where
        nothing was imputed."""
        if self.imputed == 0.0:
            return self
        scale = self.seen / (self.seen - self.imputed)
        return ShiftCorrection(scale * self.third, scale * self.outer_derivative,
                               scale * self.fourth, self.ratio_sum, self.seen)

    @classmethod
    def start(cls, n_models, p1):
        cube = (n_models, p1, p1, p1)
        return cls(np.zeros(cube), np.zeros(cube), np.zeros((n_models, p1 * p1, p1 * p1)),
                   0.0, 0.0)


def second_order_step(sites, previous, theta, cov, total_curvature, loss, impute=False):
    """One batch of the correction: the new state, the published estimate
    and its covariance.

    Parameters
    ----------
    sites : DWDSites
        The batch's sites (prepared): in-process, or sites that answer
        ``second_order_summary`` (:func:`batch_moments`).
    previous : ShiftCorrection or None
        The state after the earlier batches (None: the stream's first).
    theta : ndarray of shape (p1, n_models)
        The renewable estimate after this batch.
    cov : ndarray of shape (n_models, p1, p1)
        Its covariance.
    total_curvature : ndarray of shape (n_models, p1, p1)
        The stream's accumulated curvature with this batch.
    loss : object
        With elementwise ``derivative`` (``ℓ'``) and ``curvature`` (``ℓ''``).
    impute : bool, default=False
        The stream's first batch only: leave its moments out (no summary
        asked of the sites), to be imputed from the later batches'
        (:meth:`ShiftCorrection.completed`).

    Returns
    -------
    published : ndarray of shape (p1, n_models)
        The corrected estimate (``theta`` itself after the first batch).
    published_cov : ndarray of shape (n_models, p1, p1)
        Its covariance, :func:`delta_covariance` (``cov`` itself after the
        first batch).
    state : ShiftCorrection
    """
    n_models, p1 = cov.shape[0], cov.shape[1]
    start = ShiftCorrection.start(n_models, p1) if previous is None else previous
    moments = None if impute and previous is None else batch_moments(sites, theta, cov, loss)
    state = start.advance(moments, sites.weight_sum)
    if previous is None:  # one batch: r = 0, no correction
        return theta, cov, state
    full = state.completed()
    return (corrected_theta(theta, full, cov, total_curvature),
            delta_covariance(full, cov, total_curvature), state)


def smoothing_widths(gram, cov, batch_weight):
    """``h_k = (tr(V_k G) / W)^½`` per model (see the module doc), from the
    batch's summed Gram matrix ``G`` (``Σ_i w_i x̄_i x̄_iᵀ``) and row
    weight ``W``."""
    return np.sqrt(np.maximum(np.einsum("kab,ab->k", cov, gram), 0.0) / batch_weight)


def _bias(state, cov):
    """``b = ½ r S : V`` per model, shape (n_models, p1)."""
    return 0.5 * state.ratio_sum * np.einsum("kabc,kbc->ka", state.third, cov)


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
    step = np.linalg.solve(total_curvature, _bias(state, cov)[..., None])[..., 0]
    return theta - step.T


def delta_covariance(state, cov, total_curvature):
    """``A V_B Aᵀ``: the delta-method covariance of :func:`corrected_theta`.

    ``A = ∂(θ - C⁻¹ b)/∂θ = I - C⁻¹ ∂b/∂θ + C⁻¹ S_a C⁻¹ b`` (column ``a``
    of the last term; ``S_a = S[..., a] = ∂C/∂θ_a``) with
    ``∂b/∂θ_a = ½ r S : ∂V/∂θ_a`` and, ``V = C⁻¹ B C⁻¹``,
    ``∂V/∂θ_a = -C⁻¹ S_a V - V S_a C⁻¹ + C⁻¹ ∂_a B C⁻¹``
    (``∂_a B`` the state's ``outer_derivative``), plus ``S``'s own
    dependence on ``θ``, ``½ r (∂_a S) : V`` (the state's ``fourth``
    contracted with ``V``).

    Parameters
    ----------
    state : ShiftCorrection
    cov : ndarray of shape (n_models, p1, p1)
        ``V_B``.
    total_curvature : ndarray of shape (n_models, p1, p1)
        ``C_B``.

    Returns
    -------
    cov : ndarray of shape (n_models, p1, p1)
    """
    out = np.empty_like(cov)
    bias = _bias(state, cov)
    for k, (S, dB, V, C) in enumerate(zip(state.third, state.outer_derivative, cov,
                                          total_curvature)):
        Ci = np.linalg.inv(C)
        p1 = len(V)
        S_a, dB_a = np.moveaxis(S, 2, 0), np.moveaxis(dB, 2, 0)  # [a] = S[..., a]
        dV = -Ci @ S_a @ V - V @ S_a @ Ci + Ci @ dB_a @ Ci  # [a] = ∂V/∂θ_a
        dS_V = (state.fourth[k] @ V.reshape(-1)).reshape(p1, p1)  # [b, a] = (∂_a S : V)_b
        slope = 0.5 * state.ratio_sum * (S.reshape(p1, -1) @ dV.reshape(p1, -1).T + dS_V)
        A = np.eye(p1) - Ci @ slope + Ci @ (S_a @ (Ci @ bias[k])).T
        out[k] = A @ V @ A.T
    return 0.5 * (out + out.transpose(0, 2, 1))
