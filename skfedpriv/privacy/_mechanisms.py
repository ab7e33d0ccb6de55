"""Additive noise mechanisms: Laplace, Gaussian, symmetric-matrix Gaussian.

All noise is drawn, vectorized, from a :class:`numpy.random.Generator`
obtained with :func:`as_generator` from the caller's ``random_state``. The
functions here only draw noise of a given scale; the scale comes from the
calibration functions of :mod:`skfedpriv.privacy._calibration`
(:func:`laplace_scale`, :func:`gaussian_sigma`) and the sensitivity from
clipping (:mod:`skfedpriv.privacy._clipping`).

Notes
-----
Noise is drawn in IEEE floating point with numpy's samplers. This is the
usual practice in machine-learning DP libraries, but floating-point sampling
is known not to be exactly DP (Mironov, "On Significance of the Least
Significant Bits for Differential Privacy", CCS 2012); the guarantees stated
in this package are those of the ideal real-valued mechanisms.
"""

import numbers

import numpy as np

__all__ = [
    "SeededNoiseWarning",
    "as_generator",
    "gaussian_noise",
    "laplace_noise",
    "symmetric_gaussian_noise",
    "warn_if_seeded",
]


def as_generator(random_state=None):
    """Turn a ``random_state`` argument into a :class:`numpy.random.Generator`.

    The :class:`~numpy.random.Generator` counterpart of
    :func:`sklearn.utils.check_random_state`.

    Parameters
    ----------
    random_state : None, int, numpy.random.Generator or numpy.random.RandomState
        * ``None``: a new Generator seeded from fresh OS entropy
          (``np.random.default_rng()``), so repeated calls give different
          noise. This is what private releases should use.
        * ``int`` (non-negative, not a bool): ``np.random.default_rng(seed)``,
          reproducible.
        * ``Generator``: returned unchanged (draws advance its state).
        * ``RandomState``: a new Generator seeded with 128 bits drawn from the
          RandomState (which advances it), so that a seeded RandomState gives
          reproducible noise.

    Returns
    -------
    rng : numpy.random.Generator

    Raises
    ------
    TypeError
        For any other type (including bool, float and str).

    References
    ----------
    .. [1] NumPy Enhancement Proposal 19, "Random number generator policy",
       2019 (Generator vs. legacy RandomState).

    Examples
    --------
    >>> from skfedpriv.privacy import as_generator
    >>> a = as_generator(0).normal(size=3)
    >>> b = as_generator(0).normal(size=3)
    >>> bool((a == b).all())
    True
    """
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        seed = random_state.randint(0, 2**32, size=4, dtype=np.uint64)
        return np.random.default_rng([int(s) for s in seed])
    if isinstance(random_state, numbers.Integral) and not isinstance(
        random_state, (bool, np.bool_)
    ):
        if random_state < 0:
            raise ValueError(
                f"random_state must be a non-negative integer, got {random_state!r}."
            )
        return np.random.default_rng(int(random_state))
    raise TypeError(
        "random_state must be None, an int, a numpy.random.Generator or a "
        f"numpy.random.RandomState; got {random_state!r} of type "
        f"{type(random_state).__name__}."
    )


def _check_scale(scale, name):
    """Validate a noise scale: real, finite, >= 0 (scalar or array)."""
    if isinstance(scale, (bool, np.bool_)):
        raise TypeError(f"{name} must be a real number, got a bool.")
    arr = np.asarray(scale)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be real, got dtype {arr.dtype}.")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be finite and >= 0, got {scale!r}.")
    return arr if arr.ndim else float(arr)


def laplace_noise(scale, size=None, *, random_state=None):
    """Draw iid Laplace(0, b) noise.

    Parameters
    ----------
    scale : float or array-like
        Scale ``b >= 0`` (for ε-DP, ``b = Δ₁/ε``, see :func:`laplace_scale`).
        Arrays broadcast against ``size``. ``b = 0`` gives zeros.
    size : int or tuple of int, optional
        Output shape. ``None`` returns a float if ``scale`` is scalar.
    random_state : None, int, Generator or RandomState, default=None
        See :func:`as_generator`.

    Returns
    -------
    noise : ndarray or float
        Each entry has density ``exp(-|x|/b) / (2b)``, standard deviation
        ``√2 b``.

    See Also
    --------
    laplace_scale : the scale for ε-DP, with the Laplace mechanism's reference.

    Examples
    --------
    >>> from skfedpriv.privacy import laplace_noise, laplace_scale
    >>> noise = laplace_noise(laplace_scale(1.0, 1.0), size=(2, 3), random_state=0)
    >>> noise.shape
    (2, 3)
    """
    scale = _check_scale(scale, "scale")
    rng = as_generator(random_state)
    return rng.laplace(0.0, scale, size=size)


