"""Laplace noise of DecentralizedLogisticRegression: sensitivities, calibration, draws.

Two mechanisms, both pure (ε, 0)-DP over all ``T`` rounds of a stream, with
the neighbouring relation of Definition 3.5 of Wang et al. (2025): one
learner's row in one round replaced by another.

* **Trees (PD-FTGL, PD-OCG).** Each learner adds the gossiped estimate of a
  block's gradient sum as one leaf to its private binary tree (Algorithm 2).
  :func:`leaf_sensitivity` bounds how far one replaced row moves the leaves
  of all learners together (L1, from the exact gossip polynomial), and
  :func:`tree_noise_scale` spreads ε over the tree levels a leaf lies in
  (Appendix C).
* **Messages (PD-OGD, Li et al. 2018).** Every message is the sender's
  projected decision plus its own Laplace noise; :func:`ogd_noise_scale` is
  the scale of round ``t`` for ``ε/T`` per round of messages (basic
  composition, as section 4.1 raises the baseline's noise).

Every draw goes through :func:`~skfedpriv.privacy.laplace_noise`, by
:class:`LaplaceNoise`: the picklable ``noise(size)`` the trees call, and
the noise added to every PD-OGD message.

References
----------
.. [1] X. Wang, W. Yang, C. Yao, M. Song, Y. Wan (2025). Revisiting
   differentially private algorithms for decentralized online learning.
   ICML 2025. Algorithm 2, Theorem 3.6, Appendix C, section 4.1
   (``shared/papers/private-decentralized-online-learning.txt``).
.. [2] C. Li, P. Zhou, L. Xiong, Q. Wang, T. Wang (2018). Differentially
   private distributed online learning. IEEE TKDE 30(8), 1440-1453.
"""

import math

import numpy as np

from ._calibration import laplace_scale
from ._tree import TreeAggregator
from ._mechanisms import laplace_noise

__all__ = [
    "LaplaceNoise",
    "gradient_l1_bound",
    "leaf_sensitivity",
    "ogd_noise_scale",
    "tree_noise_scale",
]


def gradient_l1_bound(clip_norm, n_params_total, n_classes=None):
    """Largest L1 norm of one clipped per-example gradient.

    A gradient clipped to Frobenius norm ``G`` has L1 norm at most ``G√D``.
    The multiclass logistic gradient is the rank-one matrix ``u x̄ᵀ`` with
    ``u = softmax(W x̄) - e_y``: one negative entry ``p_y - 1`` and positive
    entries summing to ``1 - p_y``, so ``‖u‖₁ = 2(1 - p_y)`` and
    ``‖u‖₂ >= (1 - p_y) √(q / (q - 1))`` (the positive part spread evenly).
    Clipping rescales ``u x̄ᵀ`` and ``‖uvᵀ‖₁ = ‖u‖₁ ‖v‖₁``, hence with
    ``p = D / q`` parameters per class

        ``‖clip(u x̄ᵀ)‖₁ <= 2 √((q - 1) / q) √p G``,

    attained by ``p_k = (1 - p_y) / (q - 1)`` for ``k != y`` and ``|x̄_j|``
    all equal. For ``q = 2`` this is ``G√D``; for 10 classes it is
    ``G√D / 1.67``, for 26 classes ``G√D / 2.55``.

    Parameters
    ----------
    clip_norm : float
        ``G``.
    n_params_total : int
        ``D``, coordinates of one decision.
    n_classes : int or None, default=None
        ``q``; ``None``: any gradient of Frobenius norm at most ``G``.

    Returns
    -------
    bound : float
    """
    D = n_params_total
    if n_classes is None:
        return clip_norm * math.sqrt(D)
    q = int(n_classes)
    softmax = 2.0 * math.sqrt((q - 1) / q) * math.sqrt(D / q)
    return clip_norm * min(math.sqrt(D), softmax)


