"""Tests of prefix-sum factorizations, streaming correlated noise and the tree.

The optimized factorizations (optimal, BLT) are read from the on-disk cache
(``$SKFEDPRIV_CACHE`` or ``~/.cache/skfedpriv``, as in the rest of the
suite), so a run does not recompute them at ``R = 1000``;
``test_fresh_optimizations_are_optimal_and_match_the_cache`` runs both
optimizations without the cache in every run, at ``R = 100``, and
``test_cache_location_and_fallback`` checks the cache round trip.
"""

import doctest
import functools
import math
import os
import pickle

import numpy as np
import pytest

from skfedpriv.privacy import _factorizations, _tree
from skfedpriv.privacy import (
    FACTORIZATIONS,
    BinaryTreeFactorization,
    BLTFactorization,
    HorizonExceededError,
    OptimalFactorization,
    ToeplitzFactorization,
    TreeAggregator,
    make_factorization,
)
from _streams import stream_from_source

NAMES = sorted(FACTORIZATIONS)


@functools.cache
def get(name, n_rounds):
    return make_factorization(name, n_rounds)


class OneHot:
    """Deterministic z-source: the k-th draw is the k-th unit vector."""

    def __init__(self, width):
        self.width = width
        self.count = 0

    def __call__(self, size):
        k = size[0]
        assert size == (k, self.width)
        out = np.zeros(size)
        out[np.arange(k), self.count + np.arange(k)] = 1.0
        self.count += k
        return out


# ---------------------------------------------------------------- A = B C


@pytest.mark.parametrize("n_rounds", [7, 100, 1000])
@pytest.mark.parametrize("name", NAMES)
def test_B_times_C_is_prefix_sum_matrix(name, n_rounds):
    f = get(name, n_rounds)
    B, C = f.B, f.C
    assert B.shape == (n_rounds, f.n_noise) and C.shape == (f.n_noise, n_rounds)
    np.testing.assert_allclose(B @ C, np.tri(n_rounds), rtol=0, atol=1e-9)


@pytest.mark.parametrize("n_rounds", [1, 7, 64, 100])
@pytest.mark.parametrize("name", NAMES)
def test_summaries_match_dense_factors(name, n_rounds):
    f = get(name, n_rounds)
    B, C = f.B, f.C
    sens2 = np.max(np.sum(C**2, axis=0))
    assert f.sensitivity_squared == pytest.approx(sens2, rel=1e-12)
    assert f.sensitivity == pytest.approx(np.sqrt(sens2), rel=1e-12)
    assert f.frobenius_B_squared == pytest.approx(np.sum(B**2), rel=1e-10)
    assert f.mean_squared_error == pytest.approx(sens2 * np.sum(B**2) / n_rounds, rel=1e-10)
    # causal: B and C lower triangular where they are square
    if f.n_noise == n_rounds:
        assert np.allclose(np.triu(B, 1), 0) and np.allclose(np.triu(C, 1), 0)


# ---------------------------------------------------------------- tree


def _popcount_sum(n_rounds):
    return sum(bin(t).count("1") for t in range(1, n_rounds + 1))


@pytest.mark.parametrize("n_rounds", [1, 2, 7, 64, 100, 1000, 1023, 1024])
@pytest.mark.parametrize("estimator", ["plain", "honaker"])
def test_tree_sensitivity_counts_complete_nodes(n_rounds, estimator):
    f = BinaryTreeFactorization(n_rounds, estimator)
    assert f.sensitivity_squared == math.floor(math.log2(n_rounds)) + 1
    if estimator == "plain":
        assert f.frobenius_B_squared == _popcount_sum(n_rounds)


def test_tree_paper_numbers():
    assert get("tree", 100).frobenius_B_squared == 319
    assert get("tree", 1000).frobenius_B_squared == 4938
    assert get("tree", 100).sensitivity_squared == 7
    assert get("tree", 1000).sensitivity_squared == 10
    # eq. (6) row bound ||b^r||^2 <= log2 R fails for R = 7 (row 7 has 3 nodes)
    assert np.max(np.sum(get("tree", 7).B ** 2, axis=1)) == 3 > math.log2(7)


