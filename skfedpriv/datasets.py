"""Data for examples, tests and benchmarks: paper simulations and real data
that ships offline, split into sites."""

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.utils import check_random_state

from ._losses import gendwd_loss


def _check_range(name, value):
    low, high = (float(v) for v in value)
    if not (np.isfinite(low) and np.isfinite(high) and low <= high):
        raise ValueError(f"{name} must be a finite (low, high) pair, got {value!r}.")
    return low, high


def make_federated_gaussians(
    n_sites=10,
    n_batches=100,
    n_per_batch=10,
    n_features=50,
    mu=0.2,
    sigma=1.0,
    mu_range=None,
    sigma_range=None,
    ratio=1.0,
    random_state=None,
):
    """The two-Gaussian simulation of the genDWD paper (section 6).

    Positive rows are ``N(μ 1_p, σ² I_p)``, negative rows
    ``N(-μ 1_p, σ² I_p)``. ``μ`` and ``σ`` are the same at every site, or,
    when ``mu_range``/``sigma_range`` are given, drawn once per site from
    ``U(low, high)`` (the paper's Table 3). Each site receives
    ``n_per_batch`` rows in each of ``n_batches`` batches; a row is positive
    with probability ``ratio / (1 + ratio)``.

    Parameters
    ----------
    n_sites : int, default=10
        M, the number of sites.
    n_batches : int, default=100
        b, the number of stream batches.
    n_per_batch : int, default=10
        Rows per site per batch.
    n_features : int, default=50
        p.
    mu, sigma : float, default=0.2, 1.0
        Class mean offset and noise level shared by all sites.
    mu_range, sigma_range : (float, float) or None, default=None
        Draw μ (σ) per site from ``U(low, high)`` instead.
    ratio : float, default=1.0
        Positive-to-negative class ratio (``4.0`` is the paper's 4:1).
    random_state : int, RandomState or None, default=None

    Returns
    -------
    X : ndarray of shape (n_sites * n_batches * n_per_batch, n_features)
    y : ndarray of {-1, 1}
    sample_group : ndarray of int
        Site of each row.
    batch : ndarray of int
        Stream batch of each row; rows are ordered by batch.

    References
    ----------
    .. [1] Guo et al. (2025), section 6 and Tables 1-3.
    """
    rng = check_random_state(random_state)
    if ratio <= 0 or not np.isfinite(ratio):
        raise ValueError(f"ratio must be finite and > 0, got {ratio!r}.")
    site_mu = (
        rng.uniform(*_check_range("mu_range", mu_range), size=n_sites)
        if mu_range is not None
        else np.full(n_sites, float(mu))
    )
    site_sigma = (
        rng.uniform(*_check_range("sigma_range", sigma_range), size=n_sites)
        if sigma_range is not None
        else np.full(n_sites, float(sigma))
    )
    n = n_sites * n_batches * n_per_batch
    batch = np.repeat(np.arange(n_batches), n_sites * n_per_batch)
    sample_group = np.tile(np.repeat(np.arange(n_sites), n_per_batch), n_batches)
    y = np.where(rng.uniform(size=n) < ratio / (1.0 + ratio), 1, -1)
    noise = rng.standard_normal((n, n_features))
    X = y[:, None] * site_mu[sample_group, None] + site_sigma[sample_group, None] * noise
    return X, y, sample_group, batch


def gaussian_bayes_accuracy(n_features=50, mu=0.2, sigma=1.0, ratio=1.0):
    """Bayes accuracy of :func:`make_federated_gaussians` with fixed μ, σ.

    The Bayes rule thresholds ``s = 1ᵀx`` at ``σ² ln(π₋/π₊) / (2μ)``;
    ``s`` is ``N(±μ p, σ² p)`` given the class.
    """
    from scipy.stats import norm

    pos = ratio / (1.0 + ratio)
    neg = 1.0 - pos
    threshold = sigma**2 * np.log(neg / pos) / (2.0 * mu)
    scale = sigma * np.sqrt(n_features)
    mean = mu * n_features
    return pos * norm.sf((threshold - mean) / scale) + neg * norm.cdf(
        (threshold + mean) / scale
    )


