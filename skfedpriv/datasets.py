"""Data for examples, tests and benchmarks: paper simulations and real data
that ships offline, split into sites."""

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.utils import check_random_state


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
