"""Online federated logistic regression: Newton, or local steps with correlated-noise LDP.

Without a mechanism (``solver='newton'``) the federated Newton / renewable
protocol (:mod:`skfedpriv.linear_model._logistic_newton`) reaches
scikit-learn's optimum. With one (``solver='local-steps'``) it implements
Algorithm 1 of Zhang, Zhu, Fay and Johansson, "Locally differentially
private online federated learning with correlated noise"
(``shared/papers/ldp-online-federated-correlated-noise.txt``): each call to
``partial_fit`` is one communication round.
"""

import numbers
import warnings
from dataclasses import asdict, dataclass

import numpy as np
from sklearn.base import BaseEstimator

from .._loss import MultinomialLoss
from .._losses import count_models, logistic_probabilities, split_intercept
from .._param_validation import InvalidParameterError, Interval, Options
from ..privacy import (
    NoiseDominatesWarning,
    PrivacyBudget,
    PrivacyBudgetError,
    as_generator,
    clip_rows,
    warn_if_seeded,
)
from ..privacy._gradient_noise import (
    MECHANISMS,
    LearnerNoise,
    calibrate_gradient_noise,
    gradient_sensitivity,
    local_steps_noise_to_signal,
    max_non_expansive_step,
)
from ._base import FederatedClassifierMixin, StreamSettings, TrainingState
from ._dwd_sites import DWDSites
from ._inference import CoefficientInferenceMixin
from ._local_steps import BatchLearners, RoundRequest
from ._logistic_private import quadratic_update
from ._logistic_newton import newton_sites, newton_update

#: ``learning_rate='auto'``: this step size, lowered under a mechanism to the
#: largest one the sensitivity analysis allows (:func:`max_non_expansive_step`).
DEFAULT_LEARNING_RATE = 0.5


@dataclass(frozen=True)
class LogisticSettings(StreamSettings):
    """The validated hyperparameters of one stream (data-independent).

    ``learning_rate`` is resolved (``'auto'`` replaced by its value). A
    learner of the federated protocol (:mod:`skfedpriv.flower`) computes the
    same settings from the parameters the server sends, with
    :func:`logistic_settings`.
    """

    local_steps: int
    learning_rate: float
    server_learning_rate: float
    n_rounds: int
    mechanism: object
    epsilon: float
    delta: float
    clip_norm: float
    feature_clip_norm: object
    alpha: object
    fit_intercept: bool
    solver: str = "auto"
    max_iter: int = 100
    tol: float = 1e-12
    inference: bool = False

    def ridge(self, solver):
        """The ridge ``alpha`` the resolved ``solver`` runs with: the given
        one, or for ``alpha=None`` :data:`DEFAULT_NEWTON_ALPHA` on Newton and
        0 on the local steps (as published). Resolved per solver because
        ``'auto'`` picks the solver only once the sites are known."""
        if self.alpha is not None:
            return self.alpha
        return DEFAULT_NEWTON_ALPHA if solver in ("newton", "quadratic") else 0.0

    def as_dict(self):
        """The settings as a dict (name -> value)."""
        return asdict(self)


def _resolve_learning_rate(params):
    """The local step size η, checked against the sensitivity analysis.

    Under a mechanism the calibration assumes every local step is
    non-expansive when rows are clipped (``η <= 2 / (L + alpha)``) and the
    penalty step a contraction otherwise (``η alpha <= 2``);
    ``learning_rate='auto'`` takes ``DEFAULT_LEARNING_RATE`` lowered to that
    bound, an explicit value beyond it raises.
    """
    eta = params["learning_rate"]
    # the quadratic solver takes no local steps: nothing to bound
    private = params["mechanism"] is not None and params["solver"] != "quadratic"
    # a private stream runs the local steps: alpha=None is 0 there
    cx, alpha = params["feature_clip_norm"], float(params["alpha"] or 0.0)
    if isinstance(eta, str):  # 'auto'
        if not private:
            return DEFAULT_LEARNING_RATE
        bound = max_non_expansive_step(cx, params["fit_intercept"], alpha)
        return min(DEFAULT_LEARNING_RATE, bound)
    eta = float(eta)
    if private and cx is not None:
        limit = max_non_expansive_step(cx, params["fit_intercept"], alpha)
        if eta > limit * (1 + 1e-12):
            raise InvalidParameterError(
                f"learning_rate={eta!r} is too large for the sensitivity "
                "2*clip_norm/local_steps: local steps are non-expansive only for "
                f"learning_rate <= 2 / (L + alpha) = {limit:.6g}, with L = "
                "(feature_clip_norm**2 + fit_intercept) / 4. Lower learning_rate or "
                "feature_clip_norm, use learning_rate='auto', or set "
                "feature_clip_norm=None to calibrate for 2*clip_norm."
            )
    elif private and eta * alpha > 2.0:
        raise InvalidParameterError(
            f"learning_rate * alpha = {eta * alpha:.6g} > 2: the penalty step would "
            "expand distances; lower learning_rate or alpha."
        )
    return eta


def _check_solver(params):
    """``solver='newton'`` runs no mechanism (its sums would leave the sites
    in the clear); ``'local-steps'`` and ``'quadratic'`` are the private
    ones, and ``'quadratic'`` needs the row clip its sensitivity is
    computed from."""
    if params["solver"] == "newton" and params["mechanism"] is not None:
        raise InvalidParameterError(
            f"solver='newton' runs no privacy mechanism (mechanism="
            f"{params['mechanism']!r}): the sites would send exact gradient and "
            "curvature sums. Use solver='local-steps', 'quadratic' (or 'auto') with a "
            "mechanism."
        )
    if params["solver"] == "quadratic" and params["feature_clip_norm"] is None:
        raise InvalidParameterError(
            "solver='quadratic' needs feature_clip_norm: every row is clipped to it "
            "(in training and at prediction) and the sensitivity of the released "
            "quadratic models is computed from it. Set a data-independent bound, "
            "e.g. sqrt(n_features) for standardized features."
        )


#: ``alpha=None`` without a mechanism under ``solver='newton'`` or ``'auto'``:
#: a ridge keeps the Newton fit finite on separable rows.
DEFAULT_NEWTON_ALPHA = 1e-4


