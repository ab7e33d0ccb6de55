"""Private decentralized online logistic regression over a gossip graph.

The estimator reads as Algorithms 1 and 3 of Wang et al. (2025): the
solvers (:data:`SOLVERS`: PD-FTGL, PD-OCG, PD-OGD), the constraint sets
(:data:`~skfedpriv.linear_model._conditional_gradient.CONSTRAINTS`) and the
topologies (:data:`~skfedpriv._gossip.TOPOLOGIES`) are registries; the
defaults live in :mod:`._decentralized_defaults`.
"""

import copy
import math
from collections import namedtuple
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, validate_data

from .._gossip import TOPOLOGIES, accelerated_gossip, gossip_polynomial, gossip_steps, gossip_theta
from .._losses import softmax_gradient, softmax_loss, softmax_probabilities, split_intercept
from .._param_validation import Interval, InvalidParameterError, Registry
from ..privacy import (
    PrivacyBudget,
    PrivacyBudgetError,
    TreeAggregator,
    as_generator,
    clip_vectors,
    warn_if_seeded,
)
from ..privacy._tree_laplace import (
    LaplaceNoise,
    leaf_sensitivity,
    ogd_noise_scale,
    tree_noise_scale,
)
from ._base import FederatedClassifierMixin, scores_to_labels
from ._conditional_gradient import (
    CONSTRAINTS,
    conditional_gradient,
    project,
    regularized_leader,
)
from ._decentralized_design import mixing, regularization, stream_design, warn_if_noise_dominated
from ._decentralized_rounds import allocate_rounds, round_arrays
from ._decentralized_settings import decentralized_settings
from ._decentralized_state import DecentralizedTrainingState, NoiseCalibration


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
    resid = softmax_gradient(np.einsum("nqp,nmp->nmq", W, X), y)
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
    return softmax_loss(np.einsum("nqp,nmp->nmq", W, X), y)


# -- the solvers ------------------------------------------------------------------


def _trace_losses(state, X, y, mask, decisions):
    """Optional benchmark instrumentation: per-round summed loss of one learner's model.

    Active when ``_trace_learner`` was set on the estimator before the stream
    started; the trace (raw, un-noised losses of the data) stays in the
    training state.
    """
    if state.loss_trace is None:
        return
    i, alpha = state.trace_learner, state.settings.alpha
    losses = logistic_losses(np.broadcast_to(decisions[i], decisions.shape), X, y)
    if alpha > 0:
        losses = losses + 0.5 * alpha * np.sum(decisions[i] ** 2)
    per_round = np.where(mask, losses, 0.0).sum(axis=0)
    state.loss_trace.append((per_round, mask.sum(axis=0)))


def _run_blocks(state, X, y, mask, message_noise_scale=None):
    """PD-FTGL / PD-OCG on the rounds of one batch (Algorithm 1 lines 6-16, Algorithm 3)."""
    block_size, n_rounds = state.design.block_size, X.shape[1]
    gossip_steps = state.design.gossip_steps
    start = 0
    while start < n_rounds:
        played = state.round_in_block  # k
        m = min(block_size - played, n_rounds - start)
        seg = slice(start, start + m)
        # lines 8-11: play x_i(z) for m rounds, sum the clipped gradients
        _trace_losses(state, X[:, seg], y[:, seg], mask[:, seg], state.decisions)
        state.block_gradient_sum = state.block_gradient_sum + clipped_gradient_sum(
            state.decisions, X[:, seg], y[:, seg], mask[:, seg], state.settings.clip_norm
        )
        # line 11 (Alg. 1) / line 12 (Alg. 3): one gossip step per round, at most `gossip_steps`
        if state.gossip is not None:
            todo = max(0, min(played + m, gossip_steps) - min(played, gossip_steps))
            if todo:
                state.gossip = accelerated_gossip(state.mixing_matrix, *state.gossip, todo,
                                                  state.gossip_momentum)
        state.round_in_block += m
        state.rounds_seen += m
        start += m
        if state.round_in_block == block_size:
            _end_block(state)