def test_tree_matches_paper_eq5():
    C5 = np.array(
        [[1, 0, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 1, 1], [1, 1, 1, 1]],
        dtype=float,
    )
    B5 = np.zeros((4, 7))
    B5[0, 0] = B5[1, 2] = B5[2, 2] = B5[2, 3] = B5[3, 6] = 1.0
    honaker = BinaryTreeFactorization(4, "honaker")
    np.testing.assert_array_equal(honaker.C, C5)  # all nodes, post-order
    plain = BinaryTreeFactorization(4, "plain")
    used = [0, 2, 3, 6]  # the nodes B of eq. (5) uses; the others have zero columns
    np.testing.assert_array_equal(plain.C, C5[used])
    np.testing.assert_array_equal(plain.B, B5[:, used])
    assert not B5[:, [1, 4, 5]].any()


def test_honaker_same_privacy_less_error():
    plain, honaker = get("tree", 1000), get("honaker", 1000)
    assert honaker.sensitivity_squared == plain.sensitivity_squared
    ratio = plain.mean_squared_error / honaker.mean_squared_error
    assert ratio == pytest.approx(1.7205, abs=2e-3)  # "about 1.7x"
    # and the Honaker B is unbiased: each row of B C is a row of A (tested above),
    # with less variance on every row
    assert np.all(np.sum(get("honaker", 100).B ** 2, 1) <= np.sum(get("tree", 100).B ** 2, 1) + 1e-12)


# ---------------------------------------------------------------- Toeplitz


def _h_exact(n_rounds):
    # h(k) = binom(2k, k) / 4^k, computed independently of the recursion
    k = np.arange(n_rounds)
    from scipy.special import gammaln

    return np.exp(gammaln(2 * k + 1) - 2 * gammaln(k + 1) - k * np.log(4.0))


@pytest.mark.parametrize(
    "n_rounds, sens2, frob", [(100, 2.531352, 222.0165), (1000, 3.265003, 2947.5890)]
)
def test_toeplitz_numbers(n_rounds, sens2, frob):
    f = get("toeplitz", n_rounds)
    assert f.sensitivity_squared == pytest.approx(sens2, abs=5e-7)
    assert f.frobenius_B_squared == pytest.approx(frob, abs=5e-5)
    h = _h_exact(n_rounds)
    np.testing.assert_allclose(f.coefficients, h, rtol=1e-10)
    assert f.sensitivity_squared == pytest.approx(np.sum(h**2), rel=1e-10)
    # eq. (8)'s bound is below the truth (3.128 < 3.265 at R = 1000)
    assert ToeplitzFactorization.eq8_bound(n_rounds) < f.sensitivity_squared
    if n_rounds == 1000:
        assert ToeplitzFactorization.eq8_bound(1000) == pytest.approx(3.128, abs=5e-4)


def test_toeplitz_is_square_root():
    C = get("toeplitz", 100).C
    np.testing.assert_allclose(C @ C, np.tri(100), atol=1e-12)


# ---------------------------------------------------------------- optimal, BLT


@pytest.mark.parametrize("n_rounds, target", [(100, 4.998), (1000, 8.694)])
def test_optimal_within_0_1_percent(n_rounds, target):
    f = get("optimal", n_rounds)
    assert abs(f.mean_squared_error - target) <= 1e-3 * target
    # certified: the duality gap brackets the optimum
    assert f.dual_bound_ <= f.frobenius_B_squared <= f.dual_bound_ * (1 + 1e-4)
    assert f.sensitivity_squared == pytest.approx(1.0, abs=1e-9)
    for other in ("tree", "honaker", "toeplitz", "blt", "independent"):
        assert f.mean_squared_error <= get(other, n_rounds).mean_squared_error


def test_fresh_optimizations_are_optimal_and_match_the_cache():
    # both optimizations run here, without the cache, in every test run
    opt = OptimalFactorization(100, cache=False)
    blt = BLTFactorization(100, cache=False)
    assert abs(opt.mean_squared_error - 4.998) <= 1e-3 * 4.998
    assert opt.dual_bound_ <= opt.frobenius_B_squared <= opt.dual_bound_ * (1 + 1e-4)
    assert 1.0 <= blt.mean_squared_error / opt.mean_squared_error <= 1.1
    # the factors the other tests read from the on-disk cache are these
    for fresh in (opt, blt):
        cached = get(fresh.name, 100)
        assert cached.mean_squared_error == pytest.approx(
            fresh.mean_squared_error, rel=1e-6
        ), "stale on-disk cache: clear $SKFEDPRIV_CACHE or ~/.cache/skfedpriv"