def gaussian_noise(sigma, size=None, *, random_state=None):
    """Draw iid N(0, σ²) noise.

    Parameters
    ----------
    sigma : float or array-like
        Standard deviation ``σ >= 0`` (see :func:`gaussian_sigma`). Arrays
        broadcast against ``size``. ``σ = 0`` gives zeros.
    size, random_state
        As in :func:`laplace_noise`.

    Returns
    -------
    noise : ndarray or float

    References
    ----------
    .. [1] C. Dwork and A. Roth, "The Algorithmic Foundations of Differential
       Privacy", 2014, Thm. A.1 (Gaussian mechanism).
    .. [2] B. Balle and Y.-X. Wang, "Improving the Gaussian Mechanism for
       Differential Privacy: Analytical Calibration and Optimal Denoising",
       ICML 2018, Theorem 8.

    Examples
    --------
    >>> from skfedpriv.privacy import gaussian_noise, gaussian_sigma
    >>> sigma = gaussian_sigma(1.0, 1e-5, sensitivity=0.5)
    >>> gaussian_noise(sigma, size=4, random_state=0).shape
    (4,)
    """
    sigma = _check_scale(sigma, "sigma")
    rng = as_generator(random_state)
    return rng.normal(0.0, sigma, size=size)


def symmetric_gaussian_noise(d, sigma, *, random_state=None):
    """Draw a symmetric d×d Gaussian noise matrix.

    The entries ``E[i, j]`` with ``i <= j`` (upper triangle including the
    diagonal) are iid N(0, σ²) and ``E[j, i] = E[i, j]``. Used to perturb a
    symmetric matrix such as a Hessian or curvature bound: if the upper
    triangle of the matrix, as a vector of ``d(d+1)/2`` entries, has L2
    sensitivity Δ, adding ``E`` with σ calibrated for Δ is the Gaussian
    mechanism on that vector (mirroring is post-processing).

    Parameters
    ----------
    d : int
        Matrix dimension, >= 1.
    sigma : float
        Standard deviation of each upper-triangular entry, finite and >= 0.
    random_state : None, int, Generator or RandomState, default=None
        See :func:`as_generator`.

    Returns
    -------
    noise : ndarray of shape (d, d)
        Symmetric: ``noise == noise.T`` exactly.

    References
    ----------
    .. [1] C. Dwork, K. Talwar, A. Thakurta and L. Zhang, "Analyze Gauss:
       Optimal Bounds for Privacy-Preserving Principal Component Analysis",
       STOC 2014, Algorithm 1 (symmetric Gaussian noise matrix).

    Examples
    --------
    >>> import numpy as np
    >>> from skfedpriv.privacy import symmetric_gaussian_noise
    >>> E = symmetric_gaussian_noise(3, 1.0, random_state=0)
    >>> bool(np.array_equal(E, E.T))
    True
    """
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, numbers.Integral) or d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}.")
    d = int(d)
    sigma = _check_scale(sigma, "sigma")
    if not isinstance(sigma, float):
        raise ValueError("sigma must be a scalar.")
    rng = as_generator(random_state)
    rows, cols = np.triu_indices(d)
    values = rng.normal(0.0, sigma, size=rows.size)
    noise = np.empty((d, d))
    noise[rows, cols] = values
    noise[cols, rows] = values
    return noise


class SeededNoiseWarning(UserWarning):
    """A private mechanism draws its noise from a fixed, reproducible seed.

    Anyone who knows the seed can regenerate the noise and subtract it from
    the release, which then carries no privacy at all.
    """


def warn_if_seeded(random_state, owner):
    """Warn when a private release would draw its noise from a fixed seed.

    Parameters
    ----------
    random_state : object
        The estimator's ``random_state`` hyperparameter.
    owner : str
        Who draws the noise (for the message).
    """
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        import warnings

        warnings.warn(
            f"{owner} draws its privacy noise from the fixed seed "
            f"random_state={int(random_state)}: whoever knows the seed can "
            "regenerate the noise and remove it, and the release is then not "
            "private. Use random_state=None (fresh OS entropy) for a real "
            "release; fixed seeds are for tests and reproducible experiments.",
            SeededNoiseWarning,
            stacklevel=_caller_stacklevel(),
        )


def _caller_stacklevel():
    """The ``stacklevel`` of the first frame outside this package and
    scikit-learn, so a warning points at the user's call (``fit`` in a
    script, ``pipe.fit``, ``search.fit``), not at library internals."""
    import os
    import sys

    import sklearn

    libraries = tuple(
        os.path.dirname(os.path.abspath(module.__file__)) + os.sep
        for module in (sys.modules[__name__.split(".")[0]], sklearn)
    )
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(libraries):
        frame, level = frame.f_back, level + 1
    return level
