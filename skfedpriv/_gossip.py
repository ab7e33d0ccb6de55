"""Gossip communication between learners: topologies, mixing matrices, accelerated gossip.

A decentralized learner ``i`` only talks to its neighbours on a graph; one
communication round replaces every learner's value ``h_i`` by the weighted
average ``Σ_j P_ij h_j`` over its neighbourhood. With the learners' values
stacked in an array ``H`` of shape ``(n_learners, ...)`` that round is a single
matrix product ``P @ H``, which is how every function here is vectorized.

Contents
--------
* :func:`mixing_matrix` — the matrix ``P`` of a named topology ('complete',
  'ring', 'grid', 'watts-strogatz');
* :func:`watts_strogatz_graph` — a seeded, connected small-world graph
  (Watts and Strogatz, 1998), the third graph of Figure 5;
* :func:`check_mixing_matrix` — validation of Assumption 3.4 of Wang et al.
  (2025) for a user-given ``P``;
* :func:`gossip_theta`, :func:`gossip_steps` — θ and the number of steps of
  eq. 7 (and eq. 10);
* :func:`accelerated_gossip` — the accelerated iteration of eq. 5 (Liu and
  Morse, 2011), resumable;
* :func:`gossip_polynomial` — the ``n × n`` matrix ``M_k`` with
  ``H^k = M_k H^0``, used for exact sensitivity bounds.

References
----------
.. [1] X. Wang, W. Yang, C. Yao, M. Song, Y. Wan (2025). Revisiting
   differentially private algorithms for decentralized online learning.
   ICML 2025. Assumption 3.4, eqs. 5, 7, 10, Lemma F.1
   (``shared/papers/private-decentralized-online-learning.txt``).
.. [2] J. Liu and A. S. Morse (2011). Accelerated linear iterations for
   distributed averaging. Annual Reviews in Control 35(2), 160-165.
.. [3] L. Xiao and S. Boyd (2004). Fast linear iterations for distributed
   averaging. Systems & Control Letters 53(1), 65-78.
.. [4] D. J. Watts and S. H. Strogatz (1998). Collective dynamics of
   'small-world' networks. Nature 393, 440-442.
"""

import math
import numbers

import numpy as np
from scipy.sparse.csgraph import connected_components

from ._param_validation import Registry

__all__ = [
    "TOPOLOGIES",
    "accelerated_gossip",
    "check_mixing_matrix",
    "gossip_polynomial",
    "gossip_steps",
    "gossip_theta",
    "grid_shape",
    "metropolis_mixing",
    "mixing_matrix",
    "watts_strogatz_graph",
]

# Tolerance of the numerical checks of Assumption 3.4 (symmetry, row sums,
# positive semi-definiteness), relative to the entries of P (all in [0, 1]).
_TOL = 1e-10


def grid_shape(n):
    """Rows and columns of the most square ``r × c`` grid with ``r * c = n``.

    ``r`` is the largest divisor of ``n`` not above ``√n``; a prime ``n``
    gives a ``1 × n`` path.
    """
    r = int(math.isqrt(n))
    while n % r:
        r -= 1
    return r, n // r


def _ring_graph(n):
    return _ring_lattice(n, 1)


def _grid_graph(n):
    A = np.zeros((n, n), dtype=bool)
    r, c = grid_shape(n)
    node = np.arange(n).reshape(r, c)
    right = node[:, :-1].ravel(), node[:, 1:].ravel()
    down = node[:-1, :].ravel(), node[1:, :].ravel()
    for a, b in (right, down):
        A[a, b] = True
        A[b, a] = True
    return A


#: Section 4 / appendix B of Wang et al. (2025): average degree 6, rewiring
#: probability 0.5; the seed is fixed so that the named topology is one graph.
WATTS_STROGATZ = {"degree": 6, "rewire": 0.5, "seed": 0}

#: Draws of a Watts-Strogatz graph before giving up on a connected one.
_WS_TRIES = 100


def _ring_lattice(n, half):
    """Every node linked to the ``half`` nearest nodes on each side (mod n)."""
    A = np.zeros((n, n), dtype=bool)
    idx = np.arange(n)
    for j in range(1, half + 1):
        A[idx, (idx + j) % n] = True
        A[(idx + j) % n, idx] = True
    return A


