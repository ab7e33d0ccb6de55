"""Coefficient inference for renewable M-estimators: sandwich variance,
Wald intervals, a statsmodels-style table.

A penalized empirical-risk estimator ``θ̂`` solves ``Σ_i w_i g_i(θ) = 0``
with the per-row score ``g_i(θ) = y_i ℓ'(u_i) x̄_i + α P θ`` (``P`` the
penalty mask, ``u_i = y_i x̄_iᵀθ``). It is an M-estimator, not a maximum
likelihood one: its target is the population minimizer ``θ*`` of the
penalized objective at the same ``α``, and its variance is the sandwich

``Var θ̂ ≈ H⁻¹ B H⁻¹``,  ``H = Σ_i w_i ℓ''(u_i) x̄_i x̄_iᵀ + α W P``,
``B = Σ_i w_i² g_i g_iᵀ``

(Huber 1967; White 1982), not the inverse Fisher information that
Proposition 2 (eq. 47) of the DWD paper writes for a likelihood.

A renewable stream (Luo & Song 2020; the DWD paper's eqs. 30-37) updates
``θ_b`` by a linear system in the batch's scores. Linearized at ``θ*``,
each update is ``L_b e_b = M_b e_{b-1} + U_b`` with ``e_b = θ_b - θ*`` and
``U_b = -Σ_{i∈b} w_i g_i(θ*)`` independent of the earlier batches, so

``Σ_b = L_b⁻¹ (M_b Σ_{b-1} M_bᵀ + B_b) L_b⁻ᵀ``

(:func:`propagate_covariance`): ``p1 × p1`` numbers per model whatever
the stream length. When the update solves the renewable equation with the
accumulated curvature ``C = Σ_{j<b} H_j`` (``L_b = C + H_b``, ``M_b = C``)
this is exactly the offline sandwich ``(Σ_j H_j)⁻¹ (Σ_j B_j) (Σ_j H_j)⁻¹``
of the accumulated sums; when the stored curvature differs from the loss's
(the smoothed eq. 8 curvature, a single step of eq. 37), the recursion
keeps the variance of the update as it is.

The functions take the loss's derivatives as inputs and serve any smooth
(or, like genDWD, once-kinked) margin loss.

References
----------
.. [1] Huber, P. J. (1967). The behavior of maximum likelihood estimates
   under nonstandard conditions. Proc. Fifth Berkeley Symposium 1, 221-233.
.. [2] Luo, L. and Song, P. X.-K. (2020). Renewable estimation and
   incremental inference in generalized linear models with streaming data
   sets. JRSS-B 82(1), 69-97.
.. [3] Guo et al. (2025), Proposition 2, eq. 47 (the asymptotic normality
   this variance makes usable).
"""

import numpy as np
from scipy.stats import norm
from sklearn.utils.validation import check_is_fitted

__all__ = [
    "CoefficientInferenceMixin",
    "CoefficientTable",
    "inference_attributes",
    "propagate_covariance",
    "renewable_covariance",
    "score_covariance",
    "wald_table",
]


def score_covariance(summary, Theta, penalty):
    """``B = Σ_i w_i² g_i g_iᵀ`` per model, from a site summary.

    Parameters
    ----------
    summary : InferenceSummary
        Summed over the sites at ``Theta``.
    Theta : ndarray of shape (p1, K)
    penalty : ndarray of shape (p1,)
        ``α`` times the penalty mask (0 for the intercept).

    Returns
    -------
    B : ndarray of shape (K, p1, p1)
    """
    pulled = penalty[:, None] * Theta
    cross = np.einsum("ik,jk->kij", summary.score_sum, pulled)
    return (summary.score_outer + cross + cross.transpose(0, 2, 1)
            + summary.weight_sq_sum * np.einsum("ik,jk->kij", pulled, pulled))


def propagate_covariance(previous, system, carried, score_cov):
    """``L⁻¹ (M Σ Mᵀ + B) L⁻ᵀ`` per model (see the module doc).

    ``previous`` (Σ) and ``carried`` (M) may be None (a first batch, the
    offline fit: the sandwich ``L⁻¹ B L⁻ᵀ``). A singular ``L`` gives NaN.
    """
    middle = score_cov
    if previous is not None:
        middle = middle + carried @ previous @ carried.transpose(0, 2, 1)
    out = np.full_like(middle, np.nan)
    for k in range(len(middle)):
        try:
            left = np.linalg.solve(system[k], middle[k])
            out[k] = np.linalg.solve(system[k], left.T)
        except np.linalg.LinAlgError:
            continue
    return 0.5 * (out + out.transpose(0, 2, 1))


