"""Continual prefix sums under secure aggregation, with integer noise shares.

The integer side of the 'secagg-tree' mechanism of
:class:`~skfedpriv.DWDClassifier`. Every site holds a stream of real
vectors ``u_1, u_2, ...`` (one per batch) of L2 sensitivity 1; the analyst
wants their prefix sums summed over sites, and may see only the modular sum
``Σ_sites m_s mod 2^bits`` of the sites' integer messages (secure
aggregation: pairwise masks cancel in the sum, Bonawitz et al. 2017).

**A site's messages** (:class:`SecAggSiteStream`). It scales and rounds
each step, ``r_j = rint(γ u_j)``, and adds them into the dyadic nodes of a
binary tree (the 0/1 matrix ``C`` of a
:class:`~skfedpriv.privacy.BinaryTreeFactorization`, Honaker's: every
complete node). When a node completes it sends the node's integer sum plus
its own discrete Gaussian share ``N_Z(0, σ_s²)`` per coordinate, mod
``2^bits``. Its raw node sums and its generator are its secret state.

**Sensitivity.** Replacing one row of one site's batch ``j`` moves ``u_j``
by at most 1, so ``r_j`` by at most ``γ + sqrt(d)`` (each coordinate of
``rint(a) - rint(b)`` is within 1 of ``a - b``), and the vector of all node
sums by at most ``‖C‖_col (γ + sqrt(d))`` (largest column norm of ``C``).
Only that one site's nodes move.

**The analyst** (:class:`SecAggTreeAggregate`) lifts each summed node to
the centered range ``[-2^(bits-1), 2^(bits-1))``, divides by ``γ`` and
estimates every prefix sum with the factorization's ``B`` (Honaker's
estimator: only nodes complete by then): post-processing. Modular
wrap-around is post-processing too (no privacy effect) but ruins the
estimate; :func:`wrap_probability` bounds its probability from public
quantities, :func:`choose_scale` sizes ``γ`` so it is negligible, and the
aggregate flags a lifted node outside its public range.
"""

import math
import warnings

import numpy as np

from ._discrete_gaussian import discrete_gaussian

__all__ = [
    "MODULUS_BITS",
    "SecAggSiteStream",
    "SecAggTreeAggregate",
    "WrapAroundWarning",
    "choose_scale",
    "node_ends",
    "wrap_probability",
]

#: Bits of the secure-aggregation field: Flower's SecAgg+ allows a
#: ``modulus_range`` of at most ``2**32``.
MODULUS_BITS = 32
#: Standard deviations of the summed noise kept free below the modulus.
TAIL = 12.0


class WrapAroundWarning(UserWarning):
    """A secure-aggregation sum may wrap around its modulus (a utility
    failure, not a privacy one: wrap-around is post-processing)."""


def _half(bits):
    return 2 ** (bits - 1)


def wrap_probability(value_bound, total_sigma, count, bits=MODULUS_BITS):
    """Union bound on the probability that any of ``count`` summed
    coordinates, each of true magnitude at most ``value_bound``, leaves the
    centered range of ``2^bits`` once the noise is added.

    The summed discrete Gaussian shares are ``total_sigma``-subgaussian (a
    discrete Gaussian ``N_Z(0, σ²)`` is σ-subgaussian, CKS 2020, Cor. 23;
    independent subgaussians add in variance), so each coordinate exceeds
    the headroom ``t`` with probability at most ``2 exp(-t² / (2 σ²))``.
    """
    headroom = _half(bits) - 1 - value_bound
    if headroom <= 0:
        return 1.0
    return min(1.0, 2.0 * count * math.exp(-(headroom**2) / (2.0 * total_sigma**2)))


def choose_scale(row_bound, n_rows, n_steps, n_sites, noise_per_gamma, dim, bits=MODULUS_BITS):
    """The largest scale ``γ`` that keeps every node sum within the modulus
    with ``TAIL`` standard deviations of noise to spare.

    A node's true sum has magnitude at most ``γ n_rows row_bound`` plus the
    rounding, ``n_steps n_sites / 2``; its noise has std
    ``noise_per_gamma (γ + sqrt(dim))`` (the noise is calibrated to the
    rounded sensitivity). All public.

    Returns
    -------
    gamma : float
        ``<= 0`` when no scale fits (the modulus is too small).
    """
    room = _half(bits) - 1 - 0.5 * n_steps * n_sites - TAIL * noise_per_gamma * math.sqrt(dim)
    return room / (n_rows * row_bound + TAIL * noise_per_gamma)


