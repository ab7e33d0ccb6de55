"""Tests for skfedpriv.privacy._mechanisms: generator handling and noise."""

import numpy as np
import pytest
from scipy import stats

from skfedpriv.privacy import (
    as_generator,
    gaussian_noise,
    gaussian_sigma,
    laplace_noise,
    laplace_scale,
    symmetric_gaussian_noise,
)


# --------------------------------------------------------------------------
# as_generator
# --------------------------------------------------------------------------


def test_as_generator_none_draws_fresh_entropy():
    a, b = as_generator(None), as_generator(None)
    assert isinstance(a, np.random.Generator)
    assert a is not b
    assert not np.array_equal(a.normal(size=8), b.normal(size=8))


def test_as_generator_int_is_reproducible():
    for seed in (0, 42, np.int64(7), 2**40):
        x = as_generator(seed).normal(size=5)
        y = as_generator(seed).normal(size=5)
        assert np.array_equal(x, y)
    assert not np.array_equal(as_generator(0).normal(size=5), as_generator(1).normal(size=5))


def test_as_generator_passes_generator_through():
    rng = np.random.default_rng(3)
    assert as_generator(rng) is rng


def test_as_generator_converts_random_state():
    rs1, rs2 = np.random.RandomState(0), np.random.RandomState(0)
    g1, g2 = as_generator(rs1), as_generator(rs2)
    assert isinstance(g1, np.random.Generator)
    assert np.array_equal(g1.normal(size=5), g2.normal(size=5))
    # The RandomState was advanced, so a second conversion differs.
    assert not np.array_equal(as_generator(rs1).normal(size=5),
                              as_generator(np.random.RandomState(0)).normal(size=5))


@pytest.mark.parametrize("bad", [1.0, "0", True, np.bool_(False), [1, 2], object()])
def test_as_generator_rejects_other_types(bad):
    with pytest.raises(TypeError, match="random_state"):
        as_generator(bad)


def test_as_generator_rejects_negative_seed():
    with pytest.raises(ValueError):
        as_generator(-1)


# --------------------------------------------------------------------------
# Laplace / Gaussian noise
# --------------------------------------------------------------------------


def test_laplace_noise_has_calibrated_scale():
    b = laplace_scale(0.5, 1.5)  # 3.0
    x = laplace_noise(b, size=400_000, random_state=0)
    assert x.shape == (400_000,)
    assert np.std(x) == pytest.approx(np.sqrt(2) * b, rel=0.01)
    assert np.mean(np.abs(x)) == pytest.approx(b, rel=0.01)  # E|X| = b
    assert abs(np.mean(x)) < 0.03
    assert stats.kstest(x[:20_000], stats.laplace(scale=b).cdf).pvalue > 1e-3


def test_gaussian_noise_has_calibrated_scale():
    sigma = gaussian_sigma(1.0, 1e-5, 2.0)
    x = gaussian_noise(sigma, size=(200_000, 2), random_state=1)
    assert x.shape == (200_000, 2)
    assert np.std(x) == pytest.approx(sigma, rel=0.01)
    assert abs(np.mean(x)) < 0.05
    assert stats.kstest(x[:20_000, 0], stats.norm(scale=sigma).cdf).pvalue > 1e-3


def test_noise_broadcasts_array_scale():
    scales = np.array([0.5, 1.0, 4.0])
    x = gaussian_noise(scales, size=(100_000, 3), random_state=2)
    np.testing.assert_allclose(x.std(axis=0), scales, rtol=0.02)
    y = laplace_noise(scales, size=(100_000, 3), random_state=2)
    np.testing.assert_allclose(y.std(axis=0), np.sqrt(2) * scales, rtol=0.02)


