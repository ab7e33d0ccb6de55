"""Topologies, mixing-matrix validation and accelerated gossip (Wang et al. 2025, eqs. 5, 7)."""

import math

import numpy as np
import pytest

from skfedpriv._gossip import (
    accelerated_gossip,
    check_mixing_matrix,
    gossip_polynomial,
    gossip_steps,
    gossip_theta,
    grid_shape,
    metropolis_mixing,
    mixing_matrix,
    watts_strogatz_graph,
)

TOPOLOGIES = ["complete", "ring", "grid", "watts-strogatz"]


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 9, 16])
def test_named_topologies_meet_assumption_3_4(topology, n):
    P = mixing_matrix(topology, n)
    P2, sigma2 = check_mixing_matrix(P, n)
    np.testing.assert_allclose(P, P.T)
    np.testing.assert_allclose(P.sum(axis=0), 1.0)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    assert np.linalg.eigvalsh(P).min() >= -1e-12
    assert 0.0 <= sigma2 < 1.0
    # independent σ₂: second largest |eigenvalue| of the symmetric P
    if n > 1:
        ev = np.sort(np.abs(np.linalg.eigvalsh(P)))[::-1]
        assert sigma2 == pytest.approx(ev[1], abs=1e-12)


def test_topology_supports():
    A = mixing_matrix("ring", 6) > 0
    assert A[0, 1] and A[0, 5] and not A[0, 2]
    assert grid_shape(9) == (3, 3) and grid_shape(12) == (3, 4) and grid_shape(7) == (1, 7)
    G = mixing_matrix("grid", 9) > 0
    # node 4 is the centre of the 3 x 3 grid: 4 neighbours + itself
    assert G[4].sum() == 5 and G[0].sum() == 3
    np.testing.assert_allclose(mixing_matrix("complete", 4), np.full((4, 4), 0.25))


@pytest.mark.parametrize(
    "P, match",
    [
        (np.array([[0.5, 0.5], [0.4, 0.6]]), "symmetric"),
        (np.array([[0.5, 0.4], [0.4, 0.5]]), "doubly stochastic"),
        (np.array([[0.0, 1.0], [1.0, 0.0]]), "positive semi-definite"),
        (np.eye(3), "connected"),
        (np.array([[1.2, -0.2], [-0.2, 1.2]]), "non-negative"),
        (np.array([[np.nan, 0.5], [0.5, 0.5]]), "NaN"),
        (np.ones((2, 3)) / 3, "square"),
    ],
)
def test_check_mixing_matrix_rejects(P, match):
    with pytest.raises(ValueError, match=match):
        check_mixing_matrix(P)


def test_check_mixing_matrix_rejects_non_psd_ring_and_wrong_size():
    n = 5  # plain 1/3 ring weights have eigenvalue (1 + 2cos(4π/5))/3 < 0
    P = np.zeros((n, n))
    for i in range(n):
        P[i, [i, (i + 1) % n, (i - 1) % n]] = 1 / 3
    with pytest.raises(ValueError, match="positive semi-definite"):
        check_mixing_matrix(P)
    with pytest.raises(ValueError, match="learners"):
        check_mixing_matrix(mixing_matrix("ring", 4), 5)


def test_gossip_is_resumable_and_matches_polynomial():
    rng = np.random.default_rng(0)
    P = mixing_matrix("ring", 7)
    theta = gossip_theta(check_mixing_matrix(P)[1])
    H0 = rng.normal(size=(7, 3, 2))
    a = accelerated_gossip(P, H0, H0, 7, theta)
    b = accelerated_gossip(P, *accelerated_gossip(P, H0, H0, 3, theta), 4, theta)
    np.testing.assert_allclose(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1])
    M = gossip_polynomial(P, 7, theta)
    np.testing.assert_allclose(a[0], np.einsum("ij,jab->iab", M, H0), atol=1e-12)
    # the average is preserved (columns of M sum to 1)
    np.testing.assert_allclose(M.sum(axis=0), 1.0)
    np.testing.assert_allclose(a[0].mean(axis=0), H0.mean(axis=0), atol=1e-12)