def node_ends(C):
    """The step at which each node of the 0/1 incidence ``C`` completes."""
    C = np.asarray(C)
    return C.shape[1] - 1 - np.argmax(C[:, ::-1], axis=1)


class SecAggSiteStream:
    """One site's integer messages of a tree-factorized prefix-sum stream.

    Parameters
    ----------
    C : ndarray of shape (n_nodes, n_steps)
        The 0/1 node-step incidence of the tree.
    gamma : float
        Scale before rounding.
    sigma : float
        The site's discrete Gaussian σ (integer units).
    dim : int
    rng : numpy.random.Generator
        The site's own generator (never shared).
    bits : int
    """

    def __init__(self, C, gamma, sigma, dim, rng, bits=MODULUS_BITS):
        C = np.asarray(C)
        self.members = [np.flatnonzero(C[:, j]) for j in range(C.shape[1])]
        self.ends = node_ends(C)
        self.gamma, self.sigma, self.dim, self.bits = float(gamma), float(sigma), dim, bits
        self.rng = rng
        self.step = 0
        self._open = {}  # node -> raw integer sum of the rounded steps so far

    def encode(self, u):
        """``rint(γ u)`` as int64 (the rounded step)."""
        return np.rint(self.gamma * np.asarray(u, dtype=float)).astype(np.int64)

    def send(self, u):
        """Add step ``u`` (the next one) and return the messages of the nodes
        that complete with it: ``{node: node sum + share}``, integers (the
        channel carries them mod ``2^bits``: in process
        :meth:`SecAggTreeAggregate.add` reduces the sum; Flower's SecAgg+
        carries them exactly, :mod:`skfedpriv.flower._secagg`)."""
        rounded = self.encode(u)
        messages = {}
        for node in self.members[self.step]:
            total = self._open.pop(node, 0) + rounded
            if self.ends[node] == self.step:
                share = discrete_gaussian(self.rng, self.sigma, self.dim)
                messages[int(node)] = total + share
            else:
                self._open[node] = total
        self.step += 1
        return messages


class SecAggTreeAggregate:
    """The analyst's side: modular sums of the sites' messages, lifted,
    unscaled and combined into prefix-sum estimates (post-processing).

    Parameters
    ----------
    factorization : BinaryTreeFactorization
    gamma : float
    bits : int
    """

    def __init__(self, factorization, gamma, bits=MODULUS_BITS):
        self.B = np.asarray(factorization.B)
        self.gamma, self.bits = float(gamma), bits
        self.nodes = {}
        self.step = 0

    def add(self, messages_of_sites, node_bound):
        """Sum the sites' messages of one step mod ``2^bits``, lift, store;
        return the prefix-sum estimate of this step (in ``u`` units).

        ``node_bound`` is the public bound on a node's lifted magnitude
        (:class:`WrapAroundWarning` when exceeded: the sum wrapped).
        """
        modulus = 2**self.bits
        summed = {}
        for node in messages_of_sites[0]:
            total = np.zeros_like(messages_of_sites[0][node])
            for messages in messages_of_sites:
                total = np.mod(total + np.mod(messages[node], modulus), modulus)
            summed[node] = np.where(total >= _half(self.bits), total - modulus, total)
        return self.add_sums(summed, node_bound)

    def add_sums(self, summed, node_bound):
        """:meth:`add` from the lifted sums ``{node: integers}`` of the nodes
        completing at this step (a channel that sums exactly)."""
        for node, lifted in summed.items():
            if np.max(np.abs(lifted)) > node_bound:
                warnings.warn(WrapAroundWarning(
                    "a secure-aggregation node sum is outside its public range: it "
                    "wrapped around the modulus, and the model is damaged."), stacklevel=3)
            self.nodes[node] = lifted / self.gamma
        row = self.B[self.step]
        estimate = sum(row[node] * value for node, value in self.nodes.items() if row[node])
        self.step += 1
        return estimate