def leaf_sensitivity(gossip_polynomial, clip_norm, n_params_total, n_classes=None):
    """L1 sensitivity of one leaf position of all learners' trees together.

    A replaced row changes one clipped gradient of learner ``j`` in one
    block, so its block sum ``d_j(z)`` moves by at most twice
    :func:`gradient_l1_bound` in L1 (``2G√D``, or less for the multiclass
    logistic gradient of ``n_classes`` classes). Learner ``i``'s leaf is
    ``Σ_j M[i, j] d_j(z)``, ``M`` the gossip polynomial after the block's
    gossip steps, so the leaves together move by at most
    ``2 gradient_l1_bound × max_j Σ_i |M[i, j]|``.

    Parameters
    ----------
    gossip_polynomial : ndarray of shape (n_learners, n_learners)
        ``M`` (:func:`skfedpriv._gossip.gossip_polynomial`).
    clip_norm : float
        ``G``, the bound on each per-example gradient's Frobenius norm.
    n_params_total : int
        ``D``, coordinates of one learner's decision.
    n_classes : int or None, default=None
        Classes of the multiclass logistic gradient (see
        :func:`gradient_l1_bound`).

    Returns
    -------
    sensitivity : float
    """
    column_l1 = float(np.abs(gossip_polynomial).sum(axis=0).max())
    return 2.0 * gradient_l1_bound(clip_norm, n_params_total, n_classes) * column_l1


def tree_noise_scale(epsilon, n_leaves, sensitivity):
    """Laplace scale ``b`` per coordinate of every tree node.

    Every leaf lies in at most ``floor(log₂ H) + 1`` noised nodes of a tree of
    ``H`` leaves, so ``b = (floor(log₂ H) + 1) × sensitivity / ε`` makes all
    nodes of all trees, hence every released prefix sum, (ε, 0)-DP.

    Parameters
    ----------
    epsilon : float
    n_leaves : int
        ``H``.
    sensitivity : float
        :func:`leaf_sensitivity`.

    Returns
    -------
    scale : float
    """
    levels = TreeAggregator(n_leaves).max_nodes_per_input
    return laplace_scale(epsilon / levels, sensitivity)


def ogd_noise_scale(step_size, n_rounds, n_params_total, clip_norm, radius, alpha, epsilon):
    """Laplace scale ``b_t`` of the messages a PD-OGD round computes with step ``η_t``.

    Given all earlier messages, a replaced row of learner ``j`` changes only
    learner ``j``'s update ``Π_K(Σ_k P_jk m_k - η_t g_j)``, through its
    gradient ``g_j = clip(∇f) + αW_j``: by at most ``2(G + αR)`` in Frobenius
    norm (clipping, and ``W_j, W_j' ∈ K``), hence by
    ``Δ_t = 2√D η_t (G + αR)`` in L1 (the projection is non-expansive in the
    Frobenius norm only, so the L1 bound goes through it: the sharper L1
    bound of :func:`gradient_l1_bound` does not survive the projection).
    ``ε/T`` per round of messages: ``b_t = T Δ_t / ε``.

    Parameters
    ----------
    step_size : float
        ``η_t``.
    n_rounds : int
        ``T``.
    n_params_total : int
        ``D``.
    clip_norm, radius, alpha : float
        ``G``, ``R`` and ``α``.
    epsilon : float

    Returns
    -------
    scale : float
    """
    T, D, G, R = n_rounds, n_params_total, clip_norm, radius
    return T * 2.0 * math.sqrt(D) * step_size * (G + alpha * R) / epsilon


class LaplaceNoise:
    """Picklable ``noise(size)``: iid Laplace(0, ``scale``) drawn from ``rng``.

    Parameters
    ----------
    rng : numpy.random.Generator
    scale : float
    """

    def __init__(self, rng, scale):
        self.rng, self.scale = rng, scale

    def __call__(self, size):
        return laplace_noise(self.scale, size, random_state=self.rng)
