"""Private decentralized online logistic regression over a gossip graph."""

import functools
import math
import numbers
import warnings

import numpy as np
from scipy.special import expit, log_softmax, softmax
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, validate_data

from .._gossip import (
    accelerated_gossip,
    check_mixing_matrix,
    gossip_polynomial,
    gossip_steps,
    gossip_theta,
    mixing_matrix,
    TOPOLOGIES,
)
from .._sites import site_row_indices
from ..privacy import (
    PrivacyBudget,
    PrivacyBudgetError,
    as_generator,
    check_privacy_params,
    clip_vectors,
    laplace_scale,
    warn_if_seeded,
)
from ..privacy import TreeAggregator
from ._base import (
    FederatedClassifierMixin,
    TrainingState,
    _restore_feature_attributes_on_error,
    scores_to_labels,
)
from ._conditional_gradient import (
    CONSTRAINTS,
    conditional_gradient,
    project,
    regularized_leader,
)
from ._decentralized_defaults import (
    ZERO_DECISION_BLOCKS,
    default_block_size,
    default_h,
    default_radius,
    prefix_noise_norm,
)

SOLVERS = ("ftgl", "ocg", "ogd")


def _check_real(value, name, *, low=None, strict=False, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}.")
    value = float(value)
    if not math.isfinite(value) or (
        low is not None and (value <= low if strict else value < low)
    ):
        bound = f"> {low}" if strict else f">= {low}"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}.")
    return value