@pytest.mark.parametrize("n_rounds", [100, 1000])
def test_blt_within_1_1_of_optimal(n_rounds):
    blt, opt = get("blt", n_rounds), get("optimal", n_rounds)
    ratio = blt.mean_squared_error / opt.mean_squared_error
    assert 1.0 <= ratio <= 1.1
    assert blt.mean_squared_error < get("toeplitz", n_rounds).mean_squared_error


def test_blt_explicit_parameters():
    theta, omega = np.array([0.9, 0.5]), np.array([0.2, 0.1])
    f = BLTFactorization(30, theta=theta, omega=omega)
    k = np.arange(1, 30)
    c = np.r_[1.0, [np.sum(omega * theta ** (j - 1)) for j in k]]
    np.testing.assert_allclose(f.C[:, 0], c, rtol=1e-12)
    np.testing.assert_allclose(f.C @ np.linalg.inv(f.C), np.eye(30), atol=1e-12)
    np.testing.assert_allclose(f.B, np.tri(30) @ np.linalg.inv(f.C), atol=1e-10)
    with pytest.raises(ValueError):
        BLTFactorization(30, theta=[1.2], omega=[0.1])
    with pytest.raises(ValueError):
        BLTFactorization(30, theta=[0.5])


# ---------------------------------------------------------------- streaming


@pytest.mark.parametrize("n_rounds", [7, 64, 100])
@pytest.mark.parametrize("name", NAMES)
def test_stream_reproduces_B_on_one_hot(name, n_rounds):
    f = get(name, n_rounds)
    B = f.B
    source = OneHot(f.n_noise)
    stream = stream_from_source(f, source, 1.0, (f.n_noise,))
    total = np.zeros(f.n_noise)
    for r in range(n_rounds):
        total = total + stream.next()
        np.testing.assert_allclose(total, B[r], atol=1e-10)
    assert source.count == f.n_noise
    with pytest.raises(HorizonExceededError):
        stream.next()


@pytest.mark.parametrize("name", NAMES)
def test_stream_variance_and_vectorized_shape(name):
    f = get(name, 16)
    sigma = 0.7
    stream = f.noise_stream(np.random.default_rng(0), sigma, (400, 100))
    prefix = np.cumsum([stream.next() for _ in range(16)], axis=0)
    assert prefix.shape == (16, 400, 100)
    expected = sigma**2 * np.sum(f.B**2, axis=1)
    empirical = prefix.reshape(16, -1).var(axis=1)
    np.testing.assert_allclose(empirical, expected, rtol=0.05)
    # reproducible from the seed
    again = f.noise_stream(np.random.default_rng(0), sigma, (400, 100)).next()
    np.testing.assert_array_equal(again, prefix[0])


@pytest.mark.parametrize("name", NAMES)
def test_stream_past_horizon_changes_nothing(name):
    f = get(name, 7)
    stream = f.noise_stream(np.random.default_rng(1), 1.0, (3,))
    for _ in range(7):
        stream.next()
    before = pickle.dumps(stream)
    with pytest.raises(HorizonExceededError, match="n_rounds=7"):
        stream.next()
    assert pickle.dumps(stream) == before
    assert stream.round_ == 7


def test_horizon_error_is_a_budget_error():
    from skfedpriv.privacy import PrivacyBudgetError

    assert issubclass(HorizonExceededError, PrivacyBudgetError)
    assert issubclass(HorizonExceededError, RuntimeError)


def test_tree_stream_uses_the_tree_aggregator():
    stream = get("honaker", 10).noise_stream(0, 1.0, (2,))
    assert isinstance(stream._tree, TreeAggregator)


def test_blt_stream_state_is_buffers():
    f = get("blt", 100)
    stream = f.noise_stream(0, 1.0, (5, 3))
    stream.next()
    assert stream._buffers.shape == (f.n_buffers, 5, 3)


# ---------------------------------------------------------------- TreeAggregator


@pytest.mark.parametrize("estimator", ["plain", "honaker"])
@pytest.mark.parametrize("horizon", [1, 7, 16, 37])
def test_tree_aggregator_exact_without_noise(estimator, horizon):
    rng = np.random.default_rng(2)
    xs = rng.normal(size=(horizon, 3, 4, 2))
    tree = TreeAggregator(horizon, (3, 4, 2), noise=None, estimator=estimator)
    levels = math.floor(math.log2(horizon)) + 1
    assert tree.max_nodes_per_input == levels
    for t in range(1, horizon + 1):
        out = tree.add(xs[t - 1])
        np.testing.assert_allclose(out, xs[:t].sum(axis=0), atol=1e-12)
        assert tree.nodes_in_prefix(t) == bin(t).count("1") <= levels