def _rewire(A, half, rewire, rng):
    """Watts and Strogatz's rewiring: for ``j = 1..half``, each lattice edge
    ``(u, u + j)`` is moved, with probability ``rewire``, to ``(u, w)``, ``w``
    uniform over the nodes not ``u`` and not already linked to ``u``."""
    n = A.shape[0]
    A = A.copy()
    for j in range(1, half + 1):
        for u in range(n):
            v = (u + j) % n
            if not A[u, v] or rng.random() >= rewire:
                continue
            free = np.flatnonzero(~A[u])
            free = free[free != u]
            if free.size == 0:
                continue
            w = free[rng.integers(free.size)]
            A[u, v] = A[v, u] = False
            A[u, w] = A[w, u] = True
    return A


def watts_strogatz_graph(n, degree=6, rewire=0.5, seed=0):
    """Adjacency of a connected Watts-Strogatz small-world graph.

    A ring lattice where every node is linked to its ``degree // 2`` nearest
    nodes on each side, whose edges are then rewired one by one with
    probability ``rewire`` (Watts and Strogatz, 1998): the number of edges,
    hence the average degree, is kept. Draws that leave the graph
    disconnected are discarded and drawn again from the same generator (at
    most 100 draws), so the result is always connected. The graph is public
    (``seed`` is not a privacy noise seed).

    Parameters
    ----------
    n : int
        Nodes.
    degree : int, default=6
        Average degree (even; odd values are rounded down). A lattice of
        degree ``>= n - 1`` is the complete graph.
    rewire : float in [0, 1], default=0.5
        Rewiring probability (0: the ring lattice).
    seed : int, default=0

    Returns
    -------
    A : ndarray of bool of shape (n, n)
        Symmetric, no self-loops.

    Raises
    ------
    ValueError
        If no connected graph was drawn in 100 draws.
    """
    n = int(n)
    if not 0.0 <= rewire <= 1.0:
        raise ValueError(f"rewire must be in [0, 1], got {rewire!r}.")
    if int(degree) < 2:
        raise ValueError(f"degree must be >= 2, got {degree!r}.")
    if int(degree) >= n - 1:  # the lattice is already complete: nothing to rewire
        return ~np.eye(n, dtype=bool)
    half = int(degree) // 2
    lattice = _ring_lattice(n, half)
    rng = np.random.default_rng(seed)
    for _ in range(_WS_TRIES):
        A = _rewire(lattice, half, rewire, rng)
        if connected_components(A, directed=False)[0] == 1:
            return A
    raise ValueError(
        f"No connected Watts-Strogatz graph with n={n}, degree={degree}, "
        f"rewire={rewire} in {_WS_TRIES} draws; raise the degree."
    )


def metropolis_mixing(A):
    """``P = (I + W) / 2``, ``W`` the Metropolis-Hastings weights of the graph ``A``.

    ``W_ij = 1 / (1 + max(deg_i, deg_j))`` on the edges of the symmetric
    boolean adjacency ``A`` (diagonal ignored), ``W_ii = 1 - Σ_j W_ij``:
    symmetric, doubly stochastic, and with the lazy half positive
    semi-definite (Xiao and Boyd, 2004).
    """
    n = A.shape[0]
    A = A & ~np.eye(n, dtype=bool)
    deg = A.sum(axis=1)
    W = np.where(A, 1.0 / (1.0 + np.maximum(deg[:, None], deg[None, :])), 0.0)
    np.fill_diagonal(W, 1.0 - W.sum(axis=1))
    return 0.5 * (np.eye(n) + W)


def _complete_mixing(n):
    return np.full((n, n), 1.0 / n)


def _ring_mixing(n):
    return metropolis_mixing(_ring_graph(n))


def _grid_mixing(n):
    return metropolis_mixing(_grid_graph(n))


def _watts_strogatz_mixing(n):
    return metropolis_mixing(watts_strogatz_graph(n, **WATTS_STROGATZ))