def _expected_gendwd(mean, scale, q, nodes=np.polynomial.legendre.leggauss(256)):
    """``E V_q(mean + scale Z)`` for ``Z ~ N(0, 1)``: the linear part left of
    the kink in closed form, the smooth power part right of it by
    Gauss-Legendre quadrature over ``z`` in ``[t, 12]`` (``t`` the kink)."""
    from scipy.stats import norm

    t = (q / (q + 1.0) - mean) / scale
    # E[(1 - mean - scale Z) 1{Z <= t}]
    left = (1.0 - mean) * norm.cdf(t) + scale * norm.pdf(t)
    low, high = max(t, -12.0), 12.0
    if low >= high:
        return left
    z = low + (high - low) * (nodes[0] + 1.0) / 2.0
    right = (high - low) / 2.0 * nodes[1] @ (gendwd_loss(mean + scale * z, q) * norm.pdf(z))
    return left + right


def gaussian_gendwd_target(n_features=50, mu=0.2, sigma=1.0, ratio=1.0, *, q=1.0, alpha=1e-3):
    """The population genDWD minimizer of :func:`make_federated_gaussians`.

    The target of :class:`~skfedpriv.DWDClassifier`'s intervals (``fit``
    with ``inference=True``) on that simulation with fixed μ, σ: the
    minimizer of ``E V_q(y (x̄ᵀθ)) + (alpha/2) ‖β‖²`` over the population,
    at the same ``alpha``. By symmetry every coefficient is the same ``c``
    and the score ``b + c 1ᵀx`` is ``N(b ± c μ p, c² σ² p)`` given the class,
    so the objective is two one-dimensional Gaussian expectations of
    ``V_q``, minimized over ``(b, c)``.

    Parameters
    ----------
    n_features, mu, sigma, ratio : as for :func:`make_federated_gaussians`
    q : float, default=1.0
    alpha : float, default=1e-3

    Returns
    -------
    intercept : float
    coef : ndarray of shape (n_features,)
        The population minimizer, for labels ``{-1, 1}`` (the positive class
        is 1).
    """
    from scipy.optimize import minimize

    p = int(n_features)
    positive = ratio / (1.0 + ratio)

    def objective(params):
        b, c = params
        spread = abs(c) * sigma * np.sqrt(p)
        centre = c * mu * p
        if spread == 0.0:
            spread = np.finfo(float).tiny
        return (positive * _expected_gendwd(centre + b, spread, q)
                + (1.0 - positive) * _expected_gendwd(centre - b, spread, q)
                + 0.5 * alpha * p * c * c)

    start = np.array([0.0, 1.0 / (mu * p + sigma * np.sqrt(p))])
    result = minimize(objective, start, method="Nelder-Mead",
                      options=dict(xatol=1e-10, fatol=1e-15, maxiter=4000))
    b, c = result.x
    return float(b), np.full(p, float(c))


def load_breast_cancer_sites(n_sites=4, random_state=0):
    """scikit-learn's breast cancer data split into sites that are not IID.

    Rows are ordered by their "mean radius" feature plus noise and cut into
    ``n_sites`` contiguous blocks, so sites differ in tumour size and in
    class balance (as hospitals with different referral patterns would).
    Within a site, rows are shuffled.

    Parameters
    ----------
    n_sites : int, default=4
    random_state : int, RandomState or None, default=0

    Returns
    -------
    X : ndarray of shape (569, 30)
    y : ndarray of shape (569,)
        0 = malignant, 1 = benign.
    sample_group : ndarray of shape (569,)
        Site labels ``"site-0"``, ``"site-1"``, ...
    """
    rng = check_random_state(random_state)
    X, y = load_breast_cancer(return_X_y=True)
    radius = X[:, 0]
    key = radius + rng.normal(scale=radius.std(), size=radius.shape)
    order = np.argsort(key, kind="stable")
    sites = np.empty(len(y), dtype=object)
    for site, block in enumerate(np.array_split(order, n_sites)):
        sites[block] = f"site-{site}"
    shuffle = rng.permutation(len(y))
    return X[shuffle], y[shuffle], sites[shuffle].astype(str)