@pytest.mark.parametrize("estimator", ["plain", "honaker"])
def test_tree_aggregator_noise_variance(estimator):
    horizon, scale = 13, 0.5
    shape = (200_000,)  # many independent seeds at once
    rng = np.random.default_rng(3)
    tree = TreeAggregator(
        horizon, shape, noise=functools.partial(rng.laplace, 0.0, scale), estimator=estimator
    )
    x = np.linspace(-1, 1, shape[0])
    var_noise = 2 * scale**2
    for t in range(1, horizon + 1):
        err = tree.add(x) - t * x
        expected = tree.prefix_variance(t) * var_noise
        assert err.var() == pytest.approx(expected, rel=0.03)
        assert abs(err.mean()) < 5 * np.sqrt(expected / shape[0])
        if estimator == "plain":
            assert tree.prefix_variance(t) == tree.nodes_in_prefix(t)
        else:
            assert tree.prefix_variance(t) <= tree.nodes_in_prefix(t)


def test_tree_aggregator_past_horizon_and_pickle():
    rng = np.random.default_rng(4)
    tree = TreeAggregator(5, (2, 3), noise=functools.partial(rng.normal, 0.0, 1.0), estimator="honaker")
    for _ in range(3):
        tree.add(np.ones((2, 3)))
    clone = pickle.loads(pickle.dumps(tree))
    np.testing.assert_array_equal(clone.add(1.0), tree.add(1.0))
    tree.add(1.0)
    before = pickle.dumps(tree)
    with pytest.raises(HorizonExceededError, match="horizon=5"):
        tree.add(1.0)
    assert pickle.dumps(tree) == before and tree.t_ == 5
    with pytest.raises(ValueError):
        tree.nodes_in_prefix(6)


def test_tree_aggregator_rejects_bad_input_without_change():
    tree = TreeAggregator(4, (2,))
    tree.add([1.0, 2.0])
    before = pickle.dumps(tree)
    with pytest.raises(ValueError):
        tree.add(np.ones(3))
    assert pickle.dumps(tree) == before
    with pytest.raises(ValueError):
        TreeAggregator(4, (2,), estimator="top-down")


def test_tree_noise_gets_post_order_sizes():
    sizes = []

    def noise(size):
        sizes.append(size)
        return np.zeros(size)

    tree = TreeAggregator(8, (2,), noise=noise, estimator="honaker")
    for _ in range(8):
        tree.add(0.0)
    assert [s[0] for s in sizes] == [1, 2, 1, 3, 1, 2, 1, 4]
    assert sum(s[0] for s in sizes) == get("honaker", 8).n_noise == 15


# ---------------------------------------------------------------- misc


def test_cache_location_and_fallback(tmp_path, monkeypatch):
    monkeypatch.setenv("SKFEDPRIV_CACHE", str(tmp_path / "c"))
    a = OptimalFactorization(20)
    assert os.listdir(tmp_path / "c")
    b = OptimalFactorization(20)
    np.testing.assert_array_equal(a.C, b.C)
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("SKFEDPRIV_CACHE", str(blocked / "sub"))
    c = OptimalFactorization(20)  # not writable: computes without cache
    np.testing.assert_allclose(c.C, a.C)
    monkeypatch.setenv("SKFEDPRIV_CACHE", "")
    assert BLTFactorization(20).mean_squared_error > 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown factorization"):
        make_factorization("fft", 10)
    for bad in (0, -3):
        with pytest.raises(ValueError):
            make_factorization("tree", bad)
    with pytest.raises(TypeError):
        make_factorization("tree", 2.5)
    with pytest.raises(ValueError):
        get("tree", 4).noise_stream(0, -1.0)


@pytest.mark.parametrize("module", [_factorizations, _tree])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_optimal_refuses_horizons_past_its_memory_cliff():
    # R x R dense matrices and O(R^3) per iteration: refused before any work
    # (this returns at once instead of allocating), with a pointer to BLT
    with pytest.raises(ValueError, match="BLTFactorization"):
        OptimalFactorization(OptimalFactorization.max_rounds + 1, cache=False)
