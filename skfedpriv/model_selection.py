"""Splitters that hold out whole sites, reading the sites the estimators read.

The estimators of this package take their sites as the ``sample_group`` fit
parameter. scikit-learn's group splitters take theirs as ``groups``, so a
search over sites needs the same labels twice. The splitters here read
``sample_group`` as well: with metadata routing on, one
``sample_group=sites`` reaches both the estimator and the splitter::

    import sklearn
    from sklearn.model_selection import GridSearchCV
    from skfedpriv.model_selection import SiteKFold

    with sklearn.config_context(enable_metadata_routing=True):
        GridSearchCV(estimator, grid, cv=SiteKFold(4)).fit(X, y, sample_group=sites)

Without routing, scikit-learn hands a splitter only ``groups``: pass the
sites as ``groups=`` to the search and as the estimator's ``sample_group``
(``dwdclassifier__sample_group=`` in a Pipeline), as with ``GroupKFold``.
"""

import numpy as np
from sklearn.model_selection import GroupKFold, LeaveOneGroupOut

__all__ = ["LeaveOneSiteOut", "SiteKFold"]


def _sites(groups, sample_group):
    """The site of each row, from ``sample_group`` or ``groups`` (one, or both equal)."""
    if groups is None:
        return sample_group
    if sample_group is not None and not np.array_equal(
        np.asarray(groups), np.asarray(sample_group)
    ):
        raise ValueError(
            "groups and sample_group name different sites for the same rows; pass the "
            "sites once, as sample_group."
        )
    return groups


def _require(sites):
    if sites is None:
        raise ValueError(
            "The sites of the rows are needed: pass sample_group=sites (with metadata "
            "routing on) or groups=sites."
        )
    return sites


class _SiteSplitter:
    """Read the sites from ``sample_group`` or ``groups`` and split on them."""

    # requested by default, like the estimators' fit parameter: a routed
    # search passes ``sample_group`` to the splitter without set_split_request
    __metadata_request__split = {"groups": True, "sample_group": True}

    def split(self, X, y=None, groups=None, sample_group=None):
        """Generate indices to split data into training and test sets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : array-like of shape (n_samples,), default=None
            Target labels.
        groups : array-like of shape (n_samples,), default=None
            The site of each row, as scikit-learn's group splitters take it.
        sample_group : array-like of shape (n_samples,), default=None
            The site of each row, as the estimators take it. If both are
            given they must be equal.

        Yields
        ------
        train : ndarray
            The training rows of this split.
        test : ndarray
            The test rows of this split: every row of the held-out sites.
        """
        return super().split(X, y, groups=_require(_sites(groups, sample_group)))

    def get_n_splits(self, X=None, y=None, groups=None, sample_group=None):
        """Return the number of splitting iterations.

        Parameters
        ----------
        X, y : object
            Ignored, present for API compatibility.
        groups, sample_group : array-like of shape (n_samples,), default=None
            The site of each row (see :meth:`split`).

        Returns
        -------
        n_splits : int
            The number of splits.
        """
        return super().get_n_splits(X, y, groups=_sites(groups, sample_group))


class SiteKFold(_SiteSplitter, GroupKFold):
    """K-fold over sites: each test fold holds every row of some sites.

    scikit-learn's :class:`~sklearn.model_selection.GroupKFold` with the
    sites read from ``sample_group`` (the estimators' fit parameter) as well
    as from ``groups``, so that with metadata routing on the sites are
    passed once (see :mod:`skfedpriv.model_selection`). The splits are
    GroupKFold's on the same sites.

    Parameters
    ----------
    n_splits : int, default=5
        Number of folds; at most the number of sites.
    shuffle : bool, default=False
        Whether to shuffle the sites before they are dealt into folds.
    random_state : int, RandomState instance or None, default=None
        Seed of the shuffle (``shuffle=True`` only).

    See Also
    --------
    LeaveOneSiteOut : One site per test fold.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedpriv.model_selection import SiteKFold
    >>> sites = np.array(["a", "a", "b", "b", "c", "c"])
    >>> X = np.zeros((6, 1))
    >>> sorted(test.tolist() for _, test in SiteKFold(3).split(X, sample_group=sites))
    [[0, 1], [2, 3], [4, 5]]
    """


class LeaveOneSiteOut(_SiteSplitter, LeaveOneGroupOut):
    """Hold out one site at a time.

    scikit-learn's :class:`~sklearn.model_selection.LeaveOneGroupOut` with
    the sites read from ``sample_group`` as well as from ``groups`` (see
    :class:`SiteKFold`).

    See Also
    --------
    SiteKFold : Several sites per test fold.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedpriv.model_selection import LeaveOneSiteOut
    >>> sites = np.array([0, 1, 0, 2])
    >>> [test.tolist() for _, test in LeaveOneSiteOut().split(np.zeros((4, 1)),
    ...                                                       sample_group=sites)]
    [[0, 2], [1], [3]]
    """