def _end_block(state):
    """End of block ``z``: a leaf into the trees, the next decision, the next gossip."""
    block = state.block  # z
    previous_prefix_sum = state.prefix_sum
    if block >= 2:
        # line 14 (Alg. 1) / 15 (Alg. 3): leaf w_i(z-1) = d_i^L(z-1) -> PrivateSum
        leaf = state.gossip[0]
        # a non-private stream without horizon has no tree: exact prefix sums
        state.prefix_sum = (state.tree.add(leaf) if state.tree is not None
                            else state.prefix_sum + leaf)
        state.n_leaves += 1
        if state.leaf_trace is not None:  # test instrumentation: (leaf, released prefix sum)
            state.leaf_trace.append((leaf.copy(), state.prefix_sum.copy()))
    SOLVERS[state.settings.solver].decide(state, previous_prefix_sum)
    # line 13 (Alg. 1): d_i^0(z) = d_i^{-1}(z) = d_i(z)
    state.gossip = (state.block_gradient_sum, state.block_gradient_sum)
    state.block_gradient_sum = np.zeros_like(state.block_gradient_sum)
    state.block = block + 1
    state.round_in_block = 0


def _ftgl_decision(state, previous_prefix_sum):
    # eq. 6: x_i(z+1) = argmin <ẑ_i(z), x> + (α(z-1)L + 2h)/2 ‖x‖²
    s = state.settings
    eta = s.alpha * (state.block - 1) * state.design.block_size + 2 * state.regularization
    state.decisions = regularized_leader(state.prefix_sum, eta, s.constraint,
                                         state.design.radius)


def _ocg_decision(state, previous_prefix_sum):
    # Alg. 3 line 16: x_i(z+1) = CG(K, L, F_{z,i}, x_i(z)), F_{z,i} of eq. 9
    if state.block >= 2:
        s, L = state.settings, state.design.block_size
        eta = s.alpha * (state.block - 2) * L + 2 * state.regularization
        state.decisions = conditional_gradient(
            state.decisions, previous_prefix_sum, eta, L, s.constraint, state.design.radius
        )


def _ogd_step(t, G, R, alpha):
    """Step size of PD-OGD: ``1/(α t)`` if ``α > 0`` else ``R / (G √t)``."""
    if alpha > 0:
        return 1.0 / (alpha * t)
    return R / (G * math.sqrt(t))


def _run_ogd(state, X, y, mask, message_noise_scale):
    """PD-OGD (Li et al. 2018) on the rounds of one batch.

    Every round each learner mixes its neighbours' noisy messages and takes
    a projected gradient step; its next message is its new decision plus its
    own independent Laplace noise of scale ``message_noise_scale(t, ...)``. Only
    the messages leave a learner (and are released): the decision itself,
    un-noised, stays in the training state.
    """
    s = state.settings
    G, R, alpha, eps = s.clip_norm, state.design.radius, s.alpha, s.epsilon
    W, sent = state.decisions, state.messages
    for r in range(X.shape[1]):
        t = state.rounds_seen + 1
        seg = slice(r, r + 1)
        _trace_losses(state, X[:, seg], y[:, seg], mask[:, seg], W)
        grad = clipped_gradient_sum(W, X[:, seg], y[:, seg], mask[:, seg], G) + alpha * W
        eta = _ogd_step(t, G + alpha * R, R, alpha)
        mixed = (state.mixing_matrix @ sent.reshape(W.shape[0], -1)).reshape(W.shape)
        W = project(mixed - eta * grad, s.constraint, R)
        sent = W
        if eps is not None:  # eps/T per message (basic composition over T rounds)
            b = message_noise_scale(t, state.design.horizon, state.n_parameters, G, R, alpha, eps)
            sent = W + MECHANISMS[s.mechanism](state.rng, b)(W.shape)
        state.rounds_seen = t
    state.decisions, state.messages = W, sent


#: The privacy mechanisms (the allowed values of ``mechanism``), each mapped
#: to its noise: ``noise = MECHANISMS[name](rng, scale)``, ``noise(size)``
#: an array of iid draws (picklable, for the trees).
MECHANISMS = Registry("mechanism", {"laplace": LaplaceNoise})


