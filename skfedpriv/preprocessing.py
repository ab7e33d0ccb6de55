"""Data-independent preprocessing for private pipelines.

A private estimator's guarantee covers what the estimator does with the rows
it is given. A transformer fitted on the raw rows before it (a
:class:`~sklearn.preprocessing.StandardScaler` reading means and variances,
a :class:`~sklearn.preprocessing.MinMaxScaler` reading minima and maxima)
publishes statistics of those rows through every later prediction, and no
estimator's guarantee covers them.

The transformers here never read the data: each row is mapped by a function
fixed by the hyperparameters alone, so the output row ``i`` depends on input
row ``i`` and nothing else. ``fit`` only validates the input and records
``n_features_in_`` (and ``feature_names_in_``); the transformers are
stateless (``requires_fit=False``). Replacing one input row replaces one
output row, so a :class:`~sklearn.pipeline.Pipeline` of these transformers
and a private estimator keeps the estimator's neighbouring relation and its
guarantee.

* :class:`RowNormClipper` scales each row into a norm ball.
* :class:`BoundedScaler` maps user-given per-feature bounds affinely onto
  ``[-1, 1]`` and clips values outside them.
"""


import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.utils.validation import validate_data

from ._param_validation import (
    InvalidParameterError,
    Interval,
    Registry,
    validate_parameters,
)
from .linear_model._base import _restore_feature_attributes_on_error
from .privacy._clipping import sparse_row_norms

__all__ = ["BoundedScaler", "RowNormClipper"]


def _l2_norms(X):
    # rescale by the row maximum so squares of huge entries cannot overflow
    peak = np.abs(X).max(axis=1, initial=0.0)
    safe = np.where(peak > 0, peak, 1.0)
    return peak * np.sqrt(np.einsum("ij,ij->i", X / safe[:, None], X / safe[:, None]))


_NORMS = Registry("norm", {
    "l2": _l2_norms,
    "l1": lambda X: np.abs(X).sum(axis=1),
    "max": lambda X: np.abs(X).max(axis=1, initial=0.0),
})