#: The named topologies (the allowed names of ``topology``), each mapped to
#: the builder of its mixing matrix ``f(n_learners) -> P``.
TOPOLOGIES = Registry("topology", {
    "complete": _complete_mixing,
    "ring": _ring_mixing,
    "grid": _grid_mixing,
    "watts-strogatz": _watts_strogatz_mixing,
})


def mixing_matrix(topology, n_learners):
    """Mixing matrix ``P`` of a named topology, meeting Assumption 3.4.

    Parameters
    ----------
    topology : {'complete', 'ring', 'grid', 'watts-strogatz'}
        * ``'complete'``: every learner talks to every other one,
          ``P = 11ᵀ / n`` (one round averages exactly; ``σ₂(P) = 0``).
        * ``'ring'``: learner ``i`` talks to ``i ± 1 (mod n)`` (the cycle
          graph of Figure 5).
        * ``'grid'``: the learners sit on the most square ``r × c`` grid
          (:func:`grid_shape`) and talk to their 4-neighbours (no wrap-around).
        * ``'watts-strogatz'``: the connected small-world graph of
          :func:`watts_strogatz_graph` with Figure 5's average degree 6 and
          rewiring probability 0.5, seed 0 (other parameters or seeds:
          pass ``metropolis_mixing(watts_strogatz_graph(n, ...))`` as the
          matrix).

        Ring, grid and Watts-Strogatz use lazy Metropolis-Hastings weights
        ``P = (I + W) / 2`` with ``W_ij = 1 / (1 + max(deg_i, deg_j))`` on the
        edges (Xiao and Boyd, 2004): symmetric and doubly stochastic, and the
        lazy half makes every eigenvalue lie in ``[0, 1]`` (positive
        semi-definite, as Assumption 3.4 requires).
    n_learners : int
        Number of learners ``n >= 1``.

    Returns
    -------
    P : ndarray of shape (n_learners, n_learners)

    Examples
    --------
    >>> from skfedpriv._gossip import mixing_matrix
    >>> mixing_matrix("ring", 4).round(3).tolist()[0]
    [0.667, 0.167, 0.0, 0.167]
    """
    if isinstance(n_learners, (bool, np.bool_)) or not isinstance(n_learners, numbers.Integral):
        raise TypeError(f"n_learners must be an integer, got {n_learners!r}.")
    n = int(n_learners)
    if n < 1:
        raise ValueError(f"n_learners must be >= 1, got {n}.")
    build = TOPOLOGIES[topology]
    return _complete_mixing(n) if n == 1 else build(n)


def check_mixing_matrix(P, n_learners=None):
    """Validate a mixing matrix against Assumption 3.4 of Wang et al. (2025).

    ``P`` must be square, finite, non-negative, symmetric, doubly stochastic,
    positive semi-definite, supported on a connected graph (the graph with an
    edge ``i - j`` where ``P_ij > 0``), and its second largest singular value
    ``σ₂(P)`` must be ``< 1``.

    Parameters
    ----------
    P : array-like of shape (n, n)
    n_learners : int, optional
        If given, ``P`` must have this many rows.

    Returns
    -------
    P : ndarray of shape (n, n)
        A float copy, symmetrized to remove rounding asymmetry.
    sigma2 : float
        Second largest singular value ``σ₂(P)`` (0 for ``n = 1``); the
        spectral gap is ``ρ = 1 - σ₂(P)``.

    Raises
    ------
    ValueError
        Naming the first property that fails.
    """
    P = np.array(P, dtype=np.float64, copy=True)
    if P.ndim != 2 or P.shape[0] != P.shape[1] or P.shape[0] == 0:
        raise ValueError(f"A mixing matrix must be square and non-empty, got shape {P.shape}.")
    n = P.shape[0]
    if n_learners is not None and n != n_learners:
        raise ValueError(
            f"The mixing matrix has {n} rows but there are {n_learners} learners "
            "(distinct sample_group labels); they must match."
        )
    if not np.all(np.isfinite(P)):
        raise ValueError("The mixing matrix contains NaN or infinite entries.")
    if np.any(P < -_TOL):
        raise ValueError("The mixing matrix must have non-negative entries.")
    if not np.allclose(P, P.T, rtol=0.0, atol=_TOL):
        raise ValueError("The mixing matrix must be symmetric.")
    if not np.allclose(P.sum(axis=1), 1.0, rtol=0.0, atol=1e-8):
        raise ValueError("The mixing matrix must be doubly stochastic (rows and columns sum to 1).")
    P = np.clip(0.5 * (P + P.T), 0.0, None)
    eigvals = np.linalg.eigvalsh(P)  # ascending
    if eigvals[0] < -1e-8:
        raise ValueError(
            "The mixing matrix must be positive semi-definite; its smallest "
            f"eigenvalue is {eigvals[0]:.3g}. (Replacing P by (I + P)/2 fixes this.)"
        )
    n_comp, _ = connected_components(P > _TOL, directed=False)
    if n_comp > 1:
        raise ValueError(
            f"The mixing matrix must be supported on a connected graph; its "
            f"support has {n_comp} connected components."
        )
    sigma2 = spectral_sigma2(P)
    if not sigma2 < 1.0 - 1e-12:
        raise ValueError(
            f"The second largest singular value of the mixing matrix must be < 1, got {sigma2!r}."
        )
    return P, sigma2