def _ftgl_base_block(n_learners, n_rounds, spectral_gap, alpha):
    return gossip_steps(n_learners, n_rounds, spectral_gap)  # eq. 7


def _ocg_base_block(n_learners, n_rounds, spectral_gap, alpha):
    # Corollaries 3.10 (alpha = 0) and 3.11 (alpha > 0)
    if alpha > 0:
        log_t = max(math.log(n_rounds), 1.0)
        return max(math.ceil(n_rounds ** (2 / 3) * log_t ** (-2 / 3)), 1)
    return max(math.ceil(math.sqrt(n_rounds)), 1)


#: One solver: its rounds, its decision at the end of a block (blocks only),
#: the paper's block size ``L₀(n, T, ρ, α)`` and its gossip steps per block
#: ``f(n, T, ρ, L)``.
Solver = namedtuple("Solver", ["run", "decide", "base_block_size", "gossip_steps"])

#: The solvers by name (the allowed values of ``solver``).
SOLVERS = Registry("solver", {
    "ftgl": Solver(_run_blocks, _ftgl_decision, _ftgl_base_block,
                   lambda n, T, rho, L: L),
    # L' of eq. 10, at most L
    "ocg": Solver(_run_blocks, _ocg_decision, _ocg_base_block,
                  lambda n, T, rho, L: min(gossip_steps(n, T, rho), L)),
    "ogd": Solver(_run_ogd, None, lambda n, T, rho, alpha: 1, lambda n, T, rho, L: 1),
})


def _copy_state(state):
    """A copy of the training state to update; the generator is shared (its
    draws are the one side effect of a run, as a budget charge is)."""
    return copy.deepcopy(state, memo={id(state.rng): state.rng})