class _DataIndependentTransformer(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """``fit`` validates only; the map is fixed by the hyperparameters."""

    _parameter_constraints = {}
    #: sparse formats ``fit`` and ``transform`` take (False: dense only)
    _accept_sparse = False

    def _check_params(self, n_features):
        """Check the hyperparameters (declared constraints, then the rules
        that depend on the number of features); return what transform uses."""
        validate_parameters(
            self._parameter_constraints, self.get_params(deep=False), type(self).__name__
        )
        return self._settings(n_features)

    def _settings(self, n_features):
        raise NotImplementedError

    def fit(self, X, y=None):
        """Validate the hyperparameters and ``X``; record ``n_features_in_``.

        Nothing is computed from ``X``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Sparse input is taken where ``transform`` takes it.
        y : None
            Ignored.

        Returns
        -------
        self : object
        """
        with _restore_feature_attributes_on_error(self):
            X = validate_data(self, X, dtype=np.float64, accept_sparse=self._accept_sparse)
            self._check_input(X, self._check_params(X.shape[1]))
        return self

    def _check_input(self, X, settings):
        """Refuse an input the map cannot take (transformers override)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        tags.input_tags.sparse = bool(self._accept_sparse)
        return tags


class RowNormClipper(_DataIndependentTransformer):
    """Scale each row into the ball of radius ``max_norm``.

    Row ``x`` becomes ``x · min(1, max_norm / ‖x‖)``: rows inside the ball
    are unchanged, rows outside keep their direction and land on the sphere.
    The map of a row depends on that row and ``max_norm`` only; nothing is
    learned from the data.

    This bounds the norm of the features ``x``. An estimator with an
    intercept bounds the augmented row ``(1, x)``: :class:`~skfedpriv.DWDClassifier`'s
    ``clip_norm`` applies to ``‖(1, x)‖₂``, so with ``norm='l2'`` a
    ``clip_norm`` of ``sqrt(1 + max_norm²)`` or more leaves the clipped rows
    unchanged.

    Parameters
    ----------
    max_norm : float, default=1.0
        Radius of the ball, finite and > 0.
    norm : {'l2', 'l1', 'max'}, default='l2'
        Norm of each row: Euclidean, sum of absolute values, or largest
        absolute value.

    Attributes
    ----------
    n_features_in_ : int
        Number of features seen by ``fit`` (the only thing ``fit`` records,
        with the names below).
    feature_names_in_ : ndarray of shape (``n_features_in_``,)
        Defined when X has string feature names.

    See Also
    --------
    BoundedScaler : Per-feature bounds mapped onto ``[-1, 1]``.
    sklearn.preprocessing.Normalizer : Scales every row to norm one (also
        data-independent, but inflates small rows).
    skfedpriv.privacy.clip_rows : The function form of the L1/L2 clipping.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedpriv.preprocessing import RowNormClipper
    >>> X = np.array([[3.0, 4.0], [0.3, 0.4]])
    >>> RowNormClipper(max_norm=1.0).fit_transform(X)
    array([[0.6, 0.8],
           [0.3, 0.4]])
    >>> RowNormClipper(max_norm=1.0, norm="max").fit_transform(X)
    array([[0.75, 1.  ],
           [0.3 , 0.4 ]])
    """

    _accept_sparse = "csr"

    def __init__(self, max_norm=1.0, norm="l2"):
        self.max_norm = max_norm
        self.norm = norm

    _parameter_constraints = {
        "max_norm": [Interval(numbers.Real, 0, None, closed="neither")],
        "norm": [_NORMS],
    }

    def _settings(self, n_features):
        return float(self.max_norm)

    def transform(self, X):
        """Scale each row of ``X`` into the ball.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Finite values, of any norm; each row is mapped on its own.
            Sparse input is converted to CSR.

        Returns
        -------
        X_clipped : {ndarray, CSR matrix} of shape (n_samples, n_features)
            Every row has norm ``<= max_norm``; sparse if ``X`` is.
        """
        X = validate_data(self, X, reset=False, dtype=np.float64, copy=True,
                          accept_sparse=self._accept_sparse)
        max_norm = self._check_params(X.shape[1])
        if sp.issparse(X):
            X.sum_duplicates()  # X is a copy; its rows' norms need canonical rows
            norms = sparse_row_norms(X, self.norm)
            scale = np.where(norms > max_norm, max_norm / np.where(norms > 0, norms, 1.0), 1.0)
            X.data *= np.repeat(scale, np.diff(X.indptr))
            return X
        norms = _NORMS[self.norm](X)
        over = norms > max_norm
        X[over] *= (max_norm / norms[over])[:, None]
        return X



class BoundedScaler(_DataIndependentTransformer):
    """Map given per-feature bounds onto ``[-1, 1]``, clipping outside them.

    Feature ``j`` becomes ``clip(2 (x_j - lower_j) / (upper_j - lower_j) - 1,
    -1, 1)``. The bounds are hyperparameters (known ranges: ages in
    ``[0, 120]``, a sensor's range, a questionnaire's scale), never read
    from the data, so a row's image depends on that row alone. Unlike
    :class:`~sklearn.preprocessing.MinMaxScaler`, which reads each feature's
    minimum and maximum from the training rows, this keeps a downstream
    private estimator's guarantee.

    Every output row lies in ``[-1, 1]^p``, so its Euclidean norm is at most
    ``sqrt(p)`` and the augmented row ``(1, x)`` has norm at most
    ``sqrt(p + 1)``: a :class:`~skfedpriv.DWDClassifier` with
    ``clip_norm=sqrt(p + 1)`` never needs to shrink a row, and a smaller
    ``clip_norm`` trades clipping bias for less noise.

    Parameters
    ----------
    lower : float or array-like of shape (n_features,), default=-1.0
        Lower bound of each feature (a scalar applies to every feature);
        finite.
    upper : float or array-like of shape (n_features,), default=1.0
        Upper bound of each feature, finite and ``> lower``.
    clip : bool, default=True
        Clip the output to ``[-1, 1]``. Only ``clip=True`` bounds the
        output whatever the input; without it, values outside the bounds
        map outside ``[-1, 1]`` and a private estimator's own clipping is the
        only bound.

    Attributes
    ----------
    n_features_in_ : int
        Number of features seen by ``fit``; a scalar bound applies to each,
        an array bound must have this length.
    feature_names_in_ : ndarray of shape (``n_features_in_``,)
        Defined when X has string feature names; passed through by
        ``get_feature_names_out``.

    See Also
    --------
    RowNormClipper : Scales each row into a norm ball.
    sklearn.preprocessing.MinMaxScaler : Reads the bounds from the data (not
        covered by any privacy guarantee).

    Examples
    --------
    >>> import numpy as np
    >>> from skfedpriv.preprocessing import BoundedScaler
    >>> X = np.array([[30.0, 0.5], [120.0, 2.0], [-5.0, 1.0]])
    >>> scaler = BoundedScaler(lower=[0, 0], upper=[100, 1])
    >>> scaler.fit_transform(X)
    array([[-0.4,  0. ],
           [ 1. ,  1. ],
           [-1. ,  1. ]])

    In a private pipeline: pixel intensities of scikit-learn's digits lie
    in ``[0, 16]`` by construction of the data set, a public range.

    >>> from sklearn.datasets import load_digits
    >>> from sklearn.pipeline import make_pipeline
    >>> from skfedpriv import DWDClassifier
    >>> X, y = load_digits(n_class=2, return_X_y=True)    # 64 pixels, 0 vs 1
    >>> pipe = make_pipeline(
    ...     BoundedScaler(lower=0, upper=16),
    ...     DWDClassifier(mechanism="local-gaussian", epsilon=1.0,
    ...                   clip_norm=np.sqrt(64 + 1), classes=[0, 1],
    ...                   random_state=0))
    >>> round(pipe.fit(X, y).score(X, y), 2)
    1.0
    """

    _accept_sparse = ("csr", "csc")

    def __init__(self, lower=-1.0, upper=1.0, clip=True):
        self.lower = lower
        self.upper = upper
        self.clip = clip

    _parameter_constraints = {
        "lower": [Interval(numbers.Real, None, None), "array-like"],
        "upper": [Interval(numbers.Real, None, None), "array-like"],
        "clip": ["boolean"],
    }

    def _settings(self, n_features):
        """Validated ``(lower, width)`` broadcast to ``n_features``."""
        bounds = []
        for name in ("lower", "upper"):
            value = getattr(self, name)
            try:
                array = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                raise InvalidParameterError(
                    f"{name} must be a real number or an array of them, got {value!r}."
                ) from None
            if array.ndim > 1 or (array.ndim == 1 and array.shape[0] != n_features):
                raise InvalidParameterError(
                    f"{name} must be a scalar or have shape ({n_features},) (one "
                    f"bound per feature), got shape {array.shape}."
                )
            if not np.all(np.isfinite(array)):
                raise InvalidParameterError(f"{name} must be finite, got {value!r}.")
            bounds.append(np.broadcast_to(array, (n_features,)))
        lower, upper = bounds
        if not np.all(upper > lower):
            bad = np.flatnonzero(~(upper > lower))
            raise InvalidParameterError(
                f"upper must be > lower for every feature; not for feature(s) {bad.tolist()}."
            )
        return lower, upper - lower

    def _check_input(self, X, settings):
        lower, width = settings
        # the midpoint of the bounds maps to 0; up to rounding of the bounds
        if sp.issparse(X) and np.any(np.abs(lower + width / 2) > 1e-12 * width):
            raise ValueError(
                "Sparse input needs bounds symmetric about 0 (lower == -upper), which "
                "map 0 to 0; other bounds map every zero entry to a nonzero value. "
                "Pass a dense X or use symmetric bounds."
            )

    def transform(self, X):
        """Map each feature's bounds onto ``[-1, 1]`` (and clip).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Finite values; column ``j`` is read against ``lower[j]`` and
            ``upper[j]``. Sparse (CSR or CSC) input needs bounds symmetric
            about 0 (``lower == -upper``), so that zeros stay zeros.

        Returns
        -------
        X_scaled : {ndarray, sparse matrix} of shape (n_samples, n_features)
            In ``[-1, 1]`` when ``clip=True``; sparse, in ``X``'s format, if
            ``X`` is.
        """
        X = validate_data(self, X, reset=False, dtype=np.float64,
                          accept_sparse=self._accept_sparse)
        lower, width = self._check_params(X.shape[1])
        self._check_input(X, (lower, width))
        if sp.issparse(X):
            # symmetric bounds: 2 (x - lower) / width - 1 = x / upper
            Z = X.multiply(2.0 / width).asformat(X.format)
            if self.clip:
                np.clip(Z.data, -1.0, 1.0, out=Z.data)
            return Z
        Z = 2.0 * ((X - lower) / width) - 1.0
        if self.clip:
            np.clip(Z, -1.0, 1.0, out=Z)
        return Z