def renewable_covariance(previous, *, starting, continuing, prior, exact, used, ridge, score_cov,
                         one_step):
    """The covariance of each model's estimate after one batch.

    Parameters
    ----------
    previous : ndarray of shape (K, p1, p1) or None
        After the earlier batches (None: no earlier batch).
    starting : ndarray of bool of shape (K,)
        Models whose first estimate solved this batch's own equation (the
        offline fit, a stream's first batch with both sides): the sandwich.
    continuing : ndarray of bool of shape (K,)
        Models updated from an earlier estimate (renewable equation).
    prior : ndarray of shape (K, p1, p1) or None
        The accumulated curvature the update used (``Σ_{j<b} J_j``).
    exact : ndarray of shape (K, p1, p1)
        The batch's loss curvature at the new estimate (no ridge).
    used : ndarray of shape (K, p1, p1)
        The batch curvature the update solved with (with its ridge).
    ridge : ndarray of shape (p1,)
        ``α W_b`` times the penalty mask.
    score_cov : ndarray of shape (K, p1, p1)
        ``B_b`` (:func:`score_covariance`).
    one_step : bool
        The update is one Newton step (eq. 37) rather than the solved
        renewable equation (30).

    Returns
    -------
    cov : ndarray of shape (K, p1, p1)
        NaN for models neither starting nor continuing (no estimate yet).
    """
    out = np.full_like(score_cov, np.nan)
    hessian = exact + np.diag(ridge)[None]
    if starting.any():
        out[starting] = propagate_covariance(None, hessian[starting], None, score_cov[starting])
    if continuing.any():
        if one_step:  # e_b = e_{b-1} - L⁻¹ ∇(θ_{b-1}), L = C + J̃_b
            system = prior[continuing] + used[continuing]
            carried = system - hessian[continuing]
        else:  # (C + H_b) e_b = C e_{b-1} + U_b
            system = prior[continuing] + hessian[continuing]
            carried = prior[continuing]
        out[continuing] = propagate_covariance(previous[continuing], system, carried,
                                               score_cov[continuing])
    return out


def standard_errors(cov):
    """The square roots of the diagonals of a ``(K, p1, p1)`` covariance
    (negative rounding clipped at 0; NaN stays NaN)."""
    return np.sqrt(np.clip(np.diagonal(cov, axis1=1, axis2=2), 0.0, None))


def inference_attributes(coef_cov, fit_intercept):
    """The public fitted attributes of a covariance of ``(intercept, coef)``:
    ``coef_cov_``, ``coef_se_`` and ``intercept_se_`` (0 without an intercept)."""
    std = standard_errors(coef_cov)
    if fit_intercept:
        return dict(coef_cov_=coef_cov, intercept_se_=std[:, 0].copy(), coef_se_=std[:, 1:].copy())
    return dict(coef_cov_=coef_cov, intercept_se_=np.zeros(len(std)), coef_se_=std)