def _check_inference(params):
    """``inference=True`` needs the Newton path without a mechanism (the
    covariance is computed from exact sums)."""
    if not params["inference"]:
        return
    if params["mechanism"] is not None:
        raise InvalidParameterError(
            f"inference=True is not offered with a privacy mechanism (mechanism="
            f"{params['mechanism']!r}): the covariance would be computed from exact "
            "sums. Use inference=False, or fit without a mechanism."
        )
    if params["solver"] in ("local-steps", "quadratic"):
        raise InvalidParameterError(
            "inference=True needs solver='newton' (or 'auto' without a mechanism): "
            f"the {params['solver']} solver keeps no covariance to build on."
        )


def _settings_from_params(params):
    """The cross-parameter rules; ``params`` already passed the constraints."""
    _check_solver(params)
    _check_inference(params)
    return LogisticSettings(
        local_steps=int(params["local_steps"]),
        learning_rate=_resolve_learning_rate(params),
        server_learning_rate=float(params["server_learning_rate"]),
        n_rounds=int(params["n_rounds"]),
        mechanism=params["mechanism"],
        epsilon=float(params["epsilon"]),
        delta=float(params["delta"]),
        clip_norm=float(params["clip_norm"]),
        feature_clip_norm=(None if params["feature_clip_norm"] is None
                           else float(params["feature_clip_norm"])),
        alpha=None if params["alpha"] is None else float(params["alpha"]),
        fit_intercept=bool(params["fit_intercept"]),
        solver=params["solver"],
        max_iter=int(params["max_iter"]),
        tol=float(params["tol"]),
        inference=bool(params["inference"]),
    )


def noise_calibration(settings):
    """The noise of a stream with these settings (data-independent).

    Returns
    -------
    calibration : GradientNoiseCalibration
        Of :func:`~skfedpriv.privacy._gradient_noise.calibrate_gradient_noise`,
        for the gradient sensitivity ``2 B_g / τ`` when rows are clipped,
        else ``2 B_g``.
    """
    sensitivity = gradient_sensitivity(settings.clip_norm, settings.local_steps,
                                       settings.feature_clip_norm is not None)
    return calibrate_gradient_noise(settings.mechanism, settings.n_rounds, settings.epsilon,
                                    settings.delta, sensitivity)


