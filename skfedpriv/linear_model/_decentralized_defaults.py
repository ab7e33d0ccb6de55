"""Defaults of :class:`DecentralizedLogisticRegression` from declared quantities.

Radius, block size and regularization ``h`` are chosen from quantities the
user declares or the run fixes before any data is seen (``n_rounds``, the
number of learners and their graph, ``clip_norm``, ``epsilon``, the number
of classes and features), never from the data, so that the defaults do not
leak anything and a user gets a learning model without a grid search.

Why not the paper's constants (measured on UCI letter, ``benchmarks/README.md``):

* the trace-norm radius 10 of section 4.1 caps the *exact* constrained
  optimum of letter at train accuracy 0.25 (0.78 unconstrained), so no
  tuning of ``h`` can make PD-FTGL learn more;
* Corollaries 3.7 / 3.10 balance only the non-private terms of the regret
  bounds (8) / (11); under privacy the tree noise, not the gossip or the
  block delay, dominates (its norm grows with ``D = n_classes × n_params``
  and with the number of tree levels), so the decisions ``-ẑ/(2h)`` were
  noise until ``h`` grew with it;
* the sensitivity of the block sums does not depend on the block size
  (Theorem 3.6), so a longer block means fewer tree leaves, fewer levels and
  less noise per prefix sum; the eq. 7 block size, sized for gossip only,
  leaves the noise ~3x larger than a block chosen with the noise in view.

References
----------
.. [1] X. Wang, W. Yang, C. Yao, M. Song, Y. Wan (2025). Revisiting
   differentially private algorithms for decentralized online learning.
   ICML 2025. Eqs. 6-10, Theorems 3.6 and 3.9, Corollaries 3.7-3.11.
"""

import math

__all__ = [
    "default_block_size",
    "default_h",
    "default_radius",
    "prefix_noise_norm",
    "release_signal_to_noise",
]

# Weight of the noise-to-signal ratio against the delay 2/B of B = T/L blocks
# in the block-size criterion (see default_block_size).
NOISE_WEIGHT = 5.0
# h = (H_CURVATURE G L₀ n_params + H_NOISE E‖noise‖) / R (see default_h).
H_CURVATURE = 0.125
H_NOISE = 12.0
# Norm of the mean clipped gradient at the zero decision per unit of G, on real
# multiclass data: 0.12 on digits scaled by 16 (0.20 centered), 0.07 on letter
# scaled to [-1, 1]. The signal a private run can expect (release_signal_to_noise).
TYPICAL_ALIGNMENT = 0.1
# The estimator warns when the expected noise of the released model exceeds
# this many times its signal. Measured (held-out or training accuracy, chance,
# non-private): digits, 5 learners, ratio 0.08 -> 0.16 (0.10, 0.85), 0.31 ->
# 0.32, 1.24 -> 0.79; letter, 9 learners, T = 400: 0.66 -> 0.10 (0.04, 0.32),
# 2.0 -> 0.17; T = 1 666: 2.75 -> 0.32 (0.55).
NOISE_DOMINATED = 1.0
# radius = RADIUS_PER_WEIGHT √D (Frobenius ball): weights of order 2 on
# features of unit scale (standardized, or scaled to [-1, 1]).
RADIUS_PER_WEIGHT = 2.0


def tree_levels(n_leaves):
    """``floor(log₂ H) + 1``: noised tree nodes per leaf (and at most per prefix)."""
    return int(max(int(n_leaves), 1)).bit_length()


def default_radius(constraint, n_classes, n_params):
    """Radius of the decision set from the model's shape.

    ``2 √D`` for the Frobenius ball (``D = n_classes × n_params``): a weight
    matrix whose entries are of order 2, i.e. logits of order a few on
    features of unit scale. For the trace-norm ball the same matrices need
    up to ``√(min(n_classes, n_params))`` times more
    (``‖W‖_* <= √rank ‖W‖_F``).

    Parameters
    ----------
    constraint : {'l2', 'trace'}
    n_classes : int
        Rows of the decision (classes).
    n_params : int
        Columns (features plus intercept).

    Returns
    -------
    radius : float
    """
    D = n_classes * n_params
    radius = RADIUS_PER_WEIGHT * math.sqrt(D)
    if constraint == "trace":
        radius *= math.sqrt(min(n_classes, n_params))
    return radius