def wald_table(estimate, std_err, level=0.95):
    """Wald statistics of estimates with standard errors (normal reference).

    Returns
    -------
    z, p_value, lower, upper : ndarray
        ``z = estimate / std_err``, ``P(|Z| > |z|)``, and the ``level``
        two-sided interval ``estimate ± z_{(1+level)/2} std_err``.
    """
    estimate, std_err = np.asarray(estimate, float), np.asarray(std_err, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = estimate / std_err
    half = norm.ppf(0.5 + level / 2.0) * std_err
    return z, 2.0 * norm.sf(np.abs(z)), estimate - half, estimate + half


def _check_level(level):
    if not (isinstance(level, (int, float, np.floating)) and 0.0 < float(level) < 1.0):
        raise ValueError(f"level must be a float in (0, 1), got {level!r}.")
    return float(level)


class CoefficientTable:
    """A coefficient table as statsmodels prints it: one row per parameter
    of each class model (``coef``, ``std err``, ``z``, ``P>|z|`` and the
    interval bounds).

    Attributes
    ----------
    records : numpy.recarray
        Fields ``model``, ``term``, ``coef``, ``std_err``, ``z``,
        ``p_value``, ``lower``, ``upper``.
    level : float
    """

    def __init__(self, records, level):
        self.records = records
        self.level = level

    def to_frame(self):
        """The table as a pandas DataFrame (pandas required)."""
        import pandas as pd

        return pd.DataFrame.from_records(self.records)

    def __str__(self):
        low, high = (1 - self.level) / 2, (1 + self.level) / 2
        head = ("model", "term", "coef", "std err", "z", "P>|z|", f"[{low:.3g}", f"{high:.3g}]")
        rows = [head] + [
            (str(r.model), str(r.term), f"{r.coef:.4f}", f"{r.std_err:.4f}", f"{r.z:.3f}",
             f"{r.p_value:.3f}", f"{r.lower:.4f}", f"{r.upper:.4f}")
            for r in self.records
        ]
        widths = [max(len(row[j]) for row in rows) for j in range(len(head))]
        lines = ["  ".join(cell.ljust(w) if j < 2 else cell.rjust(w)
                           for j, (cell, w) in enumerate(zip(row, widths))) for row in rows]
        rule = "=" * len(lines[0])
        return "\n".join([rule, lines[0], "-" * len(lines[0])] + lines[1:] + [rule])

    __repr__ = __str__


class CoefficientInferenceMixin:
    """``confint`` and ``summary`` from the fitted standard errors
    (``intercept_se_``, ``coef_se_``, see :func:`inference_attributes`) of a
    linear classifier, one block per one-vs-rest model."""

    def _parameters_and_se(self):
        check_is_fitted(self)
        if not hasattr(self, "coef_se_"):
            raise AttributeError(
                f"This {type(self).__name__} was fitted without inference: set "
                "inference=True (without a privacy mechanism, or with "
                "mechanism='local-gaussian') and fit again.")
        return (np.column_stack([self.intercept_, self.coef_]),
                np.column_stack([self.intercept_se_, self.coef_se_]))

    def confint(self, level=0.95, method="wald", n_resamples=999, random_state=None):
        """Confidence intervals of every parameter.

        Parameters
        ----------
        level : float, default=0.95
            Coverage of the two-sided intervals (named ``level`` so as not to
            clash with the ridge strength ``alpha``).
        method : {'wald', 'bootstrap'}, default='wald'
            ``'wald'``: ``estimate ± z se`` from ``coef_se_``; after a
            private fit (``private_refinement_``) the bias-aware interval
            ``estimate ± cv(b / s) s`` with ``s`` the noise-aware standard
            error and ``b`` the bound on the refinement's residual bias
            (:mod:`skfedpriv.linear_model._inference_residual`), at most
            as wide as ``estimate ± z coef_se_`` at 95 %.
            ``'bootstrap'``: the parametric bootstrap of a private fit
            (``mechanism='local-gaussian', inference=True``), which replays
            the private refinement from its released numbers
            (:mod:`skfedpriv.linear_model._inference_bootstrap`):
            post-processing, at no further privacy cost.
        n_resamples : int, default=999
            Bootstrap replays (``method='bootstrap'`` only).
        random_state : None, int or numpy.random.Generator, default=None
            The bootstrap's own generator (``method='bootstrap'`` only).

        Returns
        -------
        intervals : ndarray of shape (n_models, 1 + n_features, 2)
            Lower and upper bounds; parameter 0 of each model is the
            intercept (``[0, 0]`` without one), then the coefficients in
            the order of ``coef_``.
        """
        level = _check_level(level)
        if method == "bootstrap":
            return self._bootstrap_confint(level, n_resamples, random_state)
        if method != "wald":
            raise ValueError(f"method must be 'wald' or 'bootstrap', got {method!r}.")
        return self._wald_intervals(level)

    def _wald_intervals(self, level):
        """``(n_models, p1, 2)`` Wald intervals, bias-aware after a private fit."""
        theta, std = self._parameters_and_se()
        refinement = getattr(self, "private_refinement_", None)
        if refinement is None:
            _, _, lower, upper = wald_table(theta, std, level)
            return np.stack([lower, upper], axis=-1)
        intervals = refinement.intervals(level)
        if not self.fit_intercept:
            intervals = np.concatenate([np.zeros_like(intervals[:, :1]), intervals], axis=1)
        return intervals

    def _bootstrap_confint(self, level, n_resamples, random_state):
        from ._inference_bootstrap import bootstrap_intervals

        if not (isinstance(n_resamples, (int, np.integer)) and n_resamples >= 10):
            raise ValueError(f"n_resamples must be an int >= 10, got {n_resamples!r}.")
        self._parameters_and_se()
        refinement = getattr(self, "private_refinement_", None)
        if refinement is None:
            raise ValueError(
                "method='bootstrap' replays a private refinement: it is offered for "
                "mechanism='local-gaussian' with inference=True, after fit or a stream's "
                "first batch (not after its later batches); use method='wald'.")
        intervals = bootstrap_intervals(refinement, level, n_resamples, random_state)
        if not self.fit_intercept:
            intervals = np.concatenate([np.zeros_like(intervals[:, :1]), intervals], axis=1)
        return intervals

    def summary(self, level=0.95):
        """A statsmodels-style coefficient table (see :class:`CoefficientTable`).

        Parameters
        ----------
        level : float, default=0.95
            Coverage of the intervals (those of :meth:`confint`, bias-aware
            after a private fit; ``z`` and ``P>|z|`` from ``coef_se_``).

        Returns
        -------
        table : CoefficientTable
            ``print(table)`` shows it; ``table.records`` is a numpy record
            array, ``table.to_frame()`` a pandas DataFrame.
        """
        level = _check_level(level)
        theta, std = self._parameters_and_se()
        z, p_value, _, _ = wald_table(theta, std, level)
        lower, upper = np.moveaxis(self._wald_intervals(level), -1, 0)
        names = getattr(self, "feature_names_in_", None)
        if names is None:
            names = [f"x{j}" for j in range(theta.shape[1] - 1)]
        terms = ["intercept"] + [str(name) for name in names]
        models = ([self.classes_[1]] if len(theta) == 1 else list(self.classes_))
        first = 0 if self.fit_intercept else 1
        rows = [(str(models[k]), terms[j], theta[k, j], std[k, j], z[k, j], p_value[k, j],
                 lower[k, j], upper[k, j])
                for k in range(len(theta)) for j in range(first, theta.shape[1])]
        records = np.rec.fromrecords(rows, names=(
            "model", "term", "coef", "std_err", "z", "p_value", "lower", "upper"))
        return CoefficientTable(records, level)