def _check_int(value, name, *, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


def clipped_gradient_sum(W, X, y, mask, clip_norm):
    """Sum over rows of each learner of the clipped multiclass logistic gradient.

    The per-example gradient of ``f(W) = logsumexp(W x) - w_yᵀ x`` (section
    4.1) is the rank-one matrix ``(softmax(W x) - e_y) xᵀ`` whose Frobenius
    norm is ``‖softmax(W x) - e_y‖ ‖x‖``. It is clipped to Frobenius norm
    ``clip_norm`` (section 4.1's ``g_clip``) without being materialized:
    ``u = (softmax(Wx) - e_y) ‖x‖`` is clipped with :func:`clip_vectors` and
    the clipped gradient is ``u_clip (x / ‖x‖)ᵀ``.

    Parameters
    ----------
    W : ndarray of shape (n, q, p)
        The learners' decisions.
    X : ndarray of shape (n, m, p)
        ``m`` rows per learner (padding rows are ignored through ``mask``).
    y : ndarray of int of shape (n, m)
        Class indices.
    mask : ndarray of bool of shape (n, m)
        Which rows exist.
    clip_norm : float

    Returns
    -------
    grad_sum : ndarray of shape (n, q, p)
    """
    n, m, p = X.shape
    q = W.shape[1]
    logits = np.einsum("nqp,nmp->nmq", W, X)
    resid = softmax(logits, axis=2)
    resid[np.arange(n)[:, None], np.arange(m)[None, :], y] -= 1.0
    norms = np.sqrt(np.einsum("nmp,nmp->nm", X, X))
    resid *= (norms * mask)[:, :, None]
    unit = X / np.where(norms > 0, norms, 1.0)[:, :, None]
    resid = clip_vectors(resid.reshape(n * m, q), clip_norm).reshape(n, m, q)
    return np.einsum("nmq,nmp->nqp", resid, unit)


def logistic_losses(W, X, y):
    """Multiclass logistic loss of every row under every learner's own model.

    ``W`` of shape (n, q, p), ``X`` of shape (n, m, p), ``y`` of shape (n, m)
    -> losses of shape (n, m).
    """
    logp = log_softmax(np.einsum("nqp,nmp->nmq", W, X), axis=2)
    return -np.take_along_axis(logp, y[:, :, None], axis=2)[:, :, 0]


class DecentralizedLogisticRegression(FederatedClassifierMixin, BaseEstimator):
    """Private decentralized online multiclass logistic regression (PD-FTGL, PD-OCG, PD-OGD).

    No server: the learners named by ``sample_group`` each receive one example
    per round, play a decision (a weight matrix ``W_i`` of shape
    ``(n_classes, n_features + fit_intercept)`` in a norm ball ``K``) and
    exchange messages only with their neighbours on a graph, through gossip
    steps with a mixing matrix ``P``. The loss of a round is the multiclass
    logistic loss of section 4.1 (binary problems are its 2-class case) plus
    ``(alpha/2) ‖W‖_F²``, which makes it ``alpha``-strongly convex.

    Solvers:

    * ``'ftgl'`` (PD-FTGL, Algorithm 1): rounds are grouped in blocks of
      ``block_size`` ``L``; a learner plays one decision for a whole block and
      sums its clipped gradients into ``d_i(z)``; during the next block the
      learners run ``L`` accelerated gossip steps (eq. 5, θ of eq. 7) on those
      sums, and each learner adds its gossiped estimate ``d_i^L(z-1)`` of the
      block average as one leaf to its private binary tree (Algorithm 2,
      Laplace noise). The noisy prefix sum ``ẑ_i(z)`` gives the next decision
      by eq. 6, ``x_i(z+1) = Π_K(-ẑ_i(z) / (α(z-1)L + 2h))``.
    * ``'ocg'`` (PD-OCG, Algorithm 3): the same blocks and tree, only
      ``L'`` (eq. 10) gossip steps per block, and the projection replaced by
      ``L`` iterations of conditional gradient (Algorithm 4) on ``F_{z,i}``
      (eq. 9), started from the current decision: linear steps only (for the
      trace-norm ball, one top singular pair per iteration).
    * ``'ogd'`` (PD-OGD of Li et al. 2018, the baseline of section 4.1): every
      round each learner averages its neighbours' messages with ``P`` and
      takes a projected gradient step; its next message is its new decision
      plus its own, independent Laplace noise. Only messages leave a learner,
      and the released models are the messages of the next round (the
      un-noised decisions stay in the training state). The noise is raised
      to make all messages (ε, 0)-DP over all ``T`` rounds as section 4.1
      does (see Notes).

    Parameters
    ----------
    topology : {'complete', 'ring', 'grid'} or array-like of shape (n, n), default='complete'
        Communication graph and its mixing matrix (see
        :func:`skfedpriv._gossip.mixing_matrix`). A user-given matrix must be
        symmetric, doubly stochastic, positive semi-definite, supported on a
        connected graph and have second singular value ``< 1``
        (Assumption 3.4); its rows follow the sorted ``sample_group`` labels.
    solver : {'ftgl', 'ocg', 'ogd'}, default='ftgl'
    block_size : int or None, default=None
        ``L``. ``None``: without privacy the paper's — for ``'ftgl'`` eq. 7,
        ``L₀ = ⌈4 ln(n T √(14n)) / √ρ⌉``; for ``'ocg'`` ``L₀ = ⌈√T⌉`` when
        ``alpha = 0`` (Corollary 3.10) and ``⌈T^{2/3} / ln^{2/3} T⌉``
        otherwise (Corollary 3.11). With ``epsilon`` set, a longer block
        (never shorter than ``L₀``) chosen from ``T``, ``ε``, ``clip_norm``
        and ``D`` only: the sensitivity does not depend on ``L``, so fewer
        tree leaves mean fewer levels and less noise, traded against the two
        blocks played before the first leaf (see
        :func:`~skfedpriv.linear_model._decentralized_defaults.default_block_size`).
        Either way at most ``T // (d + 2)``, ``d`` the blocks that play the
        zero decision (2 for ftgl, 3 for ocg), so that at least two blocks
        play a learned one; a given ``block_size`` that leaves none warns.
        Unused by ``'ogd'``.
    constraint : {'l2', 'trace'}, default='l2'
        ``K``: the Frobenius ball or the trace-norm ball (section 4.1) of
        radius ``radius``.
    radius : float or None, default=None
        ``R`` (or ``τ`` for the trace-norm ball; section 4.1 uses 10).
        ``None``: ``2√D`` for ``'l2'`` and ``2√D √min(n_classes, n_params)``
        for ``'trace'`` (``D = n_classes × n_params``, ``n_params =
        n_features + fit_intercept``): weights of order 2, sized for features
        of unit scale (standardize, or scale to [-1, 1], first). It depends on
        the shape only, never on the data.
    epsilon : float or None, default=None
        Privacy budget ε of the whole run (all ``n_rounds`` rounds). ``None``
        adds no noise (non-private). With ``epsilon`` set the label set must
        be declared (``classes``).
    clip_norm : float, default=1.0
        ``G``: every per-example gradient of the logistic loss is clipped to
        Frobenius norm ``G`` (section 4.1), which makes the Lipschitz bound of
        Assumption 3.2 true and bounds the sensitivity.
    alpha : float, default=0.0
        Strong convexity ``α`` (the ridge ``(α/2)‖W‖²`` added to each loss).
    h : float or None, default=None
        Regularization ``h > 0`` of eqs. 6 and 9. ``None``: ``h = αL`` when
        ``α > 0`` (Corollaries 3.8, 3.11); otherwise
        ``h = 8 (G L₀ + 1.5 E‖N‖) / R`` with ``E‖N‖`` the typical norm of
        the tree noise of one prefix sum (0 without privacy), computed from
        the calibration before any data (see
        :func:`~skfedpriv.linear_model._decentralized_defaults.default_h`;
        Corollaries 3.7 / 3.10's ``h`` is 10^2-10^4 times too large on UCI
        letter).
    n_rounds : int or None, default=None
        ``T``, the horizon the trees, the noise and the defaults are sized
        for; going past it raises :class:`PrivacyBudgetError`. ``None``: a
        private ``fit`` uses the rounds of its data as ``T`` (a private
        ``partial_fit`` requires ``n_rounds``); a non-private run has no
        limit and sizes its defaults by the rounds of its first batch
        (``fit``'s data).
    fit_intercept : bool, default=True
        Append a constant feature 1 (its weights are part of ``W`` and of the
        constraint).
    random_state : int, numpy Generator or None, default=None
        Noise source; ``None`` draws fresh OS entropy. Whoever knows a fixed
        seed can remove the noise: a private stream started with an integer
        seed emits :class:`~skfedpriv.privacy.SeededNoiseWarning` (seeds are
        for tests and reproducible experiments).
    budget : PrivacyBudget or None, default=None
        A budget shared with other estimators (it survives ``clone``): each
        private ``fit`` and the first ``partial_fit`` of a run spend
        ``(epsilon, 0)`` from it once, as a pure-ε ``'laplace'`` spend (the
        guarantee of all ``n_rounds`` rounds), before any state changes, and
        raise :class:`~skfedpriv.PrivacyBudgetError` if it would overspend.
    classes : array-like of shape (n_classes,) or None, default=None
        The label set, declared. Required with ``epsilon`` (or pass
        ``classes`` to the first ``partial_fit``): read from the data, a row
        with a new label would change ``classes_`` and the shape of
        ``coef_``. Rows with labels outside it are refused before any state
        changes. Without ``epsilon``, ``None`` lets ``fit`` infer the labels
        as scikit-learn does.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Public: the declared label set (inferred only without ``epsilon``).
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        Covered: the average of ``learner_coef_``.
    intercept_ : ndarray of shape (1,) or (n_classes,)
        Covered: the average of ``learner_intercept_``.
    learner_labels_ : ndarray of shape (n_learners,)
        Public: the ``sample_group`` labels of the learners, in mixing-matrix
        order.
    learner_coef_ : ndarray of shape (n_learners, n_outputs, n_features)
        Covered: every learner's own model (for two classes ``W[1] - W[0]``):
        its current decision (ftgl, ocg) or its next message, the decision
        plus its own Laplace noise (ogd).
    learner_intercept_ : ndarray of shape (n_learners, n_outputs)
        Covered, as ``learner_coef_``.
    mixing_matrix_ : ndarray of shape (n_learners, n_learners)
        Public (topology and number of learners).
    spectral_gap_ : float
        Public: ``ρ = 1 - σ₂(P)``.
    theta_ : float
        Public: gossip momentum of eq. 7.
    n_rounds_ : int or None
        Public: ``T`` in force (None: unlimited, non-private stream).
    radius_ : float
        Public: ``R`` in force (``radius`` or its default; data-independent).
    block_size_ : int
        Public.
    gossip_steps_ : int
        Public: gossip steps per block (``L`` for ftgl, ``min(L', L)`` for
        ocg, 1 for ogd).
    h_ : float
        Public.
    leaf_sensitivity_ : float
        Public: L1 sensitivity of one node position of all learners' trees
        together (see Notes); ``nan`` for ogd.
    noise_scale_ : float
        Public: Laplace scale ``b`` per coordinate of every tree node (ftgl,
        ocg) or the largest per-message scale ``b_1`` (ogd, see Notes); 0 when
        non-private.
    n_rounds_seen_ : int
        Public: rounds processed so far.
    privacy_spent_ : tuple of (float, float)
        Public: ``(epsilon, 0.0)`` once a private round has run; ``(0.0,
        0.0)`` before and ``(inf, 0.0)`` when non-private (no guarantee).
    n_features_in_ : int
        Public.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Public.

    Notes
    -----
    **Rounds.** A round gives each learner its next row. ``partial_fit``
    takes the rows of each learner in order; the call runs
    ``max_i (rows of learner i)`` rounds and a learner with fewer rows sits
    the remaining rounds out: its loss in such a round is the regularizer
    ``(α/2)‖W‖²`` alone, whose term ``∇f - αW`` in the block sum ``d_i(z)``
    is zero, so blocking, gossip and the privacy argument are unchanged.
    Blocks, gossip and trees run across calls. The learners are fixed by the
    first call (``fit`` or the first ``partial_fit``); later batches may name
    a subset of them but no new one.

    **Privacy (ftgl, ocg).** Neighbouring inputs: one learner's loss in one
    round (one row) replaced by another (Definition 3.5). Protected output:
    all learners' decisions over all ``T`` rounds, hence everything computed
    from them (``coef_``, ``learner_coef_``, predictions) — ε covers the whole
    run (Theorem 3.6). The gossip messages themselves are *not* noised in the
    paper's algorithm: a learner's neighbours see its block gradient sums in
    the clear, so the guarantee is against observers of the decisions/models,
    not against the neighbours on the graph.

    Sensitivity, from the enforced bounds only: a replaced row changes one
    clipped gradient of learner ``j`` in one block, so ``d_j(z)`` moves by at
    most ``2G`` in Frobenius norm and ``2G√D`` in L1, ``D = n_classes ×
    (n_features + fit_intercept)`` (the ``-αW`` terms depend on earlier
    releases only). The leaf of learner ``i`` is ``d_i^k(z) = Σ_j M[i, j]
    d_j(z)`` with ``M`` the gossip polynomial after ``k`` steps
    (:func:`skfedpriv._gossip.gossip_polynomial`), so it moves by at most
    ``2G√D |M[i, j]|`` in L1, and the leaves of all learners together by at
    most ``leaf_sensitivity_ = 2G√D max_j Σ_i |M[i, j]|``. Every leaf lies in
    at most ``floor(log₂ H) + 1`` noised nodes of the tree (``H`` leaves), so
    Laplace noise of scale ``b = (floor(log₂ H) + 1) leaf_sensitivity_ / ε``
    per coordinate gives (ε, 0)-DP by the argument of Appendix C. With the
    eq. 7 block size ``max_j Σ_i |M[i, j]| ≈ 1``, and ``b`` is at most the
    scale ``6√D (G + αR)(2 + log₂T)/ε`` of Theorem 3.6; unlike the paper's
    bound it stays valid for any ``block_size``.

    **Privacy (ogd).** Neighbouring inputs as above. Protected output: every
    message of every learner over all ``T`` rounds, hence everything
    computed from them: ``learner_coef_`` and ``learner_intercept_`` are the
    messages the learners send in round ``T + 1`` (or in the next round, in
    the middle of a stream), ``coef_`` their average. Against everyone who
    sees messages or the release, neighbours on the graph included. Not
    covered and never released: the un-noised decisions ``W_i`` a learner
    plays (in the training state). Releasing them would break the claim: on
    a complete graph all learners mix the same messages, so the difference
    of two learners' decisions is noise-free and reveals a label.

    Learner ``i``'s message after round ``t`` is
    ``m_i = Π_K(Σ_k P_ik m_k - η_t g_i) + Lap(b_t)``, the noise drawn
    independently per learner and coordinate; the first messages are the
    data-independent ``W_i(1) = 0``. Given all earlier messages, a replaced
    row of learner ``j`` changes only ``m_j``, through ``g_j = clip(∇f) +
    αW_j`` (clipping and ``W_j, W_j' ∈ K``): by at most
    ``Δ_t = 2√D η_t (G + αR)`` in L1, the projection being non-expansive.
    Each of the ``T`` data-dependent rounds of messages gets ``ε/T``,
    ``b_t = T Δ_t / ε``, and adaptive basic composition gives (ε, 0)-DP
    over all of them (section 4.1 raises Li et al.'s per-round noise the
    same way).

    **Release.** Every public attribute is part of the release; each is
    marked *covered* above (computed from the outputs the (ε, 0) claim
    covers) or *public* (hyperparameters, the declared classes, the learners
    and their row counts, which the neighbouring relation keeps fixed). The
    secret training state (the decisions of ogd, block sums, gossip buffers,
    the trees with their noise, the generator) is held apart in
    ``_training_state``. Publish :meth:`release` — a fitted copy with only
    the public attributes, which predicts (also per ``learner``), pickles and
    can be shared — never the training estimator, whose pickle carries the
    training state needed to continue the stream (it resumes bit-identically
    after unpickling).

    References
    ----------
    .. [1] X. Wang, W. Yang, C. Yao, M. Song, Y. Wan (2025). Revisiting
       differentially private algorithms for decentralized online learning.
       ICML 2025. Algorithms 1-4, eqs. 5-10, Theorems 3.6 and 3.9,
       Corollaries 3.7-3.11, section 4.1.
    .. [2] C. Li, P. Zhou, L. Xiong, Q. Wang, T. Wang (2018). Differentially
       private distributed online learning. IEEE TKDE 30(8), 1440-1453.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skfedpriv.linear_model._decentralized import DecentralizedLogisticRegression
    >>> X, y = load_digits(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> sites = [i % 4 for i in range(len(y))]
    >>> clf = DecentralizedLogisticRegression(topology="ring", random_state=0)
    >>> clf = clf.fit(X, y, sample_group=sites)
    >>> clf.learner_coef_.shape
    (4, 10, 64)
    >>> bool(clf.score(X, y) > 0.8)
    True

    Privately: the label set is declared, and the release is what to publish.

    >>> private = DecentralizedLogisticRegression(
    ...     topology="ring", epsilon=8.0, classes=list(range(10)))
    >>> private = private.fit(X, y, sample_group=sites)
    >>> public = private.release()
    >>> public.privacy_spent_
    (8.0, 0.0)
    >>> hasattr(public, "_training_state")
    False
    """

    def __init__(
        self,
        topology="complete",
        solver="ftgl",
        block_size=None,
        constraint="l2",
        radius=None,
        epsilon=None,
        clip_norm=1.0,
        alpha=0.0,
        h=None,
        n_rounds=None,
        fit_intercept=True,
        random_state=None,
        budget=None,
        classes=None,
    ):
        self.topology = topology
        self.solver = solver
        self.block_size = block_size
        self.constraint = constraint
        self.radius = radius
        self.epsilon = epsilon
        self.clip_norm = clip_norm
        self.alpha = alpha
        self.h = h
        self.n_rounds = n_rounds
        self.fit_intercept = fit_intercept
        self.random_state = random_state
        self.budget = budget
        self.classes = classes

    # ------------------------------------------------------------------
    # public API
    # ------------------------------------------------------------------

    def fit(self, X, y, sample_group=None):
        """Stream the data once, from a fresh state.

        With ``epsilon`` set the label set must be declared through the
        ``classes`` hyperparameter (it is public; read from the data it would
        reveal a row's label), and the call spends ``(epsilon, 0)`` from
        ``budget`` before any state changes.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_group : array-like of shape (n_samples,), default=None
            Learner of each row; a learner's rows are its stream, in order.
            ``None`` is a single learner.

        Returns
        -------
        self : DecentralizedLogisticRegression
        """
        params = self._check_params()
        with _restore_feature_attributes_on_error(self):
            batch, classes = self._validate_batch(
                X, y, sample_group, None, reset=True, infer_classes=True
            )
            plan = self._plan(batch, first=True)
            self._init_state(params, batch, classes, plan)
        self._run(batch, plan)
        return self

    def partial_fit(self, X, y, sample_group=None, classes=None):
        """Run the rounds of one batch of the stream.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_group : array-like of shape (n_samples,), default=None
            Learner of each row; the batch runs one round per row of its
            busiest learner.
        classes : array-like of shape (n_classes,), default=None
            All classes of the stream; required on the first call unless the
            ``classes`` hyperparameter is set (then it must agree with it).

        Returns
        -------
        self : DecentralizedLogisticRegression

        Raises
        ------
        PrivacyBudgetError
            If the batch would go past ``n_rounds``, or the first call would
            overspend ``budget``; nothing changes.
        ReleasedModelError
            On a release (see :meth:`release`), which holds no training state.
        ValueError
            For invalid input, or labels outside the declared classes;
            nothing changes.
        """
        self._check_can_continue()
        params = self._check_params()
        first = not hasattr(self, "_training_state")
        if first and params["epsilon"] is not None and params["n_rounds"] is None:
            raise ValueError(
                "A private partial_fit stream needs its horizon: set n_rounds "
                "(the noise is calibrated for all n_rounds rounds)."
            )
        if not first:
            self._check_same_params(params)
        with _restore_feature_attributes_on_error(self):
            batch, classes = self._validate_batch(
                X, y, sample_group, None, reset=first, classes=classes
            )
            plan = self._plan(batch, first=first)
            if first:
                self._init_state(params, batch, classes, plan)
        self._run(batch, plan)
        return self

    def decision_function(self, X, learner=None):
        """Class scores of the averaged model, or of one learner's model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        learner : hashable or None, default=None
            A ``sample_group`` label: score with that learner's own decision
            instead of the average of all learners' decisions.

        Returns
        -------
        scores : ndarray of shape (n_samples,) for two classes, else
            (n_samples, n_classes)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        coef, intercept = self._view(learner)
        scores = X @ coef.T + intercept
        return scores.ravel() if scores.shape[1] == 1 else scores

    def predict(self, X, learner=None):
        """Predict class labels (averaged model, or one learner's with ``learner=``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        learner : hashable or None, default=None

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        scores = self.decision_function(X, learner=learner)  # checks the fit first
        return scores_to_labels(self.classes_, scores)

    def predict_proba(self, X, learner=None):
        """Class probabilities ``softmax(W x)`` of the multiclass logistic model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        learner : hashable or None, default=None

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        scores = self.decision_function(X, learner=learner)
        if scores.ndim == 1:
            p1 = expit(scores)
            return np.column_stack([1.0 - p1, p1])
        return softmax(scores, axis=1)

    def predict_log_proba(self, X, learner=None):
        """Logarithm of :meth:`predict_proba`."""
        scores = self.decision_function(X, learner=learner)
        if scores.ndim == 1:
            scores = np.column_stack([np.zeros_like(scores), scores])
        return log_softmax(scores, axis=1)

    # ------------------------------------------------------------------
    # validation
    # ------------------------------------------------------------------

    def _check_params(self):
        if self.budget is not None and not isinstance(self.budget, PrivacyBudget):
            raise ValueError(f"budget must be a PrivacyBudget or None, got {self.budget!r}.")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}.")
        if self.constraint not in CONSTRAINTS:
            raise ValueError(
                f"constraint must be one of {CONSTRAINTS}, got {self.constraint!r}."
            )
        if isinstance(self.topology, str):
            if self.topology not in TOPOLOGIES:
                raise ValueError(
                    f"topology must be one of {TOPOLOGIES} or a mixing matrix, "
                    f"got {self.topology!r}."
                )
        elif self.topology is None:
            raise ValueError("topology must be a name or a mixing matrix, got None.")
        epsilon = self.epsilon
        if epsilon is not None:
            try:
                epsilon, _ = check_privacy_params(epsilon)
            except TypeError as exc:
                raise ValueError(str(exc)) from None
        if not isinstance(self.fit_intercept, (bool, np.bool_)):
            raise ValueError(f"fit_intercept must be a bool, got {self.fit_intercept!r}.")
        return {
            "epsilon": epsilon,
            "radius": _check_real(self.radius, "radius", low=0.0, strict=True, allow_none=True),
            "clip_norm": _check_real(self.clip_norm, "clip_norm", low=0.0, strict=True),
            "alpha": _check_real(self.alpha, "alpha", low=0.0),
            "h": _check_real(self.h, "h", low=0.0, strict=True, allow_none=True),
            "block_size": _check_int(self.block_size, "block_size", allow_none=True),
            "n_rounds": _check_int(self.n_rounds, "n_rounds", allow_none=True),
        }

    def _check_same_params(self, params):
        # hyperparameters that size the state may not change mid-stream
        st = self._training_state
        if isinstance(self.topology, str) or isinstance(st.topology, str):
            same_topology = isinstance(self.topology, str) and self.topology == st.topology
        else:
            same_topology = np.array_equal(np.asarray(self.topology), st.topology)
        if params != st.params or self.solver != st.solver or not same_topology or (
            self.constraint != st.constraint or bool(self.fit_intercept) != st.fit_intercept
        ):
            raise ValueError(
                "Hyperparameters changed since the stream started; call fit "
                "(or clone the estimator) to start a new stream."
            )

    def _plan(self, batch, *, first):
        """Map the batch's rows to (learner, round); check the horizon. No state change."""
        labels = batch.site_labels
        if first:
            learner_labels = labels
            learner_of_label = np.arange(len(labels))
        else:
            learner_labels = self.learner_labels_
            index = {v: i for i, v in enumerate(learner_labels.tolist())}
            learner_of_label = np.empty(len(labels), dtype=np.intp)
            for k, label in enumerate(labels.tolist()):
                if label not in index:
                    raise ValueError(
                        f"sample_group names learner {label!r}, which is not one of the "
                        f"learners of this stream {learner_labels.tolist()!r}; the "
                        "learners are fixed by the first call."
                    )
                learner_of_label[k] = index[label]
        n_learners = len(learner_labels)
        rows = site_row_indices(batch.site_codes, len(labels))
        counts = np.zeros(n_learners, dtype=np.intp)
        for k, r in enumerate(rows):
            counts[learner_of_label[k]] = len(r)
        n_rounds = int(counts.max()) if counts.size else 0
        if not first:
            limit = self._training_state.horizon
            if limit is not None and self.n_rounds_seen_ + n_rounds > limit:
                raise PrivacyBudgetError(
                    f"This batch needs {n_rounds} rounds but only "
                    f"{limit - self.n_rounds_seen_} of the n_rounds={limit} rounds "
                    "the noise was calibrated for remain; nothing was changed."
                )
        elif self.n_rounds is not None and n_rounds > self.n_rounds:
            raise PrivacyBudgetError(
                f"This batch needs {n_rounds} rounds but n_rounds={self.n_rounds}."
            )
        if not first:
            P, sigma2 = self.mixing_matrix_, 1.0 - self.spectral_gap_
        elif isinstance(self.topology, str):
            P = mixing_matrix(self.topology, n_learners)
            _, sigma2 = check_mixing_matrix(P)
        else:
            P, sigma2 = check_mixing_matrix(self.topology, n_learners)
        return {
            "learner_labels": learner_labels,
            "learner_of_label": learner_of_label,
            "rows": rows,
            "counts": counts,
            "n_rounds": n_rounds,
            "P": P,
            "sigma2": sigma2,
        }

    # ------------------------------------------------------------------
    # state
    # ------------------------------------------------------------------

    def _init_state(self, params, batch, classes, plan):
        if params["epsilon"] is not None:
            warn_if_seeded(self.random_state, "DecentralizedLogisticRegression")
            if self.budget is not None:
                # one spend per run: its pure (epsilon, 0) covers all n_rounds rounds
                self.budget.spend(
                    params["epsilon"], 0.0,
                    note=f"DecentralizedLogisticRegression(solver={self.solver!r}) on a new run",
                    mechanism="laplace",
                )
        n = len(plan["learner_labels"])
        p1 = batch.X.shape[1] + int(bool(self.fit_intercept))
        q = len(classes)
        D = q * p1
        # T: the horizon; None (no limit) only for a non-private stream
        T = params["n_rounds"]
        if T is None and params["epsilon"] is not None:
            T = max(plan["n_rounds"], 1)
        horizon = T
        T_design = T if T is not None else max(plan["n_rounds"], 1)
        rho = 1.0 - plan["sigma2"]
        theta = gossip_theta(plan["sigma2"])
        G, alpha = params["clip_norm"], params["alpha"]
        R = params["radius"]
        if R is None:
            R = default_radius(self.constraint, q, p1)
        eps = params["epsilon"]

        L = params["block_size"]
        if self.solver == "ftgl":
            L0 = gossip_steps(n, T_design, rho)  # eq. 7
        elif self.solver == "ocg":  # Corollaries 3.10 / 3.11
            if alpha > 0:
                lnT = max(math.log(T_design), 1.0)
                L0 = max(math.ceil(T_design ** (2 / 3) * lnT ** (-2 / 3)), 1)
            else:
                L0 = max(math.ceil(math.sqrt(T_design)), 1)
        else:
            L0 = 1
        if self.solver == "ogd":
            L = 1
        elif L is None:  # the paper's, longer under privacy
            L = default_block_size(
                L0, T_design, D, G, eps, delay_blocks=ZERO_DECISION_BLOCKS[self.solver]
            )
        if self.solver in ZERO_DECISION_BLOCKS:
            delay = ZERO_DECISION_BLOCKS[self.solver]
            if T_design // L <= delay:
                warnings.warn(
                    f"{T_design} rounds make {T_design // L} block(s) of {L} rounds, and "
                    f"the first {delay} blocks of {self.solver!r} play the zero "
                    "decision: the model will stay at zero. Use a smaller "
                    "block_size, more rows per learner, or fewer learners.",
                    UserWarning,
                    stacklevel=4,
                )
        if self.solver == "ftgl":
            steps = L
        elif self.solver == "ocg":
            steps = min(gossip_steps(n, T_design, rho), L)  # L' of eq. 10, at most L
        else:
            steps = 1

        rng = as_generator(self.random_state)
        tree, scale, sens = None, 0.0, float("nan")
        if self.solver in ("ftgl", "ocg"):
            M = gossip_polynomial(plan["P"], steps, theta)
            sens = 2.0 * G * math.sqrt(D) * float(np.abs(M).sum(axis=0).max())
            n_leaves = max((horizon // L) - 1, 1) if horizon is not None else None
            noise = None
            if eps is not None:
                probe = TreeAggregator(n_leaves)
                scale = laplace_scale(eps / probe.max_nodes_per_input, sens)
                noise = functools.partial(rng.laplace, 0.0, scale)
            if n_leaves is not None:
                tree = TreeAggregator(n_leaves, shape=(n, q, p1), noise=noise)
            h = params["h"]
            if h is None:
                noise_norm = prefix_noise_norm(
                    max(T_design // L - 1, 1), D, sens, eps
                )
                h = default_h(min(L0, L), G, R, alpha, noise_norm, block_size=L)
        else:
            h = params["h"] if params["h"] is not None else float("nan")
            if eps is not None:
                # PD-OGD: the largest per-message scale, that of round 1's update (reported only)
                scale = self._ogd_noise_scale(1, T, D, G, R, alpha, eps)

        zeros = np.zeros((n, q, p1))
        self._training_state = TrainingState(**{
            "params": params,
            "solver": self.solver,
            "topology": self.topology if isinstance(self.topology, str)
            else np.array(self.topology, copy=True),
            "constraint": self.constraint,
            "fit_intercept": bool(self.fit_intercept),
            "horizon": horizon,
            "rng": rng,
            "tree": tree,
            "P": plan["P"],
            "theta": theta,
            "L": L,
            "steps": steps,
            "h": h,
            "D": D,
            "W": zeros.copy(),
            "d": zeros.copy(),
            "gossip": None,  # (H^k, H^{k-1}) of the previous block's sums
            "zhat": zeros.copy(),
            "zhat_prev": zeros.copy(),
            "sent": zeros.copy(),  # ogd: the messages of the next round (released)
            "z": 1,
            "k": 0,
            "n_leaves": 0,
            "leaf_trace": [] if getattr(self, "_trace_leaves", False) else None,
            "loss_trace": [] if getattr(self, "_trace_learner", None) is not None else None,
        })
        self.classes_ = classes
        self.learner_labels_ = plan["learner_labels"]
        self.mixing_matrix_ = plan["P"]
        self.spectral_gap_ = rho
        self.theta_ = theta
        self.n_rounds_ = horizon
        self.radius_ = R
        self.block_size_ = L
        self.gossip_steps_ = steps
        self.h_ = h
        self.leaf_sensitivity_ = sens
        self.noise_scale_ = scale
        self.n_rounds_seen_ = 0
        self.privacy_spent_ = (0.0, 0.0) if eps is not None else (float("inf"), 0.0)
        self._publish()

    @staticmethod
    def _ogd_step(t, G, R, alpha):
        """Step size of PD-OGD: ``1/(α t)`` if ``α > 0`` else ``R / (G √t)``."""
        if alpha > 0:
            return 1.0 / (alpha * t)
        return R / (G * math.sqrt(t))

    @classmethod
    def _ogd_noise_scale(cls, t, T, D, G, R, alpha, eps):
        """Laplace scale of the messages computed by PD-OGD's round ``t``.

        Given all earlier messages, a replaced row of learner ``j`` changes
        only learner ``j``'s update ``Π_K(Σ_k P_jk m_k - η_t g_j)``, through
        its gradient ``g_j = clip(∇f) + αW_j``: by at most ``2(G + αR)`` in
        Frobenius norm (clipping, and ``W_j, W_j' ∈ K``), hence by
        ``Δ_t = 2√D η_t (G + αR)`` in L1 (the projection is non-expansive).
        ``ε/T`` per message: ``b_t = T Δ_t / ε``.
        """
        eta = cls._ogd_step(t, G + alpha * R, R, alpha)
        return T * 2.0 * math.sqrt(D) * eta * (G + alpha * R) / eps

    def _publish(self):
        st = self._training_state
        # ogd releases the messages of the next round, ftgl/ocg the decisions
        W = st.sent if st.solver == "ogd" else st.W
        p = W.shape[2] - int(bool(st.fit_intercept))
        if W.shape[1] == 2:
            V = (W[:, 1] - W[:, 0])[:, None, :]
        else:
            V = W
        self.learner_coef_ = V[:, :, :p].copy()
        self.learner_intercept_ = (
            V[:, :, p].copy() if st.fit_intercept else np.zeros(V.shape[:2])
        )
        self.coef_ = self.learner_coef_.mean(axis=0)
        self.intercept_ = self.learner_intercept_.mean(axis=0)

    @property
    def _loss_trace(self):
        """The benchmark loss trace (see ``_trace_losses``), kept in the training state."""
        trace = getattr(getattr(self, "_training_state", None), "loss_trace", None)
        if trace is None:
            raise AttributeError("_loss_trace")
        return trace

    def _view(self, learner):
        if learner is None:
            return self.coef_, self.intercept_
        matches = [i for i, v in enumerate(self.learner_labels_.tolist()) if v == learner]
        if not matches:
            raise ValueError(
                f"learner={learner!r} is not one of the learners "
                f"{self.learner_labels_.tolist()!r}."
            )
        i = matches[0]
        return self.learner_coef_[i], self.learner_intercept_[i]

    # ------------------------------------------------------------------
    # the rounds
    # ------------------------------------------------------------------

    def _arrays(self, batch, plan):
        """Rows of the batch as (n_learners, n_rounds, p1) with a mask."""
        st = self._training_state
        n = len(self.learner_labels_)
        R = plan["n_rounds"]
        p1 = st.W.shape[2]
        X = batch.X
        if st.fit_intercept:
            X = np.hstack([X, np.ones((X.shape[0], 1))])
        y = np.searchsorted(self.classes_, batch.y)
        Xr = np.zeros((n, R, p1))
        yr = np.zeros((n, R), dtype=np.intp)
        mask = np.zeros((n, R), dtype=bool)
        for k, rows in enumerate(plan["rows"]):
            i = plan["learner_of_label"][k]
            Xr[i, : len(rows)] = X[rows]
            yr[i, : len(rows)] = y[rows]
            mask[i, : len(rows)] = True
        return Xr, yr, mask

    def _run(self, batch, plan):
        if plan["n_rounds"] == 0:
            return
        st = self._training_state
        Xr, yr, mask = self._arrays(batch, plan)
        if st.solver == "ogd":
            self._run_ogd(Xr, yr, mask)
        else:
            self._run_blocks(Xr, yr, mask)
        if st.params["epsilon"] is not None:
            self.privacy_spent_ = (st.params["epsilon"], 0.0)
        self._publish()

    def _trace_losses(self, Xs, ys, mask, W):
        """Optional instrumentation for benchmarks: per-round summed loss of one learner's model.

        Set ``_trace_learner`` before the stream starts; the trace (raw,
        un-noised losses of the data) is kept in the training state.
        """
        st = self._training_state
        i = getattr(self, "_trace_learner", None)
        if i is None or st.loss_trace is None:
            return
        Wi = np.broadcast_to(W[i], W.shape)
        losses = logistic_losses(Wi, Xs, ys)
        if st.params["alpha"] > 0:
            losses = losses + 0.5 * st.params["alpha"] * np.sum(W[i] ** 2)
        per_round = np.where(mask, losses, 0.0).sum(axis=0)
        st.loss_trace.append((per_round, mask.sum(axis=0)))

    def _run_blocks(self, Xr, yr, mask):
        st = self._training_state
        p = st.params
        L, R = st.L, Xr.shape[1]
        start = 0
        while start < R:
            m = min(L - st.k, R - start)
            seg = slice(start, start + m)
            # lines 8-11: play x_i(z) for m rounds, sum the clipped gradients
            self._trace_losses(Xr[:, seg], yr[:, seg], mask[:, seg], st.W)
            st.d = st.d + clipped_gradient_sum(
                st.W, Xr[:, seg], yr[:, seg], mask[:, seg], p["clip_norm"]
            )
            # line 11 (Alg. 1) / line 12 (Alg. 3): one gossip step per round, at most `steps`
            if st.gossip is not None:
                todo = max(0, min(st.k + m, st.steps) - min(st.k, st.steps))
                if todo:
                    st.gossip = accelerated_gossip(st.P, *st.gossip, todo, st.theta)
            st.k += m
            self.n_rounds_seen_ += m
            start += m
            if st.k == L:
                self._end_block()

    def _end_block(self):
        st = self._training_state
        p = st.params
        z, L = st.z, st.L
        if z >= 2:
            # line 14 (Alg. 1) / 15 (Alg. 3): leaf w_i(z-1) = d_i^L(z-1) -> PrivateSum
            leaf = st.gossip[0]
            zhat_prev = st.zhat
            if st.tree is not None:
                st.zhat = st.tree.add(leaf)
            else:  # non-private stream without horizon: exact prefix sums
                st.zhat = st.zhat + leaf
            st.n_leaves += 1
            if st.leaf_trace is not None:  # test instrumentation: (leaf, released prefix sum)
                st.leaf_trace.append((leaf.copy(), st.zhat.copy()))
        else:
            zhat_prev = st.zhat
        alpha, h = p["alpha"], st.h
        if st.solver == "ftgl":
            # eq. 6: x_i(z+1) = argmin <ẑ_i(z), x> + (α(z-1)L + 2h)/2 ‖x‖²
            eta = alpha * (z - 1) * L + 2 * h
            st.W = regularized_leader(st.zhat, eta, st.constraint, self.radius_)
        elif z >= 2:
            # Alg. 3 line 16: x_i(z+1) = CG(K, L, F_{z,i}, x_i(z)), F_{z,i} of eq. 9
            eta = alpha * (z - 2) * L + 2 * h
            st.W = conditional_gradient(st.W, zhat_prev, eta, L, st.constraint, self.radius_)
        # line 13 (Alg. 1): d_i^0(z) = d_i^{-1}(z) = d_i(z)
        st.gossip = (st.d, st.d)
        st.d = np.zeros_like(st.d)
        st.z = z + 1
        st.k = 0

    def _run_ogd(self, Xr, yr, mask):
        # Li et al. (2018): every round each learner mixes its neighbours'
        # noisy messages m_k and takes a projected gradient step; its next
        # message is its new decision plus its own independent Laplace noise.
        # Only the messages leave a learner (and are released): the decision
        # W_i itself, un-noised, stays in the training state.
        st = self._training_state
        p = st.params
        G, Rad, alpha, eps = p["clip_norm"], self.radius_, p["alpha"], p["epsilon"]
        T, D = st.horizon, st.D
        P, rng, W, sent = st.P, st.rng, st.W, st.sent
        for r in range(Xr.shape[1]):
            t = self.n_rounds_seen_ + 1
            seg = slice(r, r + 1)
            self._trace_losses(Xr[:, seg], yr[:, seg], mask[:, seg], W)
            grad = clipped_gradient_sum(W, Xr[:, seg], yr[:, seg], mask[:, seg], G) + alpha * W
            eta = self._ogd_step(t, G + alpha * Rad, Rad, alpha)
            mixed = (P @ sent.reshape(W.shape[0], -1)).reshape(W.shape)
            W = project(mixed - eta * grad, st.constraint, Rad)
            sent = W
            if eps is not None:  # eps/T per message (basic composition over T rounds)
                b = self._ogd_noise_scale(t, T, D, G, Rad, alpha, eps)
                sent = W + rng.laplace(0.0, b, size=W.shape)
            self.n_rounds_seen_ = t
        st.W, st.sent = W, sent

    def _is_private(self):
        return self.epsilon is not None

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.epsilon is not None and self.random_state is None
        return tags