def spectral_sigma2(P):
    """Second largest singular value ``σ₂(P)`` (0 for a 1 × 1 matrix)."""
    if P.shape[0] == 1:
        return 0.0
    s = np.linalg.svd(P, compute_uv=False)
    return float(min(max(s[1], 0.0), 1.0))


def gossip_theta(sigma2):
    """Momentum ``θ = (1 + √(1 - σ₂(P)²))⁻¹`` of the accelerated gossip (eq. 7)."""
    return 1.0 / (1.0 + math.sqrt(max(1.0 - sigma2**2, 0.0)))


def gossip_steps(n_learners, n_rounds, spectral_gap):
    """Gossip steps per block, ``L = ⌈4 ln(n T √(14 n)) / √ρ⌉`` (eq. 7, ``L'`` of eq. 10).

    With this many accelerated steps every learner's estimate of the block
    average is within ``2 L (G + αR) / (n T)`` of it (Lemma D.3).
    """
    n, T = int(n_learners), max(int(n_rounds), 1)
    return max(1, math.ceil(4.0 * math.log(n * T * math.sqrt(14.0 * n)) / math.sqrt(spectral_gap)))


def accelerated_gossip(P, current, previous, n_steps, theta):
    """Run ``n_steps`` steps of the accelerated gossip of eq. 5, all learners at once.

    ``H^{k+1} = (1 + θ) P H^k - θ H^{k-1}`` (eq. 5 stacked over learners, the
    form (28) of Appendix F), started from ``H^0 = H^{-1}`` (pass the same
    array as ``current`` and ``previous``).

    Parameters
    ----------
    P : ndarray of shape (n, n)
        Mixing matrix.
    current, previous : ndarray of shape (n, ...)
        ``H^k`` and ``H^{k-1}``; learner ``i``'s value is ``current[i]``.
    n_steps : int
        Steps to run (>= 0); the call is resumable, so ``k`` steps then ``m``
        steps equal ``k + m`` steps.
    theta : float
        Momentum θ (:func:`gossip_theta`).

    Returns
    -------
    current, previous : ndarray of shape (n, ...)
        ``H^{k+n_steps}`` and ``H^{k+n_steps-1}`` (new arrays).
    """
    shape = current.shape
    cur = current.reshape(shape[0], -1)
    prev = previous.reshape(shape[0], -1)
    for _ in range(int(n_steps)):
        cur, prev = (1.0 + theta) * (P @ cur) - theta * prev, cur
    return cur.reshape(shape), prev.reshape(shape)


def gossip_polynomial(P, n_steps, theta):
    """The matrix ``M_k`` with ``H^k = M_k H^0`` after ``k`` accelerated steps.

    ``M_k`` is a polynomial in ``P`` with ``M_k 1 = 1`` (every column sums to
    one), but it may have negative entries, so a change of learner ``j``'s
    value moves learner ``i``'s estimate by ``|M_k[i, j]|`` times that change
    and all estimates together by ``‖M_k[:, j]‖₁`` times it.
    """
    eye = np.eye(P.shape[0])
    return accelerated_gossip(P, eye, eye, n_steps, theta)[0]