def test_noise_reproducibility_and_generator_use():
    assert np.array_equal(laplace_noise(1.0, 10, random_state=5),
                          laplace_noise(1.0, 10, random_state=5))
    rng = np.random.default_rng(5)
    first = gaussian_noise(1.0, 10, random_state=rng)
    second = gaussian_noise(1.0, 10, random_state=rng)
    assert not np.array_equal(first, second)  # the passed Generator advances
    assert not np.array_equal(gaussian_noise(1.0, 10), gaussian_noise(1.0, 10))
    assert isinstance(gaussian_noise(1.0, random_state=0), float)
    assert np.array_equal(gaussian_noise(0.0, 4, random_state=0), np.zeros(4))


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), [1.0, -0.1]])
def test_noise_rejects_bad_scale(bad):
    with pytest.raises(ValueError):
        laplace_noise(bad, 3, random_state=0)
    with pytest.raises(ValueError):
        gaussian_noise(bad, 3, random_state=0)


def test_noise_rejects_non_real_scale():
    with pytest.raises(TypeError):
        gaussian_noise(True, 3)
    with pytest.raises(TypeError):
        laplace_noise("1", 3)


# --------------------------------------------------------------------------
# symmetric Gaussian noise
# --------------------------------------------------------------------------


def test_symmetric_noise_is_symmetric_with_right_variance():
    sigma, d = 2.5, 1200
    E = symmetric_gaussian_noise(d, sigma, random_state=0)
    assert E.shape == (d, d)
    assert np.array_equal(E, E.T)
    diag = np.diag(E)
    off = E[np.triu_indices(d, k=1)]
    # Diagonal entries are N(0, σ²) — not 2σ² as with Z + Zᵀ — and so are the
    # off-diagonal ones.
    assert np.var(diag) == pytest.approx(sigma**2, rel=0.12)
    assert np.var(off) == pytest.approx(sigma**2, rel=0.01)
    assert abs(off.mean()) < 0.02
    # Distinct upper-triangular entries are uncorrelated.
    upper = E[:-1, 1:][np.triu_indices(d - 1, k=1)]
    right = E[:-1, :-1][np.triu_indices(d - 1, k=1)]
    assert abs(np.corrcoef(upper, right)[0, 1]) < 0.01


def test_symmetric_noise_small_and_reproducible():
    E = symmetric_gaussian_noise(1, 1.0, random_state=3)
    assert E.shape == (1, 1)
    assert np.array_equal(symmetric_gaussian_noise(4, 1.0, random_state=3),
                          symmetric_gaussian_noise(4, 1.0, random_state=3))
    stack = np.stack([symmetric_gaussian_noise(3, 1.0, random_state=s) for s in range(4000)])
    np.testing.assert_allclose(stack.var(axis=0), np.ones((3, 3)), rtol=0.1)


@pytest.mark.parametrize("d", [0, -2, 2.0, True])
def test_symmetric_noise_rejects_bad_dimension(d):
    with pytest.raises(ValueError):
        symmetric_gaussian_noise(d, 1.0)


def test_symmetric_noise_rejects_bad_sigma():
    with pytest.raises(ValueError):
        symmetric_gaussian_noise(3, -1.0)
    with pytest.raises(ValueError):
        symmetric_gaussian_noise(3, [1.0, 2.0])


def test_seeded_noise_warning_points_at_the_users_call():
    import warnings

    from skfedpriv import DWDClassifier
    from skfedpriv.privacy import SeededNoiseWarning

    X = np.random.default_rng(0).normal(size=(40, 2))
    y = (X[:, 0] > 0).astype(int)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DWDClassifier(mechanism="laplace", clip_norm=3.0, classes=[0, 1],
                      random_state=0).fit(X, y)
    seeded = [w for w in caught if issubclass(w.category, SeededNoiseWarning)]
    assert len(seeded) == 1
    assert seeded[0].filename == __file__


def test_seeded_noise_warning_points_at_the_users_pipeline_call():
    import warnings

    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    from skfedpriv import DWDClassifier
    from skfedpriv.privacy import SeededNoiseWarning

    X = np.random.default_rng(0).normal(size=(40, 2))
    y = (X[:, 0] > 0).astype(int)
    pipe = make_pipeline(FunctionTransformer(), DWDClassifier(
        mechanism="laplace", clip_norm=3.0, classes=[0, 1], random_state=0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipe.fit(X, y)
    seeded = [w for w in caught if issubclass(w.category, SeededNoiseWarning)]
    assert [w.filename for w in seeded] == [__file__]
