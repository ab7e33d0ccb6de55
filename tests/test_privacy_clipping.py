"""Tests for skfedpriv.privacy._clipping."""

import numpy as np
import pytest

from skfedpriv.privacy import clip_rows, clip_vectors


def _rows(seed=0, n=500, d=7):
    rng = np.random.default_rng(seed)
    # Norms spread over several orders of magnitude, plus zero rows.
    X = rng.normal(size=(n, d)) * np.exp(rng.uniform(-4, 4, size=(n, 1)))
    X[:5] = 0.0
    return X


@pytest.mark.parametrize("ord", [2, 1])
@pytest.mark.parametrize("max_norm", [0.1, 1.0, 13.0])
def test_clip_rows_bounds_norms_and_keeps_inside_rows(ord, max_norm):
    X = _rows()
    X_before = X.copy()
    out = clip_rows(X, max_norm, ord=ord)
    assert out is not X
    assert np.array_equal(X, X_before)  # input untouched
    norms_in = np.linalg.norm(X, ord=ord, axis=1)
    norms_out = np.linalg.norm(out, ord=ord, axis=1)
    assert np.all(norms_out <= max_norm)
    inside = norms_in <= max_norm
    assert inside.any() and (~inside).any()
    # Rows inside the ball (and zero rows) are bit-for-bit unchanged.
    assert np.array_equal(out[inside], X[inside])
    assert np.array_equal(out[:5], np.zeros((5, X.shape[1])))
    # Clipped rows land on the sphere ...
    np.testing.assert_allclose(norms_out[~inside], max_norm, rtol=1e-12)
    # ... in the same direction: out_i = c_i x_i with c_i in (0, 1).
    ratio = out[~inside] / X[~inside]
    finite = np.isfinite(ratio)
    c = np.nanmax(np.where(finite, ratio, np.nan), axis=1, keepdims=True)
    np.testing.assert_allclose(np.where(finite, ratio, c), np.broadcast_to(c, ratio.shape),
                               rtol=1e-12)
    assert np.all((c > 0) & (c < 1))


def test_clip_rows_examples():
    out = clip_rows([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]], 1.0)
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]], rtol=1e-13)
    np.testing.assert_allclose(clip_rows([[3.0, -1.0]], 2.0, ord=1), [[1.5, -0.5]])
    # Integer input becomes float.
    out = clip_rows(np.array([[6, 8]]), 5.0)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [[3.0, 4.0]])


def test_clip_vectors_per_example_gradients_3d():
    rng = np.random.default_rng(1)
    G = rng.normal(size=(300, 4, 3)) * np.exp(rng.uniform(-3, 3, size=(300, 1, 1)))
    C = 2.0
    out = clip_vectors(G, C)
    assert out.shape == G.shape
    fro_in = np.sqrt((G**2).sum(axis=(1, 2)))
    fro_out = np.sqrt((out**2).sum(axis=(1, 2)))
    assert np.all(fro_out <= C * (1 + 1e-15))
    # Reference computed one example at a time.
    ref = np.stack([g * min(1.0, C / np.linalg.norm(g)) for g in G])
    np.testing.assert_allclose(out, ref, rtol=1e-13)
    inside = fro_in <= C
    assert np.array_equal(out[inside], G[inside])
    # L1 over all trailing axes.
    out1 = clip_vectors(G, C, ord=1)
    assert np.all(np.abs(out1).sum(axis=(1, 2)) <= C)
    ref1 = np.stack([g * min(1.0, C / np.abs(g).sum()) for g in G])
    np.testing.assert_allclose(out1, ref1, rtol=1e-13)


def test_clip_vectors_2d_equals_clip_rows_and_1d_is_scalars():
    X = _rows(2)
    assert np.array_equal(clip_vectors(X, 0.5), clip_rows(X, 0.5))
    np.testing.assert_allclose(clip_vectors([3.0, -0.2, -5.0], 1.0), [1.0, -0.2, -1.0])


def test_clip_norm_bound_is_exact_in_floating_point():
    # Many random rows: the computed norm never exceeds the bound, even by an ulp.
    rng = np.random.default_rng(3)
    X = rng.normal(size=(20_000, 50)) * 10
    for C in (0.1, 1.0, 3.3333333333333335):
        assert np.all(np.linalg.norm(clip_rows(X, C), axis=1) <= C)
        assert np.all(np.abs(clip_rows(X, C, ord=1)).sum(axis=1) <= C)
    X32 = X.astype(np.float32)
    out32 = clip_rows(X32, 1.0)
    assert out32.dtype == np.float32
    assert np.all(np.linalg.norm(out32, axis=1) <= np.float32(1.0))


def test_clip_huge_values_without_overflow():
    X = np.array([[1e200, 1e200], [1e-200, 0.0]])
    out = clip_rows(X, 1.0)
    np.testing.assert_allclose(out[0], [np.sqrt(0.5), np.sqrt(0.5)], rtol=1e-12)
    assert np.array_equal(out[1], X[1])


@pytest.mark.parametrize("max_norm, exc", [
    (0.0, ValueError), (-1.0, ValueError), (float("nan"), ValueError),
    (float("inf"), ValueError), (True, TypeError), ("1", TypeError), (None, TypeError),
])
def test_clip_rejects_bad_max_norm(max_norm, exc):
    with pytest.raises(exc, match="max_norm"):
        clip_rows(np.ones((2, 2)), max_norm)


def test_clip_rejects_bad_inputs():
    with pytest.raises(ValueError, match="2-D"):
        clip_rows(np.ones(3), 1.0)
    with pytest.raises(ValueError, match="2-D"):
        clip_rows(np.ones((2, 2, 2)), 1.0)
    with pytest.raises(ValueError, match="ord"):
        clip_rows(np.ones((2, 2)), 1.0, ord=np.inf)
    with pytest.raises(ValueError, match="NaN"):
        clip_rows(np.array([[1.0, np.nan]]), 1.0)
    with pytest.raises(ValueError, match="NaN"):
        clip_vectors(np.array([[np.inf, 0.0]]), 1.0)
    with pytest.raises(ValueError):
        clip_vectors(np.float64(3.0), 1.0)
    with pytest.raises(TypeError):
        clip_rows(np.array([["a", "b"]]), 1.0)
