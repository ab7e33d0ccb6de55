"""Noise streams on chosen draws, for tests (production streams draw from a generator only)."""

from skfedpriv.privacy._horizon import _as_shape
from skfedpriv.privacy._noise_stream import _ScaledSource


def stream_from_source(factorization, source, sigma=1.0, shape=()):
    """``factorization.noise_stream(rng, sigma, shape)`` with ``source(size)``
    in place of ``rng.standard_normal(size)`` as the draws ``z / sigma``
    (e.g. one-hot draws, to read ``B`` off the stream); ``size`` is
    ``(k,) + shape``, ``k`` the new columns of ``B`` a round uses."""
    return factorization._make_stream(_ScaledSource(source, sigma), _as_shape(shape))