@pytest.mark.parametrize("topology, n", [("complete", 9), ("ring", 16), ("grid", 16), ("grid", 25)])
def test_accelerated_gossip_reaches_average_at_spectral_rate(topology, n):
    rng = np.random.default_rng(1)
    P = mixing_matrix(topology, n)
    _, sigma2 = check_mixing_matrix(P)
    theta = gossip_theta(sigma2)
    assert theta == pytest.approx(1 / (1 + math.sqrt(1 - sigma2**2)))  # eq. 7
    H0 = rng.normal(size=(n, 4))
    Hbar = np.broadcast_to(H0.mean(axis=0), H0.shape)
    e0 = np.linalg.norm(H0 - Hbar)
    c = 1 - 1 / math.sqrt(2)
    cur, prev = H0, H0
    errors = []
    for k in range(1, 301):
        cur, prev = accelerated_gossip(P, cur, prev, 1, theta)
        err = np.linalg.norm(cur - Hbar)
        errors.append(err)
        # Lemma F.1 (Ye et al. 2023, Prop. 1)
        assert err <= math.sqrt(14) * (1 - c * math.sqrt(1 - sigma2)) ** k * e0 + 1e-12
    errors = np.array(errors)
    if sigma2 > 0:
        # the asymptotic rate per step is √θ (critically damped mode of eq. 5):
        # measured over a window, within a polynomial (k r^k) factor
        k1, k2 = 100, 200
        if errors[k2 - 1] > 1e-13 * e0:
            rate = (errors[k2 - 1] / errors[k1 - 1]) ** (1 / (k2 - k1))
            assert rate == pytest.approx(math.sqrt(theta), rel=0.02)
            # and faster than plain gossip's σ₂ per step on slow graphs
            if sigma2 > 0.9:
                assert rate < sigma2
    else:
        assert errors[-1] < 1e-12 * e0


@pytest.mark.parametrize("topology, n", [("complete", 9), ("ring", 9), ("grid", 16)])
def test_eq7_gossip_steps_give_lemma_d3_accuracy(topology, n):
    T = 10_000
    P = mixing_matrix(topology, n)
    _, sigma2 = check_mixing_matrix(P)
    rho = 1 - sigma2
    L = gossip_steps(n, T, rho)
    assert L == math.ceil(4 * math.log(n * T * math.sqrt(14 * n)) / math.sqrt(rho))
    M = gossip_polynomial(P, L, gossip_theta(sigma2))
    # Appendix F: ‖H^L - H̄‖_F <= 2 ‖H^0‖_F / (n T √n) for every H^0
    J = np.full((n, n), 1 / n)
    assert np.linalg.norm(M - J, 2) <= 2 / (n * T * math.sqrt(n))


# -- Watts-Strogatz (Figure 5) ----------------------------------------------------


def _brute_metropolis(A):
    """Lazy Metropolis-Hastings weights, entry by entry."""
    n = len(A)
    deg = [sum(A[i][j] for j in range(n) if j != i) for i in range(n)]
    W = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i != j and A[i][j]:
                W[i][j] = 1.0 / (1 + max(deg[i], deg[j]))
        W[i][i] = 1.0 - sum(W[i][j] for j in range(n) if j != i)
    return np.array([[0.5 * ((i == j) + W[i][j]) for j in range(n)] for i in range(n)])


@pytest.mark.parametrize("n, degree", [(9, 6), (16, 4), (25, 6), (12, 2)])
def test_watts_strogatz_lattice_and_rewiring(n, degree):
    half = degree // 2
    # rewire = 0: the ring lattice, by its definition
    lattice = watts_strogatz_graph(n, degree, rewire=0.0)
    d = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    np.testing.assert_array_equal(lattice, (np.minimum(d, n - d) <= half) & (d > 0))
    if degree == 2:
        np.testing.assert_array_equal(metropolis_mixing(lattice), mixing_matrix("ring", n))
    changed = []
    for seed in range(20):
        A = watts_strogatz_graph(n, degree, rewire=0.5, seed=seed)
        np.testing.assert_array_equal(A, A.T)
        assert not A.diagonal().any()
        assert A.sum() == 2 * n * half  # rewiring keeps the edges: average degree kept
        P = metropolis_mixing(A)
        np.testing.assert_allclose(P, _brute_metropolis(A.tolist()), atol=1e-15)
        _, sigma2 = check_mixing_matrix(P, n)  # connected, doubly stochastic, PSD, gap > 0
        assert sigma2 < 1.0
        changed.append((A & ~lattice).sum() / 2 / (n * half))
    # a share of the lattice's edges moved (each w.p. 0.5, some back onto the lattice)
    assert 0.2 < np.mean(changed) < 0.55
    np.testing.assert_array_equal(watts_strogatz_graph(n, degree, 0.5, seed=3),
                                  watts_strogatz_graph(n, degree, 0.5, seed=3))


def test_watts_strogatz_is_always_connected_and_between_cycle_and_complete():
    """Degree 2 fully rewired disconnects most draws; the builder redraws."""
    for seed in range(30):
        A = watts_strogatz_graph(10, 2, rewire=1.0, seed=seed)
        check_mixing_matrix(metropolis_mixing(A), 10)
    # Figure 5's spectral gaps: complete > Watts-Strogatz > cycle (n = 9)
    gaps = {t: 1 - check_mixing_matrix(mixing_matrix(t, 9))[1]
            for t in ("complete", "watts-strogatz", "ring")}
    assert gaps["complete"] > gaps["watts-strogatz"] > gaps["ring"]
    # degree >= n - 1 is the complete graph; bad rewiring probabilities are refused
    np.testing.assert_array_equal(watts_strogatz_graph(5, 6), ~np.eye(5, dtype=bool))
    with pytest.raises(ValueError, match="rewire"):
        watts_strogatz_graph(9, 6, rewire=1.5)