def prefix_noise_norm(n_leaves, n_params_total, sensitivity, epsilon):
    """Typical Frobenius norm of the tree noise in one learner's prefix sum.

    With ``levels = floor(log₂ H) + 1`` and Laplace scale
    ``b = levels × sensitivity / ε`` per coordinate (the calibration of the
    estimator), a prefix sum holds on average ``levels / 2`` noised nodes, so
    ``E‖noise‖² ≈ D × 2b² × levels / 2 = D b² levels``.

    Parameters
    ----------
    n_leaves : int
        ``H``.
    n_params_total : int
        ``D``, coordinates of one decision.
    sensitivity : float
        L1 sensitivity of one leaf position (all learners together).
    epsilon : float or None
        ``None``: no noise, returns 0.

    Returns
    -------
    norm : float
    """
    if epsilon is None:
        return 0.0
    levels = tree_levels(n_leaves)
    b = levels * sensitivity / epsilon
    return math.sqrt(n_params_total * levels) * b


#: Blocks a solver plays at the zero decision before the first leaf shapes
#: one (see :func:`default_block_size`).
ZERO_DECISION_BLOCKS = {"ftgl": 2, "ocg": 3}


def default_block_size(base_block_size, n_rounds, n_params_total, clip_norm, epsilon,
                       delay_blocks=2):
    """Block size ``L``: the paper's without privacy, longer with it.

    Without noise the paper's block size is kept (eq. 7 for PD-FTGL: enough
    accelerated gossip steps for consensus; Corollaries 3.10 / 3.11 for
    PD-OCG). With noise, ``L`` (at least the paper's) minimizes over the
    number of blocks ``B = T // L``

        ``J(B) = NOISE_WEIGHT × r(B) + delay_blocks / B``,

    ``r(B) = prefix_noise_norm(B - 1) / (T G)`` the noise of the final prefix
    sum relative to the largest possible sum of ``T`` clipped gradients (the
    sensitivity taken at its eq. 7 value ``2G√D``), and ``delay_blocks / B``
    the share of rounds played at the zero decision before the first leaf
    shapes one: the sums of block ``z`` are gossiped during block ``z + 1``,
    so PD-FTGL plays zero in blocks 1 and 2 (``delay_blocks=2``), and PD-OCG,
    whose CG at the end of block ``z`` uses ``ẑ(z - 1)`` (eq. 9), in blocks
    1 to 3 (``delay_blocks=3``). The sensitivity does not depend on ``L``
    (Theorem 3.6), so fewer, longer blocks cut the tree levels and the noise.

    Parameters
    ----------
    base_block_size : int
        The paper's block size for the solver.
    n_rounds : int
        ``T``.
    n_params_total : int
        ``D``.
    clip_norm : float
        ``G``.
    epsilon : float or None
    delay_blocks : int, default=2
        Blocks played at the zero decision (2 for PD-FTGL, 3 for PD-OCG).

    Returns
    -------
    block_size : int
        At most ``T // (delay_blocks + 2)`` when the paper's block would leave
        fewer than two blocks that play a learned decision.
    """
    L0 = max(int(base_block_size), 1)
    T = max(int(n_rounds), 1)
    if T < (delay_blocks + 2) * L0:
        # too few rounds for the paper's block: the first delay_blocks blocks
        # play the zero decision, so keep two blocks that play a learned one
        return min(L0, max(T // (delay_blocks + 2), 1))
    if epsilon is None:
        return L0
    D, G = n_params_total, clip_norm
    sens = 2.0 * G * math.sqrt(D)
    best = None
    for B in range(delay_blocks + 2, T // L0 + 1):  # at least two learning blocks
        L = T // B
        blocks = T // L
        r = prefix_noise_norm(max(blocks - 1, 1), D, sens, epsilon) / (T * G)
        J = NOISE_WEIGHT * r + delay_blocks / blocks
        if best is None or J < best[0] - 1e-12:
            best = (J, L)
    return max(best[1], L0)


def default_h(base_block_size, clip_norm, radius, alpha, noise_norm, block_size=None, *,
              n_params):
    """Regularization ``h`` of eqs. 6 and 9.

    ``α > 0``: ``h = αL`` (Corollaries 3.8, 3.11). ``α = 0``:

        ``h = (H_CURVATURE G L₀ p + H_NOISE × noise_norm) / R``,

    ``L₀`` the paper's (non-private) block size of the solver and ``p`` the
    parameters per class (features plus intercept). The decision
    ``-ẑ/(2h)`` is a lazy gradient step of size ``1/(2h)`` per block sum; the
    logistic loss of a row has curvature up to ``‖x̄‖²/2``, which for
    features of unit scale (the scale the default radius assumes) grows
    with ``p``, so a block of ``L₀`` gradients needs ``h`` of order
    ``L₀ p`` in the units ``G/R`` not to overshoot: with ``h`` a constant
    times ``G L₀ / R``, digits (65 parameters per class, ``T = 260``)
    oscillates where letter (17, ``T = 15 000``) wants a small ``h``
    (measured, ``benchmarks/README.md``). The typical tree noise, under
    privacy, moves a decision by at most about ``R / (2 H_NOISE)``. The longer
    private blocks of :func:`default_block_size` do not raise ``h``: their
    gradients are summed over many examples that point in different
    directions, and a larger ``h`` would leave too few blocks to reach a
    useful decision (measured on letter). Corollaries 3.7 / 3.10 instead
    take ``h ∝ G √(L T (2 + log₂T)) / R``, which balances only the
    non-private terms of the worst-case regret bounds and, with letter's
    constants, is 10^2-10^4 times the best ``h``.

    Parameters
    ----------
    base_block_size : int
        ``L₀``.
    clip_norm : float
    radius : float
    alpha : float
    noise_norm : float
        :func:`prefix_noise_norm` of the run (0 without privacy).
    block_size : int or None, default=None
        The block size in force; used only when ``α > 0`` (``h = αL``).
    n_params : int
        ``p``, parameters per class (``n_features + fit_intercept``).

    Returns
    -------
    h : float
    """
    if alpha > 0:
        return alpha * (block_size if block_size is not None else base_block_size)
    signal = H_CURVATURE * clip_norm * base_block_size * n_params
    return (signal + H_NOISE * noise_norm) / radius


def release_signal_to_noise(solver, n_rounds, block_size, n_learners, n_params_total,
                            clip_norm, radius, noise_scale):
    """Expected signal-to-noise ratio of the released (averaged) model, from public quantities.

    Trees (``'ftgl'``, ``'ocg'``): the last released decision is
    ``-ẑ/(2h)`` (projected) with ``ẑ`` the noisy prefix sum of the leaves the
    solver has used by then, ``B - d + 1`` of the ``B = T // L`` blocks
    (``d`` of :data:`ZERO_DECISION_BLOCKS`). Its signal is the sum of their
    ``(B - d + 1) L`` clipped gradients, taken as ``TYPICAL_ALIGNMENT × G``
    per round (at most ``G``: every gradient pointing the same way); its noise
    is the Laplace noise (scale ``b`` per coordinate) of the tree nodes of
    that prefix, independent across the ``n`` learners, so the average model
    holds ``b √(2 D nodes / n)`` in norm.

    ``'ogd'``: the released messages are the decisions (norm at most ``R``,
    taken in full) plus Laplace noise of scale ``noise_scale`` (that of the
    messages of round ``T``) per learner and coordinate, averaged over the
    ``n`` learners.

    Parameters
    ----------
    solver : {'ftgl', 'ocg', 'ogd'}
    n_rounds : int
        ``T``.
    block_size : int
        ``L`` (unused by ogd).
    n_learners : int
    n_params_total : int
        ``D``.
    clip_norm, radius : float
        ``G`` and ``R``.
    noise_scale : float
        The Laplace scale ``b`` of the tree nodes (``noise_scale_``), or of
        PD-OGD's last messages; 0 gives inf.

    Returns
    -------
    ratio : float
        Below ``1 / NOISE_DOMINATED`` the noise is expected to drown the
        released model (far below a non-private model; near chance when
        much smaller).
    """
    from ..privacy import TreeAggregator

    if noise_scale <= 0:
        return math.inf
    D, n = n_params_total, max(int(n_learners), 1)
    if solver == "ogd":
        return radius / (noise_scale * math.sqrt(2.0 * D / n))
    blocks = max(int(n_rounds), 1) // max(int(block_size), 1)
    used = blocks - ZERO_DECISION_BLOCKS[solver] + 1
    if used < 1:
        return 0.0
    n_leaves = max(blocks - 1, 1)
    nodes = TreeAggregator(n_leaves).nodes_in_prefix(min(used, n_leaves))
    signal = TYPICAL_ALIGNMENT * clip_norm * used * block_size
    return signal / (noise_scale * math.sqrt(2.0 * D * nodes / n))