#: Public attributes fixed when a stream starts (data-independent).
_STREAM_ATTRIBUTES = (
    "classes_", "learner_labels_", "mixing_matrix_", "spectral_gap_", "theta_",
    "n_rounds_", "radius_", "block_size_", "gossip_steps_", "h_", "leaf_sensitivity_",
    "noise_scale_",
)


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
    topology : {'complete', 'ring', 'grid', 'watts-strogatz'} or array-like of shape (n, n), \
            default='complete'
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
        otherwise (Corollary 3.11). Under a mechanism, a longer block
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
    mechanism : {'laplace'} or None, default=None
        Privacy mechanism. ``None`` adds no noise (non-private, no
        guarantee). ``'laplace'``: Laplace noise in the trees (ftgl, ocg) or
        in every message (ogd), calibrated for (``epsilon``, 0)-DP over all
        ``n_rounds`` rounds (see Notes); the label set must then be declared
        (``classes``). A private ``fit`` (or first ``partial_fit``) whose
        noise is expected to exceed the signal of the released model
        emits :class:`~skfedpriv.privacy.NoiseDominatesWarning` before spending, computed from
        public quantities only (``T``, ``n``, ``D``, ``clip_norm``, ``ε``;
        see the user guide for the ``ε`` a run needs).
    epsilon : float, default=1.0
        Privacy budget ε of the whole run (all ``n_rounds`` rounds) under the
        mechanism. Validated, unused, without a mechanism.
    clip_norm : float, default=1.0
        Bound on the Euclidean norm of each per-example gradient: every
        per-example gradient of the logistic loss is clipped to Frobenius
        norm ``G`` (section 4.1), which makes the Lipschitz bound of
        Assumption 3.2 true and bounds the sensitivity.
    alpha : float, default=0.0
        Strong convexity ``α`` (the ridge ``(α/2)‖W‖²`` added to each loss).
    h : float or None, default=None
        Regularization ``h > 0`` of eqs. 6 and 9. ``None``: ``h = αL`` when
        ``α > 0`` (Corollaries 3.8, 3.11); otherwise
        ``h = (G L₀ p / 8 + 12 E‖N‖) / R`` with ``p = n_features +
        fit_intercept`` and ``E‖N‖`` the typical norm of the tree noise of
        one prefix sum (0 without privacy), computed from
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
        Prepend a constant feature 1, ``x_bar = (1, x)`` (its weights, the
        first column of ``W``, are part of the decision and of the
        constraint).
    random_state : int, numpy Generator or None, default=None
        Noise source; ``None`` draws fresh OS entropy. Whoever knows a fixed
        seed can remove the noise: a private stream started with an integer
        seed emits :class:`~skfedpriv.privacy.SeededNoiseWarning` (seeds are
        for tests and reproducible experiments). A ``Generator`` or ``RandomState`` is refused with a mechanism
        (``clone`` would copy it into every candidate, fold and refit), and
        a release has ``random_state=None``.
    budget : PrivacyBudget or None, default=None
        A budget shared with other estimators (it survives ``clone``): each
        private ``fit`` and the first ``partial_fit`` of a run spend
        ``(epsilon, 0)`` from it once, as a pure-ε ``'laplace'`` spend (the
        guarantee of all ``n_rounds`` rounds), before any state changes, and
        raise :class:`~skfedpriv.PrivacyBudgetError` if it would overspend.
    classes : array-like of shape (n_classes,) or None, default=None
        The label set, declared. Required with a mechanism (or pass
        ``classes`` to the first ``partial_fit``): read from the data, a row
        with a new label would change ``classes_`` and the shape of
        ``coef_``. Rows with labels outside it are refused before any state
        changes. Without a mechanism, ``None`` lets ``fit`` infer the labels
        as scikit-learn does.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Public: the declared label set (inferred only without a mechanism).
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
        ocg) or the largest per-message scale ``b_1`` (ogd, see Notes); 0
        without a mechanism.
    n_rounds_seen_ : int
        Public: rounds processed so far.
    privacy_spent_ : tuple of (float, float)
        Public: ``(epsilon, 0.0)`` once a private round has run; ``(0.0,
        0.0)`` before; ``(inf, 0.0)`` without a mechanism (no finite
        guarantee).
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

    Sensitivity, from the enforced bounds only: a clipped per-example
    gradient ``clip(u x̄ᵀ)``, ``u = softmax(W x̄) - e_y``, has L1 norm at most
    ``κ = 2√((q-1)/q) √(D/q) G`` (``u`` has one negative entry balancing the
    others; ``κ = G√D`` for two classes, ``G√D / 1.67`` for ten;
    :func:`~skfedpriv.privacy._tree_laplace.gradient_l1_bound`), ``D =
    n_classes × (n_features + fit_intercept)``. A replaced row changes one
    clipped gradient of learner ``j`` in one block, so ``d_j(z)`` moves by at
    most ``2G`` in Frobenius norm and ``2κ`` in L1 (the ``-αW`` terms depend
    on earlier releases only). The leaf of learner ``i`` is ``d_i^k(z) =
    Σ_j M[i, j] d_j(z)`` with ``M`` the gossip polynomial after ``k`` steps
    (:func:`skfedpriv._gossip.gossip_polynomial`), so it moves by at most
    ``2κ |M[i, j]|`` in L1, and the leaves of all learners together by at
    most ``leaf_sensitivity_ = 2κ max_j Σ_i |M[i, j]|``. Every leaf lies in
    at most ``floor(log₂ H) + 1`` noised nodes of the tree (``H`` leaves), so
    Laplace noise of scale ``b = (floor(log₂ H) + 1) leaf_sensitivity_ / ε``
    per coordinate gives (ε, 0)-DP by the argument of Appendix C. With the
    eq. 7 block size ``max_j Σ_i |M[i, j]| ≈ 1``, and ``b`` is at most the
    scale ``6√D (G + αR)(2 + log₂T)/ε`` of Theorem 3.6 (which takes
    ``κ = G√D``); unlike the paper's
    bound it stays valid for any ``block_size``. The sensitivity, the
    calibration and the draws are in :mod:`skfedpriv.privacy._tree_laplace`.

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
    after unpickling). A copy of the training estimator (pickle, deep copy) and its
    original continue the stream once from each point: the second
    continuation raises :class:`~skfedpriv.StreamReplayError` (in this
    process always; in another process only with a file ``budget``). A
    Pipeline or meta-estimator holding it: publish
    :func:`skfedpriv.release`.

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
    ...     topology="ring", mechanism="laplace", epsilon=8.0, classes=list(range(10)))
    >>> private = private.fit(X, y, sample_group=sites)
    >>> public = private.release()
    >>> public.privacy_spent_
    (8.0, 0.0)
    >>> hasattr(public, "_training_state")
    False
    """

    _parameter_constraints = {
        "topology": [TOPOLOGIES, "array-like"],
        "solver": [SOLVERS],
        "block_size": [Interval(Integral, 1, None), None],
        "constraint": [CONSTRAINTS],
        "radius": [Interval(Real, 0, None, closed="neither"), None],
        "mechanism": [MECHANISMS, None],
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "clip_norm": [Interval(Real, 0, None, closed="neither")],
        "alpha": [Interval(Real, 0, None)],
        "h": [Interval(Real, 0, None, closed="neither"), None],
        "n_rounds": [Interval(Integral, 1, None), None],
        "fit_intercept": ["boolean"],
        "random_state": ["random_state"],
        "budget": [PrivacyBudget, None],
        "classes": ["array-like", None],
    }

    def __init__(
        self,
        topology="complete",
        solver="ftgl",
        block_size=None,
        constraint="l2",
        radius=None,
        mechanism=None,
        epsilon=1.0,
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
        self.mechanism = mechanism
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

        Under a mechanism the label set must be declared through the
        ``classes`` hyperparameter (it is public; read from the data it would
        reveal a row's label), and the call spends ``(epsilon, 0)`` from
        ``budget`` before any state changes.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Sparse rows are densified one learner's rows at a time into
            the batch's round arrays, dense as for dense rows:
            ``n_learners x rounds x (p + 1)`` floats, the batch's rounds
            being its busiest learner's row count.
        y : array-like of shape (n_samples,)
        sample_group : array-like of shape (n_samples,), default=None
            Learner of each row; a learner's rows are its stream, in order.
            ``None`` is a single learner.

        Returns
        -------
        self : DecentralizedLogisticRegression
        """
        return self._fit_batch(X, y, sample_group, new_stream=True)

    def partial_fit(self, X, y, sample_group=None, classes=None):
        """Run the rounds of one batch of the stream.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Sparse rows as in :meth:`fit`.
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
            nothing changes. :class:`InvalidParameterError` (a ValueError)
            for a private first call without ``n_rounds``.
        """
        self._check_can_continue()
        if (not hasattr(self, "_training_state") and self._is_private()
                and self.n_rounds is None):
            raise InvalidParameterError(
                "A private partial_fit stream needs its horizon: set n_rounds "
                "(the noise is calibrated for all n_rounds rounds)."
            )
        return self._fit_batch(X, y, sample_group, classes=classes, new_stream=False)

    def decision_function(self, X, learner=None):
        """Class scores of the averaged model, or of one learner's model.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Sparse rows are scored as CSR, without densifying them.
        learner : hashable or None, default=None
            A ``sample_group`` label: score with that learner's own decision
            instead of the average of all learners' decisions.

        Returns
        -------
        scores : ndarray of shape (n_samples,) for two classes, else
            (n_samples, n_classes)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64, accept_sparse="csr")
        coef, intercept = self._view(learner)
        scores = np.asarray(X @ coef.T) + intercept
        return scores.ravel() if scores.shape[1] == 1 else scores

    def predict(self, X, learner=None):
        """Predict class labels (averaged model, or one learner's with ``learner=``).

        ``X`` and ``learner`` as in :meth:`decision_function` (``learner``:
        the labels that learner's own model predicts).

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        scores = self.decision_function(X, learner=learner)  # checks the fit first
        return scores_to_labels(self.classes_, scores)

    def predict_proba(self, X, learner=None):
        """Class probabilities ``softmax(W x_bar)`` of the multiclass logistic model.

        ``X`` and ``learner`` as in :meth:`decision_function` (``learner``:
        the probabilities of that learner's own model).

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            :func:`skfedpriv._losses.softmax_probabilities` of the scores.
        """
        return softmax_probabilities(self.decision_function(X, learner=learner))

    def predict_log_proba(self, X, learner=None):
        """Logarithm of :meth:`predict_proba`."""
        return softmax_probabilities(self.decision_function(X, learner=learner), log=True)

    # ------------------------------------------------------------------
    # the stream: settings, update
    # ------------------------------------------------------------------

    def _check_param_combinations(self, params):
        """The :class:`DecentralizedSettings` a stream is sized by (they may
        not change mid-stream)."""
        return decentralized_settings(params)

    def _check_continuation(self, settings):
        """Refuse a continuation with changed settings, or of a training
        state this version does not hold (an older pickle)."""
        if not isinstance(self._training_state, DecentralizedTrainingState):
            raise ValueError(
                "This estimator's training state was written by an older version "
                "of skfedpriv and cannot be continued; call fit to start a new stream."
            )
        self._check_settings_unchanged(settings, self._training_state.settings.stream_key())

    def _update(self, batch, classes, settings, *, first, new_stream):
        """The rounds of one batch: checks first (horizon, known learners),
        then the solver on a copy of the training state. Writes nothing on
        the estimator; returns ``(release, state)``."""
        if first:
            allocation = allocate_rounds(batch, batch.site_labels)
            if settings.n_rounds is not None and allocation.n_rounds > settings.n_rounds:
                raise PrivacyBudgetError(
                    f"This batch needs {allocation.n_rounds} rounds but "
                    f"n_rounds={settings.n_rounds}."
                )
            release, state = self._init_state(settings, batch, classes, allocation)
        else:
            allocation = allocate_rounds(batch, self.learner_labels_)
            limit = self._training_state.design.horizon
            seen = self._training_state.rounds_seen
            if limit is not None and seen + allocation.n_rounds > limit:
                raise PrivacyBudgetError(
                    f"This batch needs {allocation.n_rounds} rounds but only "
                    f"{limit - seen} of the n_rounds={limit} rounds "
                    "the noise was calibrated for remain; nothing was changed."
                )
            release = {name: getattr(self, name) for name in _STREAM_ATTRIBUTES}
            state = _copy_state(self._training_state)
        if allocation.n_rounds:
            rounds = round_arrays(batch, allocation, len(release["learner_labels_"]),
                                  classes, settings.fit_intercept)
            SOLVERS[settings.solver].run(state, *rounds, self._ogd_noise_scale)
        release.update(self._models(state))
        return release, state

    def _init_state(self, settings, batch, classes, allocation):
        """Lines 1-3 of Algorithm 1 (and of Algorithm 3) before the first round.

        Returns the data-independent part of the release and the training
        state. The budget is charged before any noise is drawn.
        """
        s = settings
        learner_labels = batch.site_labels
        shape = (len(learner_labels), len(classes), batch.X.shape[1] + int(s.fit_intercept))
        P, sigma2 = mixing(s.topology, shape[0])  # Assumption 3.4
        theta = gossip_theta(sigma2)  # eq. 7
        # line 1, input: the horizon, the ball K, the block size L (defaults
        # from declared quantities) and the noise distribution D
        design = stream_design(s, SOLVERS[s.solver], shape, 1.0 - sigma2, allocation.n_rounds)
        rng = as_generator(self.random_state)
        noise = self._calibrate(s, design, gossip_polynomial(P, design.gossip_steps, theta),
                                shape, rng)
        h = regularization(s, design, noise, shape)  # line 1, input: h
        if s.epsilon is not None:
            warn_if_seeded(self.random_state, "DecentralizedLogisticRegression")
            warn_if_noise_dominated(s, design, noise, shape, self._ogd_noise_scale)
            self._charge_budget(s.epsilon)  # before any noise is drawn
        state = self._new_training_state(s, design, noise, shape, rng, P, theta, h)
        release = {
            "classes_": classes,
            "learner_labels_": learner_labels,
            "mixing_matrix_": P,
            "spectral_gap_": 1.0 - sigma2,
            "theta_": theta,
            "n_rounds_": design.horizon,
            "radius_": design.radius,
            "block_size_": design.block_size,
            "gossip_steps_": design.gossip_steps,
            "h_": h,
            "leaf_sensitivity_": noise.sensitivity,
            "noise_scale_": noise.scale,
        }
        return release, state

    def _new_training_state(self, settings, design, noise, shape, rng, P, theta, h):
        """Line 2 of Algorithm 1: ``x_i(1) = ẑ_i(1) = 0``; line 3: the trees."""
        zeros = np.zeros(shape)
        trace_learner = getattr(self, "_trace_learner", None)
        return DecentralizedTrainingState(
            settings=settings, design=design, mixing_matrix=P, gossip_momentum=theta,
            regularization=h, n_parameters=shape[1] * shape[2], rng=rng,
            tree=noise.tree,  # line 3: the binary trees B_i (all learners at once)
            decisions=zeros.copy(),  # line 2: x_i(1) = 0
            prefix_sum=zeros.copy(),  # line 2: ẑ_i(1) = 0
            block_gradient_sum=zeros.copy(),
            gossip=None,
            messages=zeros.copy(),  # ogd: W_i(1) = 0, data-independent
            leaf_trace=[] if getattr(self, "_trace_leaves", False) else None,
            trace_learner=trace_learner,
            loss_trace=[] if trace_learner is not None else None,
        )

    def _calibrate(self, settings, design, gossip_polynomial, shape, rng):
        """The noise of the run (line 1's ``D``): the trees' leaf sensitivity,
        Laplace scale and trees (ftgl, ocg), or PD-OGD's largest message scale."""
        s, D = settings, shape[1] * shape[2]
        eps, G = s.epsilon, s.clip_norm
        if s.solver == "ogd":
            # the largest per-message scale, that of round 1's update (reported only)
            scale = 0.0 if eps is None else self._ogd_noise_scale(
                1, design.horizon, D, G, design.radius, s.alpha, eps)
            return NoiseCalibration(float("nan"), scale, None)
        sensitivity = leaf_sensitivity(gossip_polynomial, G, D, n_classes=shape[1])
        if design.horizon is None:  # non-private without a horizon: exact sums, no tree
            return NoiseCalibration(sensitivity, 0.0, None)
        n_leaves = max(design.horizon // design.block_size - 1, 1)
        scale, noise = 0.0, None
        if eps is not None:
            scale = tree_noise_scale(eps, n_leaves, sensitivity)
            noise = MECHANISMS[s.mechanism](rng, scale)
        return NoiseCalibration(sensitivity, scale,
                                TreeAggregator(n_leaves, shape=shape, noise=noise))

    def _charge_budget(self, epsilon):
        if self.budget is not None:
            # one spend per run: its pure (epsilon, 0) covers all n_rounds rounds
            self.budget.spend(
                epsilon, 0.0,
                note=f"DecentralizedLogisticRegression(solver={self.solver!r}) on a new run",
                mechanism="laplace",
            )

    @staticmethod
    def _models(state):
        """The released models: decisions (ftgl, ocg) or next messages (ogd)."""
        s = state.settings
        W = state.messages if s.solver == "ogd" else state.decisions
        V = (W[:, 1] - W[:, 0])[:, None, :] if W.shape[1] == 2 else W
        learner_coef, learner_intercept = split_intercept(V, s.fit_intercept)
        if s.epsilon is None:
            spent = (float("inf"), 0.0)
        else:
            spent = (s.epsilon, 0.0) if state.rounds_seen else (0.0, 0.0)
        return {
            "learner_coef_": learner_coef,
            "learner_intercept_": learner_intercept,
            "coef_": learner_coef.mean(axis=0),
            "intercept_": learner_intercept.mean(axis=0),
            "n_rounds_seen_": state.rounds_seen,
            "privacy_spent_": spent,
        }

    _ogd_step = staticmethod(_ogd_step)

    @classmethod
    def _ogd_noise_scale(cls, t, T, D, G, R, alpha, eps):
        """Laplace scale of the messages computed by PD-OGD's round ``t``
        (:func:`~skfedpriv.privacy._tree_laplace.ogd_noise_scale` at the
        step size ``η_t`` of round ``t``)."""
        return ogd_noise_scale(cls._ogd_step(t, G + alpha * R, R, alpha), T, D, G, R, alpha, eps)

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