class LogisticRegression(CoefficientInferenceMixin, FederatedClassifierMixin, BaseEstimator):
    """Online federated logistic regression: Newton, or local steps with local DP.

    Rows live at *learners* (sites) named by ``sample_group``. Three solvers
    (``solver``):

    * ``'newton'`` (the default without a mechanism): the federated Newton
      protocol of :class:`~skfedpriv.DWDClassifier` with the logistic loss
      (two classes) or the multinomial loss (more classes). The sites send
      only sums over their rows (loss, gradient, curvature matrix, losses
      along a search direction); the server takes damped Newton steps.
      :meth:`fit` minimizes ``Σ_i ℓ(θ; x_i, y_i) + (alpha n / 2) ‖w‖²``
      (the intercept unpenalized), the objective of scikit-learn's
      ``LogisticRegression(C=1 / (n alpha))`` times ``1 / C``: the same
      optimum, in a handful of rounds (``n_iter_`` Newton steps, two or three
      rounds each). :meth:`partial_fit` is the renewable update (Luo and Song
      2020, the logistic twin of the DWD paper's OnWP): each batch minimizes
      its loss and ridge plus ``½ (θ - θ_{b-1})ᵀ P (θ - θ_{b-1})``, ``P`` the
      curvature of the earlier batches, so a stream ends near the offline
      fit without revisiting rows. No mechanism runs on it: the sums leave
      the sites exact.
    * ``'local-steps'`` (private, the default with a mechanism): Algorithm
      1 of Zhang, Zhu, Fay and Johansson [1]_, below. Its privacy analysis
      needs what Newton does not have: every message a clipped,
      bounded-sensitivity function of the rows (a curvature matrix or an
      exact gradient sum would need its own noise per round).
    * ``'quadratic'`` (private; in-process learners only): each call to
      :meth:`partial_fit` is one batch (:meth:`fit`: ``n_rounds`` of them,
      each learner's rows split as below). Every learner sends, at the
      public ``θ_{b-1}``, its batch's second-order model of the logistic
      loss, ``a_b = Σ_i x̄_i c_i`` and ``J_b = Σ_i h_i x̄_i x̄_iᵀ`` per
      one-vs-rest model (``h_i = σ(s_i) σ(-s_i)``, ``c_i = ℓ'(s_i) - h_i
      s_i``), as a continual prefix sum through the factorization of
      ``mechanism`` (the logistic twin of :class:`~skfedpriv.DWDClassifier`'s
      ``'local-tree'`` / ``'local-blt'``). The server minimizes the summed
      models plus the ridge ``(alpha n / 2) ‖w‖²`` (``alpha=None``: 1e-4);
      the curvature is floored at the spectral norm of its noise. A batch's
      noise is then averaged over the whole stream instead of frozen into
      the model by local steps: the better private solver on short streams
      and for many classes; on long streams with a tuned row clip the local
      steps can do as well (see :doc:`/guide_logistic`). Rows are
      clipped to ``feature_clip_norm`` (required with a mechanism); per row
      the vector ``(c_ik)_k`` is clipped to ``B_c = clip_norm sqrt(K) / 2``
      and ``(h_ik)_k``
      to 1/4 (joint clipping over the ``K`` models: no split of ε). The
      learners of the first batch hold the noise streams: a later batch
      with a learner not among them is refused, and a learner without rows
      in a batch sends its noise increment alone.

    ``solver='auto'`` picks ``'local-steps'`` with a mechanism (and on
    learners of the local-steps protocol, :meth:`fit_sites` with a
    :class:`~skfedpriv.linear_model.LogisticLearners`), else ``'newton'``;
    ``solver='newton'`` with a mechanism is refused. The solver used is
    ``solver_``.

    With local steps, one call to :meth:`partial_fit` is one communication
    round ``r``:

    1. every learner present in the call takes its rows of the call, in
       order, as its clients of the round and splits them into
       ``local_steps`` (τ) consecutive chunks (sizes as equal as possible);
    2. starting from the global model ``x^r`` it takes τ local steps
       ``z <- z - η (mean of clipped per-example gradients of the chunk
       + alpha z)`` (eq. 2, first line; the intercept is not penalized);
    3. it forms ``g_i^r = (x^r - z_i^{r,τ}) / (η τ)`` (Algorithm 1, line 10),
       adds its correlated-noise increment ``(B ξ_i)_{r+1} - (B ξ_i)_r``
       (lines 11-12) and sends the result ``ĝ_i^r``;
    4. the server averages the messages it received and steps,
       ``x^{r+1} = x^r - η_g η τ mean_i ĝ_i^r`` (line 15).

    A learner absent from a round sends nothing and the server averages over
    the learners present. Its noise increments of the rounds it missed are
    added to its next message, so what the server accumulates from every
    learner is always a noisy prefix sum ``(A G_i + B ξ_i)_r`` (eq. 4).
    :meth:`fit` resets the model and streams the rows once through the same
    round function over ``n_rounds`` rounds: each learner's rows, in order,
    are split into ``n_rounds`` consecutive blocks, block ``r`` forms its
    clients of round ``r``.

    Two classes are fitted with one logistic model; more classes with local
    steps one-vs-rest (one logistic model per class, all trained in the
    same rounds on the same clients), with the budget shared as described
    below; with Newton one multinomial (softmax) model, as scikit-learn.

    The hyperparameters ``local_steps``, ``learning_rate``,
    ``server_learning_rate``, ``n_rounds``, ``clip_norm`` and
    ``feature_clip_norm`` are those of the local steps; ``max_iter`` and
    ``tol`` those of Newton.

    Parameters
    ----------
    local_steps : int, default=5
        τ, local steps per round.
    learning_rate : float or 'auto', default='auto'
        Local step size η. ``'auto'`` is 0.5, lowered under a mechanism to
        the largest step the privacy analysis allows, computed from
        declared quantities only (see Notes): ``2 / (L + alpha)`` with
        ``L = (feature_clip_norm² + fit_intercept) / 4`` when
        ``feature_clip_norm`` is set, else ``2 / alpha``; so every valid
        ``feature_clip_norm`` works with the default, and a configuration
        with 0.5 inside the bound runs exactly as with ``learning_rate=0.5``.
        An explicit value beyond the bound raises
        a ``ValueError``. The value used is
        ``learning_rate_``. Not used (nor bounded) by ``solver='quadratic'``.
    server_learning_rate : float, default=1.0
        Server step size η_g (the server moves by ``η_g η τ`` times the mean
        message).
    n_rounds : int, default=100
        Horizon R: the number of rounds the noise is planned for, and the
        number of rounds :meth:`fit` splits the rows into. With a mechanism,
        :meth:`partial_fit` past ``n_rounds`` rounds raises
        :class:`~skfedpriv.privacy.PrivacyBudgetError`.
    mechanism : {None, 'independent', 'tree', 'honaker', 'toeplitz', \
'optimal', 'blt'}, default=None
        Noise of each learner's messages, from the factorization ``A = B C``
        of the R×R prefix-sum matrix (section III-B): independent noise
        (``C = I``), binary tree (eq. 5) with the plain or Honaker estimator,
        Toeplitz square root (eq. 8), optimal (eq. 7), or buffered linear
        Toeplitz. ``None`` adds no noise (not private). With
        ``solver='quadratic'`` the same factorizations, over the batches.
    epsilon : float, default=1.0
        ε of the local DP guarantee (validated always, used only with a
        mechanism).
    delta : float, default=1e-5
        δ of the local DP guarantee, ``0 < delta < 1``.
    clip_norm : float, default=1.0
        Bound on the Euclidean norm of each per-example gradient, B_g: every
        per-example gradient (of all class models together) is clipped to
        this L2 norm; with K one-vs-rest models, each model's
        per-example gradient is clipped to ``clip_norm / sqrt(K)``.
        Applied with and without a mechanism, so ``mechanism=None`` is the
        same algorithm without noise (for the same ``learning_rate_``).
        ``solver='quadratic'``: each row's vector of linear coefficients
        ``(c_ik)_k`` over the ``K`` models is clipped to L2 norm ``B_c =
        clip_norm sqrt(K) / 2``, in units of its norm at ``θ = 0`` (each
        ``c_ik`` is ``∓1/2`` there): the default clips no row at the start
        and only misclassified rows later (one model's ``|c|`` is below 1).
    feature_clip_norm : float or None, default=None
        C_x: if set, every row is clipped to L2 norm ``C_x`` (in
        ``fit``, ``partial_fit`` and at prediction) and the local steps are
        kept non-expansive, which allows the smaller sensitivity
        ``2 B_g / τ`` (see Notes). ``None`` leaves rows as they are and, with
        a mechanism, calibrates for ``2 B_g``. Newton clips no row;
        ``solver='quadratic'`` requires it and clips rows likewise (its
        sensitivities use ``C2 = sqrt(C_x² + fit_intercept)``).
    alpha : float or None, default=None
        ``None`` is ``1e-4`` when the solver is (or ``'auto'`` resolves to)
        Newton without a mechanism (a ridge keeps the fit finite on
        separable rows), else ``0``. With Newton, scikit-learn's ``C`` is
        ``1 / (n alpha)`` for ``n`` rows (the batch's weight).
        L2 penalty strength (weight decay in the local steps, not clipped).
    fit_intercept : bool, default=True
        Fit an unpenalized intercept.
    random_state : None, int, numpy.random.Generator or RandomState, \
default=None
        Source of the noise. ``None`` uses fresh OS entropy, as private
        releases should. With a mechanism, an integer seed makes ``fit``
        and the first ``partial_fit`` of a stream emit a
        :class:`~skfedpriv.privacy.SeededNoiseWarning`: whoever knows the
        seed can regenerate the noise and remove it. A ``Generator`` or ``RandomState`` is refused with a mechanism
        (``clone`` would copy it into every candidate, fold and refit), and
        a release has ``random_state=None``.
    budget : PrivacyBudget or None, default=None
        A budget shared with other estimators (it survives ``clone``):
        ``fit`` and the first ``partial_fit`` of a stream spend
        ``(epsilon, delta)`` from it (the guarantee of all ``n_rounds``
        rounds) before any state changes, and raise
        :class:`~skfedpriv.PrivacyBudgetError` if it would overspend. The
        spend is recorded as one Gaussian mechanism (``sigma=noise_scale_``,
        ``sensitivity=sensitivity_``, see Notes), so the budget's ledger can
        compose several streams exactly.
    classes : array-like of shape (n_classes,) or None, default=None
        The label set, declared. With a mechanism it is required (here or
        as ``classes`` of the first :meth:`partial_fit`): a label set read
        from the data would reveal a row's label (a row with a new label
        changes ``classes_`` and the shape of ``coef_``). Rows with a label
        outside it are refused with a ``ValueError`` before anything
        changes. ``None`` without a mechanism: ``fit`` takes the labels of
        ``y``, as scikit-learn does.
    solver : {'auto', 'newton', 'local-steps', 'quadratic'}, default='auto'
        See above (``'auto'`` never picks ``'quadratic'``).
    max_iter : int, default=100
        Newton steps at most per batch (``solver='newton'``).
    tol : float, default=1e-12
        Newton stops once half its decrement ``½ gᵀH⁻¹g`` (the objective gap
        of the quadratic model) is at most ``tol`` times the objective.
    inference : bool, default=False
        ``solver='newton'``, no mechanism (refused otherwise, before
        anything changes): also estimate the covariance of
        ``(intercept_, coef_)``, the sandwich ``H⁻¹ B H⁻¹`` of the penalized
        M-estimator, propagated over a ``partial_fit`` stream (see
        :doc:`/guide_inference`). With more than two classes, of the
        centred multinomial parameters (every feature's coefficients and
        the intercepts summing to zero over the classes). Its target is the population minimizer of
        the penalized objective at the same ``alpha`` (the true coefficients
        of a well-specified logistic model as ``alpha -> 0``). One more
        summary per batch from each site (curvature and score outer
        products at the new estimate).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The declared label set (with a mechanism: the ``classes``
        hyperparameter or the first ``partial_fit``'s ``classes``, never
        read from the data).
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        The global model ``x^r`` after the last round: post-processing of
        the learners' noisy messages, covered by the statement.
    intercept_ : ndarray of shape (1,) or (n_classes,)
        Part of the global model, covered likewise.
    n_features_in_ : int
        Data-independent (the schema).
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Defined when X has string feature names. Data-independent.
    learner_labels_ : ndarray of shape (n_learners,)
        Labels of the learners seen, in order of first appearance (learners
        new in the same call in the order of :func:`numpy.unique`). It
        depends on ``sample_group`` only, which the neighbouring relation
        keeps (a replaced row stays at its learner and round), and tells no
        more than the server sees: which learners sent messages. There are
        no per-learner models.
    n_rounds_seen_ : int
        Communication rounds run so far (data-independent).
    gradient_sensitivity_ : float
        L2 bound on the change of one learner's ``g_i^r`` when one client of
        the round is replaced: ``2 B_g / τ`` when ``feature_clip_norm`` is
        set, else ``2 B_g``.
    factorization_sensitivity_ : float
        Largest column norm of ``C`` (exact, computed from the factors; 1
        for independent noise; ``nan`` without a mechanism).
    sensitivity_ : float
        L2 sensitivity of ``C G_i``: ``factorization_sensitivity_ *
        gradient_sensitivity_`` (Appendix B, eq. 15); ``nan`` without a
        mechanism. ``solver='quadratic'``: the largest column norm of ``C``
        (each step's input has unit sensitivity; ``gradient_sensitivity_``,
        ``factorization_sensitivity_`` and ``learning_rate_`` are not
        defined there).
    learning_rate_ : float
        The local step size η used (``learning_rate`` with ``'auto'``
        resolved; data-independent).
    noise_scale_ : float
        Standard deviation σ of each entry of ξ_i, from the exact analytic
        Gaussian calibration of (ε, δ) for ``sensitivity_``; 0 without a
        mechanism. ``solver='quadratic'``: σ per unit of sensitivity (the
        linear part's noise std is ``σ Δ_a / w_a``, the curvature's
        ``σ Δ_J / w_J``; :mod:`skfedpriv.privacy._logistic_summaries`).
    privacy_spent_ : tuple of float
        ``(epsilon, delta)`` of the guarantee, which covers all
        ``n_rounds`` rounds (so it is the full budget once the first round
        ran); ``(inf, 0.0)`` without a mechanism.
    solver_ : {'newton', 'local-steps', 'quadratic'}
        The solver of the stream (data-independent).
    n_iter_ : int
        Newton steps of the last call (``'newton'``), or rounds of the last
        call (``'local-steps'``).
    n_samples_seen_ : float
        ``'newton'`` only: the row weight of the stream so far. The Newton
        path publishes ``classes_``, ``coef_``, ``intercept_``,
        ``learner_labels_``, ``n_rounds_seen_`` (requests to the sites),
        ``n_iter_``, ``n_samples_seen_``, ``solver_``, ``noise_scale_`` (0)
        and ``privacy_spent_`` (``(inf, 0.0)``); the renewable curvature
        stays in the training state. The local-steps attributes
        (sensitivities, ``learning_rate_``) are not defined.
    coef_cov_ : ndarray of shape (1, p1, p1) or (1, n_classes p1, n_classes p1)
        With ``inference=True``: the estimated covariance of
        ``(intercept_, coef_)`` (the intercept first, when fitted); more
        than two classes: of ``np.column_stack([intercept_, coef_]).ravel()``
        (class by class), of rank ``(n_classes - 1) p1`` (the parameters sum
        to zero over the classes). Non-private, like every Newton attribute.
    coef_se_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        With ``inference=True``: standard errors of ``coef_``.
    intercept_se_ : ndarray of shape (1,) or (n_classes,)
        With ``inference=True``: standard error of ``intercept_`` (0
        without one). :meth:`confint` and :meth:`summary` use them.

    Notes
    -----
    **Privacy statement.** With a mechanism, every learner's sequence of
    messages ``ĝ_i^0, ..., ĝ_i^{R-1}`` over all ``n_rounds`` rounds is
    (ε, δ)-differentially private with respect to replacing the row of one
    of its clients (any one row of any one round) by any other row, against
    the server and anyone else who sees the learner's messages or the
    released global models ``x^1, ..., x^R`` (post-processing). It holds
    under adaptive continual release (Denisov et al. 2022, Thm. 2.1, as used
    in Appendix B). Each message is post-processing of ``C G_i + ξ_i`` with
    ``ξ_i`` iid ``N(0, σ²)``; σ is the exact analytic Gaussian calibration
    (Balle & Wang 2018) for the L2 sensitivity ``sensitivity_``, not the
    paper's zCDP conversion (Lemma IV.8), which adds more noise. Learners
    joining after round 0 use the first rounds of a stream of the same
    factorization (a leading block of ``C``: sensitivity no larger).

    **Sensitivity.** Lemma IV.8 uses ``Δ = 2 B_g / τ`` for ``g_i^r``. The
    replaced client changes one local step; the other τ - 1 gradients are
    taken at iterates that move with it, so the bound needs every later
    local step to be non-expansive. This holds here when rows are clipped
    to ``C_x`` (``feature_clip_norm``): per model, the clipped gradient of
    the logistic loss on row ``x_bar = (1, x)`` is ``ψ(θ·x_bar) x_bar`` with ``ψ`` the
    logistic derivative clipped in magnitude, a monotone function with
    Lipschitz constant at most 1/4, so the clipped loss is convex and
    ``L``-smooth with ``L = (C_x² + fit_intercept) / 4``; adding the
    penalty gives ``L + alpha``, and a gradient step of a convex
    ``L'``-smooth function with ``η <= 2 / L'`` is non-expansive
    (Baillon-Haddad). With a mechanism, ``learning_rate='auto'`` therefore
    takes ``min(0.5, 2 / (L + alpha))`` and an explicit ``learning_rate >
    2 / (L + alpha)`` raises a ``ValueError``. Then the
    replaced step moves the local iterate by at most ``η 2 B_g / m`` (m the
    chunk size), later steps do not enlarge it and ``‖g_i - g_i'‖ <=
    2 B_g / (τ m) <= 2 B_g / τ``. Softmax would not keep this structure
    (clipping a vector-valued gradient need not stay co-coercive), which is
    why multiclass is one-vs-rest, each model clipped to ``B_g/√K``, so one
    client's gradient of all models has norm at most ``B_g`` and the same
    ``2 B_g / τ`` bounds all models together.
    Without ``feature_clip_norm`` the code calibrates for ``2 B_g``: every
    local step moves by η times a mean of vectors of norm at most ``B_g``
    plus the penalty step ``(1 - η alpha)`` (a contraction; ``η alpha <= 2``
    is enforced), so ``‖z_τ - z_τ'‖ <= 2 η τ B_g``. Both bounds are checked
    by brute force in the tests.

    **Release and training state.** Every public attribute is part of the
    release; with a mechanism each is covered by the privacy statement
    (``coef_``, ``intercept_``) or does not depend on the rows' values (the
    declared ``classes_``, ``learner_labels_``, ``n_rounds_seen_``, ``learning_rate_``, the schema,
    and the calibration attributes, which depend on the hyperparameters
    only). The fitted estimator also holds the secret state that
    continues the stream, in one private ``TrainingState`` object: the
    noise generator, every learner's noise stream (its past draws or
    buffers) and the increments of missed rounds not yet sent. Whoever
    holds it can subtract the noise from the model (with
    ``random_state=None`` too) and read clipped gradients, hence labels. Pickle the training estimator only to continue a stream
    on a trusted machine; publish :meth:`release`, a fitted copy that
    predicts identically and holds only the attributes listed above (and
    the validated hyperparameters). ``partial_fit`` on a release raises
    :class:`~skfedpriv.linear_model._base.ReleasedModelError`. A copy of the training estimator (pickle, deep copy) and its
    original continue the stream once from each point: the second
    continuation raises :class:`~skfedpriv.StreamReplayError` (in this
    process always; in another process only with a file ``budget``). A
    Pipeline or meta-estimator holding it: publish
    :func:`skfedpriv.release`.

    **Privacy statement, solver='quadratic'.** With a mechanism, every
    learner's sequence of messages over all ``n_rounds`` batches is
    (ε, δ)-differentially private with respect to replacing any one of its
    rows (in any batch) by any other row, against the server and anyone who
    sees the messages or the released models (post-processing), under
    adaptive continual release (Denisov et al. 2022, Thm. 2.1): a row is in
    one batch of one learner, so it enters one step of that learner's
    prefix-sum stream, whose input per step, ``(w_a a_b / Δ_a,
    w_J vech(J_b) / Δ_J)`` with ``w_a² + w_J² = 1``, moves by at most 1 in
    L2 when one row is replaced (``Δ_a = 2 C2 B_c``, ``Δ_J = sqrt(2) C2²/4``,
    from the enforced clips; checked by brute force in the tests). σ is the
    exact analytic Gaussian calibration for the largest column norm of
    ``C``; one Gaussian charge per stream. Before it, a
    :class:`~skfedpriv.privacy.NoiseDominatesWarning` says when the noise
    of the summed linear term is expected to exceed the largest sum the
    stream's rows could give (public quantities only: the first batch's
    size times ``n_rounds``, σ, the clips, the learners, ``p``, ``K``).

    **Warning.** Before the charge of a local-steps stream on rows in this
    process (``fit`` / ``partial_fit``), a
    :class:`~skfedpriv.privacy.NoiseDominatesWarning` says when the noise
    the model accumulates over ``n_rounds`` rounds (the mean of the first
    batch's learners' prefix-sum noise) is expected to exceed a quarter of
    ``n_rounds B_g``, the largest move the clipped gradients could make
    (the mean clipped gradient is far below its bound; the threshold is
    measured, benchmarks/README.md); public quantities only.

    **Budget.** The learners' noise is independent, so the whole stream,
    all learners and all rounds, is one Gaussian mechanism on the stacked
    ``C G_i`` with L2 sensitivity ``sensitivity_`` (one row is at one
    learner) and noise std ``noise_scale_``: a ``budget`` is charged once per
    stream with ``mechanism="gaussian"``, ``mu = sensitivity_ /
    noise_scale_``, whose exact ε at ``delta`` is ``epsilon``.

    **Noise state.** Tree: ``O(log R)`` arrays of the model's size per
    learner; BLT: ``n_buffers`` arrays; Toeplitz and optimal keep every past
    draw (``O(r)`` arrays per learner at round r; see
    :mod:`skfedpriv.privacy`). The optimal and BLT factors are
    computed once per R and cached on disk.

    References
    ----------
    .. [1] Zhang, Zhu, Fay, Johansson, "Locally differentially private
       online federated learning with correlated noise", Algorithm 1,
       eqs. 2-5, 7-8, Lemma IV.8, Appendix B (eq. 15-16).
    .. [2] Denisov, McMahan, Rush, Smith, Thakurta, "Improved differential
       privacy for SGD via optimal private linear operators on adaptive
       streams", NeurIPS 2022.
    .. [3] Balle and Wang, "Improving the Gaussian mechanism for
       differential privacy", ICML 2018.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skfedpriv.linear_model._logistic import LogisticRegression
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> learners = [i % 5 for i in range(len(y))]
    >>> clf = LogisticRegression(alpha=1e-3)  # Newton: scikit-learn's C = 1 / (n alpha)
    >>> round(clf.fit(X, y, sample_group=learners).score(X, y), 3), clf.solver_
    (0.988, 'newton')
    >>> steps = LogisticRegression(solver="local-steps", n_rounds=20, local_steps=5,
    ...                            learning_rate=0.5)
    >>> round(steps.fit(X, y, sample_group=learners).score(X, y), 2)
    0.98
    >>> private = LogisticRegression(n_rounds=20, mechanism="toeplitz",
    ...                              epsilon=2.0, delta=1e-3,
    ...                              feature_clip_norm=6.0, classes=[0, 1],
    ...                              learning_rate=0.2)
    >>> private.fit(X, y, sample_group=learners).privacy_spent_
    (2.0, 0.001)
    >>> published = private.release()  # no noise state: safe to share
    >>> bool((published.predict(X) == private.predict(X)).all())
    True
    """

    # the validated hyperparameters of the stream (data-independent);
    # prediction reads feature_clip_norm from them
    _release_private_attributes = ("_settings",)

    _parameter_constraints = {
        "local_steps": [Interval(numbers.Integral, 1, None)],
        "learning_rate": [Options("auto"), Interval(numbers.Real, 0, None, closed="neither")],
        "server_learning_rate": [Interval(numbers.Real, 0, None, closed="neither")],
        "n_rounds": [Interval(numbers.Integral, 1, None)],
        "mechanism": [None, MECHANISMS],
        "epsilon": [Interval(numbers.Real, 0, None, closed="neither")],
        "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
        "clip_norm": [Interval(numbers.Real, 0, None, closed="neither")],
        "feature_clip_norm": [None, Interval(numbers.Real, 0, None, closed="neither")],
        "alpha": [None, Interval(numbers.Real, 0, None, closed="left")],
        "fit_intercept": ["boolean"],
        "random_state": ["random_state"],
        "budget": [None, PrivacyBudget],
        "classes": [None, "array-like"],
        "solver": [Options("auto", "newton", "local-steps", "quadratic")],
        "max_iter": [Interval(numbers.Integral, 1, None)],
        "tol": [Interval(numbers.Real, 0, None, closed="neither")],
        "inference": ["boolean"],
    }

    def __init__(
        self,
        local_steps=5,
        learning_rate="auto",
        server_learning_rate=1.0,
        n_rounds=100,
        mechanism=None,
        epsilon=1.0,
        delta=1e-5,
        clip_norm=1.0,
        feature_clip_norm=None,
        alpha=None,
        fit_intercept=True,
        random_state=None,
        budget=None,
        classes=None,
        solver="auto",
        max_iter=100,
        tol=1e-12,
        inference=False,
    ):
        self.local_steps = local_steps
        self.learning_rate = learning_rate
        self.server_learning_rate = server_learning_rate
        self.n_rounds = n_rounds
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.feature_clip_norm = feature_clip_norm
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.random_state = random_state
        self.budget = budget
        self.classes = classes
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.inference = inference

    def _check_param_combinations(self, params):
        return _settings_from_params(params)

    # ------------------------------------------------------------------
    # public API
    # ------------------------------------------------------------------

    def fit(self, X, y, sample_group=None):
        """Reset and fit: Newton to the optimum, or local steps over ``n_rounds`` rounds.

        ``solver_='newton'``: Newton steps on the sites' sums until the
        decrement is within ``tol``. ``'local-steps'``: each learner's rows,
        in order, are split into ``n_rounds``
        consecutive blocks (as :func:`numpy.array_split`); block ``r`` of
        every learner is round ``r``, run by the same code as
        :meth:`partial_fit`. A learner with fewer rows than ``n_rounds`` is
        absent from the later rounds.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Sparse rows are used as CSR. ``solver='newton'``: sparse
            products, the rows never densified (the curvature matrix is
            dense, ``(p + 1)²`` numbers, times ``K²`` for the multinomial
            loss). ``solver='local-steps'`` (every mechanism): one round's
            rows are densified at a time (``fit``: about ``n / n_rounds``
            rows of ``p`` floats).
        y : array-like of shape (n_samples,)
        sample_group : array-like of shape (n_samples,), default=None
            Learner of each row (any hashable labels); None is one learner.

        Returns
        -------
        self : LogisticRegression
        """
        return self._fit_batch(X, y, sample_group, new_stream=True)

    def partial_fit(self, X, y, sample_group=None, classes=None):
        """One batch: the renewable Newton update, or one round of local steps.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            The round's clients (rows), in arrival order per learner;
            sparse rows as in :meth:`fit`.
        y : array-like of shape (n_samples,)
        sample_group : array-like of shape (n_samples,), default=None
            Learner of each row; None is one learner. Learners not in the
            call are absent from the round.
        classes : array-like of shape (n_classes,), default=None
            All classes of the stream; required on the first call.

        Returns
        -------
        self : LogisticRegression

        Raises
        ------
        PrivacyBudgetError
            With a mechanism, when ``n_rounds`` rounds have already run; the
            estimator is left unchanged.
        ValueError
            On invalid input or hyperparameters; the estimator is left
            unchanged.
        """
        return self._fit_batch(X, y, sample_group, classes=classes, new_stream=False)

    def fit_sites(self, sites, classes=None):
        """Start a new stream of ``n_rounds`` rounds on learners reached from outside.

        The same algorithm, checks, budget charge and errors as :meth:`fit`,
        with the rows at the learners: each round the estimator sends the
        global model and averages the messages ``sites`` returns
        (:meth:`~skfedpriv.linear_model.LogisticLearners.local_updates`).

        Parameters
        ----------
        sites : LogisticLearners
            The learners, e.g. Flower's remote learners
            (:func:`skfedpriv.flower.federated_fit`). With a mechanism they
            must add their own noise (``holds_noise``).
        classes : array-like of shape (n_classes,), default=None
            The label set; default: the ``classes`` hyperparameter, else
            (without a mechanism) the labels the learners report.

        Returns
        -------
        self : LogisticRegression
        """
        return self._fit_learners(sites, classes, new_stream=True)

    def partial_fit_sites(self, sites, classes=None):
        """One communication round on learners reached from outside.

        The same as :meth:`partial_fit` (checks, horizon, budget, errors)
        with the rows at the learners; see :meth:`fit_sites`.

        Parameters
        ----------
        sites : LogisticLearners
        classes : array-like of shape (n_classes,), default=None
            All classes of the stream; required on the first call unless
            the ``classes`` hyperparameter is set.

        Returns
        -------
        self : LogisticRegression
        """
        return self._fit_learners(sites, classes, new_stream=False)

    # ------------------------------------------------------------------
    # one stream pattern
    # ------------------------------------------------------------------

    def _check_continuation(self, settings, holds_noise=False):
        """Refuse a continuation past the planned rounds, from the other side
        of the noise streams, or with changed hyperparameters."""
        if self._settings.mechanism is not None:
            if self.n_rounds_seen_ >= self._settings.n_rounds:
                raise PrivacyBudgetError(
                    f"all n_rounds={self._settings.n_rounds} rounds the noise was "
                    "planned for have run; the (epsilon, delta) guarantee covers no "
                    "more releases. Start a new stream with fit or a fresh estimator."
                )
            if self._training_state.noise_at_learners != bool(holds_noise):
                where = ("the learners (Flower)" if self._training_state.noise_at_learners
                         else "this estimator")
                raise ValueError(
                    f"the noise streams of this private stream are held by {where}; "
                    "continue it there (skfedpriv.flower.federated_partial_fit for "
                    "learners, partial_fit in process), or start a new stream."
                )
        self._check_settings_unchanged(settings, self._settings.stream_key())

    def _stream_solver(self, settings, first, *, learners):
        """The solver of this call: ``'auto'`` resolved (local steps with a
        mechanism or on learners of the local-steps protocol, else Newton),
        the same as the stream's (refused otherwise, before any change)."""
        solver = settings.solver
        if solver == "auto":
            solver = "local-steps" if settings.mechanism is not None or learners else "newton"
        if solver != "newton" and settings.inference:
            raise ValueError(
                "inference=True needs solver='newton' (sites that send sums); this "
                "call runs the local-steps protocol. Fit with inference=False."
            )
        if solver == "newton" and learners:
            raise ValueError(
                "solver='newton' needs sites that send sums (a DWDSites); these "
                "learners run the local-steps protocol: use solver='local-steps' "
                "or 'auto'."
            )
        if solver == "quadratic" and learners:
            raise ValueError(
                "solver='quadratic' runs with learners in this process only (fit / "
                "partial_fit); remote learners do not implement its noise streams."
            )
        if not first and self.solver_ != solver:
            raise ValueError(
                f"this stream runs solver {self.solver_!r}, this call {solver!r}; "
                "continue it the way it started, or call fit."
            )
        return solver

    def _newton_update(self, sites, classes, settings, first, site_labels=()):
        """The Newton path on summary sites (:func:`newton_update`);
        ``site_labels`` of this batch extend ``learner_labels_``."""
        labels = [] if first else list(self.learner_labels_)
        labels += [label for label in site_labels if label not in set(labels)]
        learner_labels = np.empty(len(labels), dtype=object)
        learner_labels[:] = labels
        return newton_update(sites, classes, settings,
                             None if first else self._training_state.renewable,
                             0 if first else self.n_rounds_seen_, learner_labels,
                             None if first else getattr(self._training_state, "coef_cov", None),
                             None if first else getattr(self._training_state, "shift_ratio", None))

    def _update(self, batch, classes, settings, *, first, new_stream):
        """Newton on the rows' sites in this process (:meth:`_newton_update`),
        or the rows' learners in this process, then :meth:`_run_rounds`:
        ``n_rounds`` rounds for ``fit``, one for ``partial_fit``."""
        solver = self._stream_solver(settings, first, learners=False)
        if solver == "newton":
            return self._newton_update(newton_sites(batch, classes), classes, settings, first,
                                       batch.site_labels.tolist())
        if solver == "quadratic":
            return quadratic_update(
                batch, classes, settings, None if first else self._training_state,
                first=first, new_stream=new_stream, random_state=self.random_state,
                budget=self.budget, rounds_seen=0 if first else self.n_rounds_seen_)
        n_features = batch.X.shape[1]
        calibration = noise_calibration(settings) if first else self._training_state.calibration
        noise = None
        if settings.mechanism is not None and first:
            _warn_if_noise_dominates(calibration, settings, batch.n_sites,
                                     count_models(classes) * (n_features + settings.fit_intercept))
        if settings.mechanism is not None:  # the learners' streams, held here
            noise = self._training_state.noise.copy() if not first else LearnerNoise(
                calibration.factorization, calibration.noise_scale,
                count_models(classes) * (n_features + settings.fit_intercept),
                as_generator(self.random_state),
            )
        n_rounds = settings.n_rounds if new_stream else 1
        learners = BatchLearners(batch.X, batch.y, batch.site_labels, batch.site_codes,
                                 n_rounds, noise)
        return self._run_rounds(
            learners, classes, settings, calibration, noise, first=first,
            n_features=n_features, n_rounds=n_rounds,
        )

    def _fit_learners(self, sites, classes, *, new_stream):
        """``fit_sites`` / ``partial_fit_sites``: the same path on learners
        (or, for Newton, summary sites) from outside."""
        summary_sites = isinstance(sites, DWDSites)
        settings, first = self._begin_call(
            new_stream, holds_noise=not summary_sites and sites.holds_noise)
        solver = self._stream_solver(settings, first, learners=not summary_sites)
        if summary_sites and solver != "newton":
            raise ValueError(
                "summary sites (DWDSites) serve solver='newton' only, which runs "
                "no privacy mechanism; a private stream runs on learners."
            )
        if summary_sites:
            classes = self._sites_classes(classes, sites.labels(), first=first,
                                          new_stream=new_stream, who="sites")
            self._check_sites_width(sites.n_features, first=first, who="sites")
            release, training_state = self._newton_update(sites, classes, settings, first)
            self._commit_sites(release, training_state, sites.n_features, first=first)
            return self
        if settings.mechanism is not None and not sites.holds_noise:
            raise ValueError(
                "with a mechanism the learners must add their own noise, and these "
                "sites do not (holds_noise is False); rows in this process go "
                "through fit / partial_fit."
            )
        n_rounds = settings.n_rounds if new_stream else 1
        n_features, labels = sites.describe(n_rounds)
        classes = self._sites_classes(classes, labels, first=first, new_stream=new_stream,
                                      who="learners")
        self._check_sites_width(n_features, first=first, who="learners")
        calibration = (noise_calibration(settings) if first
                       else self._training_state.calibration)
        release, training_state = self._run_rounds(
            sites, classes, settings, calibration, None, first=first,
            n_features=n_features, n_rounds=n_rounds,
        )
        self._commit_sites(release, training_state, n_features, first=first)
        return self

    def _run_rounds(self, learners, classes, settings, calibration, noise, *, first,
                    n_features, n_rounds):
        """``n_rounds`` rounds of Algorithm 1 on ``learners``; writes nothing here.

        Returns ``(release, training_state)``. The only side effects are the
        budget charge of a new stream (before any noise is drawn) and the
        draws from the noise generator; the noise streams advanced here are
        a copy (:meth:`LearnerNoise.copy`), committed only with the rest.
        """
        private = settings.mechanism is not None
        if first:
            theta = np.zeros((count_models(classes), n_features + settings.fit_intercept))
            index, labels, seen = {}, [], 0
            if private and self.budget is not None:
                # One spend per stream: the whole stream (every learner's
                # messages over all n_rounds rounds) is one Gaussian mechanism
                # on C G_i with noise scale noise_scale_ and L2 sensitivity
                # sensitivity_, so the ledger can compose it exactly.
                self.budget.spend(
                    *calibration.privacy_spent,
                    note=f"LogisticRegression(mechanism={settings.mechanism!r}) on a new stream",
                    mechanism="gaussian", sigma=calibration.noise_scale,
                    sensitivity=calibration.sensitivity,
                )
            if noise is not None:
                warn_if_seeded(self.random_state, "LogisticRegression")
        else:
            theta = self._training_state.theta
            index = dict(self._training_state.learner_index)
            labels, seen = list(self.learner_labels_), self.n_rounds_seen_
        for step in range(n_rounds):
            request = RoundRequest(step, seen, theta, classes, settings, calibration.noise_scale)
            present, messages = learners.local_updates(request)
            theta = _server_step(theta, present, messages, index, labels, settings)
            seen += 1
        learner_labels = np.empty(len(labels), dtype=object)
        learner_labels[:] = labels
        coef, intercept = split_intercept(theta, settings.fit_intercept)
        release = {
            "classes_": classes,
            "coef_": coef,
            "intercept_": intercept,
            "learner_labels_": learner_labels,
            "n_rounds_seen_": seen,
            "learning_rate_": settings.learning_rate,
            "gradient_sensitivity_": calibration.gradient_sensitivity,
            "factorization_sensitivity_": calibration.factorization_sensitivity,
            "sensitivity_": calibration.sensitivity,
            "noise_scale_": calibration.noise_scale,
            "privacy_spent_": calibration.privacy_spent,
            "n_iter_": n_rounds,
            "solver_": "local-steps",
            "_settings": settings,
        }
        training_state = TrainingState(
            theta=theta, learner_index=index, noise=noise, calibration=calibration,
            noise_at_learners=private and bool(learners.holds_noise),
        )
        return release, training_state

    # ------------------------------------------------------------------
    # prediction
    # ------------------------------------------------------------------

    def _prediction_rows(self, X):
        # rows are clipped to ``feature_clip_norm`` (if set), as the local
        # steps clip them in training (Newton does not clip)
        if self.solver_ != "newton" and self._settings.feature_clip_norm is not None:
            return clip_rows(X, self._settings.feature_clip_norm)
        return X

    def predict_proba(self, X):
        """Class probabilities.

        Two classes: ``[1 - σ(s), σ(s)]`` with ``s`` the decision function.
        More classes: one-vs-rest, the sigmoids of the class models
        normalized to sum to one (as scikit-learn's one-vs-rest logistic
        regression).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        scores = self.decision_function(X)
        if self.solver_ == "newton" and len(self.classes_) > 2:
            return MultinomialLoss().probabilities(scores)
        return logistic_probabilities(scores)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))



#: The local steps warn when the accumulated noise is expected to exceed this
#: fraction of the largest move the clipped gradients could make: the mean
#: clipped gradient is far below its bound B_g, and every stream of
#: benchmarks/bench_private_utility.py above 1/4 (0.44-4.6) ended within 12
#: points of the majority rate or below it, every one under 0.13 at least 30
#: points above it (10 seeds; benchmarks/README.md).
LOCAL_STEPS_WARNING_RATIO = 0.25


def _warn_if_noise_dominates(calibration, settings, n_learners, n_params):
    """Warn, before the charge, when the noise the server's model accumulates
    is expected to exceed :data:`LOCAL_STEPS_WARNING_RATIO` times the largest
    move the clipped gradients could make
    (:func:`~skfedpriv.privacy._gradient_noise.local_steps_noise_to_signal`;
    the first batch's learners stand for the stream's)."""
    ratio = local_steps_noise_to_signal(calibration, n_learners, n_params, settings.clip_norm)
    if ratio > LOCAL_STEPS_WARNING_RATIO:
        clip = (" feature_clip_norm (the sensitivity drops from 2 B_g to 2 B_g / "
                "local_steps)," if settings.feature_clip_norm is None else "")
        warnings.warn(NoiseDominatesWarning(
            f"mechanism={settings.mechanism!r}: the noise the model accumulates over the "
            f"{settings.n_rounds} rounds is expected to be {ratio:.3g} times the largest "
            "move the clipped gradients could make (above "
            f"{LOCAL_STEPS_WARNING_RATIO:g}, measured streams ended near the majority "
            "rate); the model will be mostly noise. "
            f"Remedies:{clip} a larger epsilon, or solver='quadratic' (noise averaged "
            "over the stream)."), stacklevel=5)


def _server_step(theta, present, messages, index, labels, settings):
    """Line 15: ``x^{r+1} = x^r - η_g η τ mean_i ĝ_i^r``.

    Learners new to the stream get the next indices (``index`` and
    ``labels`` are extended in place); the messages are averaged in
    increasing learner index. No learner present: the model stays.
    """
    codes = np.empty(len(present), dtype=np.intp)
    for row, label in enumerate(present.tolist()):
        if label not in index:
            index[label] = len(index)
            labels.append(label)
        codes[row] = index[label]
    if not codes.size:
        return theta
    mean = messages[np.argsort(codes)].mean(axis=0)
    step = settings.server_learning_rate * settings.learning_rate * settings.local_steps
    return theta - step * mean.reshape(theta.shape)


def logistic_settings(params):
    """Validate ``LogisticRegression`` hyperparameters; return their settings.

    Parameters
    ----------
    params : dict
        Hyperparameters of :class:`LogisticRegression` (the others take their
        defaults); checked exactly as the estimator checks them.

    Returns
    -------
    settings : LogisticSettings
    """
    return LogisticRegression(**params)._validate_params()


__all__ = ["LogisticRegression", "LogisticSettings", "logistic_settings", "noise_calibration"]
