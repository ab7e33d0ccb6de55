"""Generalized distance-weighted discrimination over federated sites."""

import numbers

import numpy as np
from sklearn.base import BaseEstimator

from .._losses import check_q
from .._sites import site_row_indices
from ._base import FederatedClassifierMixin, is_balanced_class_weight
from ._dwd_solver import SiteData, published_step, solve_batch


class DWDClassifier(FederatedClassifierMixin, BaseEstimator):
    """Linear generalized DWD classifier, fitted federated and online.

    Minimizes the genDWD objective (paper eq. 5)

    ``(1/W) Σ_i w_i V_q(y_i (x_iᵀβ + β_0)) + (alpha/2) ‖β‖²``

    where ``w_i`` is ``sample_weight`` times ``class_weight`` and ``W`` their
    sum (``W = n`` without weights). Rows live at sites named by
    ``sample_group``; sites only ever send sums over their rows (loss,
    gradient, curvature) to the server, which updates the model. Multiclass
    problems are fitted one-vs-rest, one model per class, on the same rows.

    ``fit`` is the offline federated fit (the paper's OffWP): a Newton
    iteration on the summed site summaries, every step accepted by an Armijo
    test so the objective never increases, run to the minimizer.
    ``partial_fit`` is the online update from summary statistics only
    (renewable estimation, paper section 4, eqs. 30-37): the estimator keeps
    the current parameters and the accumulated curvature ``Σ_j J_j`` of the
    earlier batches (``O(p²)`` numbers per class model, whatever the stream
    length) and no rows.

    Parameters
    ----------
    q : float, default=1.0
        Exponent of the genDWD loss, any ``q > 0``; ``q = 1`` is classical
        DWD.
    alpha : float, default=1e-3
        Ridge strength, the paper's λ of eq. 5 (twice kerndwd's ``lambda``).
        The default suits standardized features; larger values shrink more.
    fit_intercept : bool, default=True
        Fit an unpenalized intercept ``β_0``.
    class_weight : dict, 'balanced' or None, default=None
        Weights of the classes, multiplied into ``sample_weight``.
        ``'balanced'`` uses ``n / (n_classes * count)`` and is available in
        ``fit`` only (a stream has no class counts to balance by; pass a dict
        to ``partial_fit``). In one-vs-rest, every class model uses the
        weights of the rows' own labels.
    max_iter : int, default=100
        Maximum Newton iterations of ``fit`` (and of the first batch of a
        ``partial_fit`` stream).
    tol : float, default=1e-8
        Stop when the gradient of the (weight-averaged) objective has
        max-norm below ``tol``.
    online_steps : int, default=10
        Iterations of each ``partial_fit`` after the first. ``1`` is the
        published single step of Algorithm 1 (eq. 37, with the paper's
        ``H̄``, which puts the ridge on the intercept too); larger values
        solve the renewable estimating equation (30) for the batch while it
        is in memory (Newton steps with the accumulated curvature of earlier
        batches and the batch's curvature at the previous estimate, eq. 35,
        each accepted by an Armijo test), which closes most of the gap to
        the offline fit.
    n_jobs : int or None, default=None
        Sites computed in parallel through joblib. ``None`` means 1 unless a
        ``joblib.parallel_config`` context says otherwise, so a Dask or Ray
        joblib backend spreads the sites over a cluster.
    random_state : int, numpy Generator or None, default=None
        Reserved for randomized mechanisms; the non-private fit is
        deterministic.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Defined when X has string feature names.
    curvature_ : ndarray of shape (n_models, p1, p1)
        Accumulated curvature ``Σ_j J_j`` (eq. 34) of all batches seen, the
        only memory of past batches; ``p1 = n_features + fit_intercept``.
    n_batches_ : int
        Batches seen (``fit`` counts as one).
    n_samples_seen_ : float
        Total row weight seen.
    n_iter_ : int
        Iterations of the last ``fit`` or ``partial_fit``.

    See Also
    --------
    sklearn.svm.LinearSVC : Hinge-loss linear classifier on pooled rows.

    Notes
    -----
    The paper's offline update (16) uses ``H̄`` (eq. 12) as if it were a
    global majorizer of the loss; it is not, so (16) need not descend.
    Here each Newton step is backtracked until the objective decreases
    enough, which makes every iterate a descent and the limit the minimizer
    of eq. 5. The smoothed curvature of eq. 8 is only the Newton model.

    References
    ----------
    .. [1] Guo, Xie, Lu, Jiang, Dai, Kong (2025). Online federated learning
       for classification with generalized DWD. Eqs. 5, 16, 30-37,
       Algorithm 1.
    .. [2] Wang, B. and Zou, H. (2018). Another look at distance-weighted
       discrimination. JRSS-B 80(1), 177-198.
    .. [3] Luo, L. and Song, P. X.-K. (2020). Renewable estimation and
       incremental inference in generalized linear models with streaming
       data sets. JRSS-B 82(1), 69-97.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skfedpriv import DWDClassifier
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> sites = [i % 3 for i in range(len(y))]
    >>> clf = DWDClassifier().fit(X, y, sample_group=sites)
    >>> round(clf.score(X, y), 2)
    0.99
    """

    def __init__(
        self,
        q=1.0,
        alpha=1e-3,
        fit_intercept=True,
        class_weight=None,
        max_iter=100,
        tol=1e-8,
        online_steps=10,
        n_jobs=None,
        random_state=None,
    ):
        self.q = q
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.max_iter = max_iter
        self.tol = tol
        self.online_steps = online_steps
        self.n_jobs = n_jobs
        self.random_state = random_state

    def fit(self, X, y, sample_group=None, sample_weight=None):
        """Offline federated fit on all rows (the paper's OffWP).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_group : array-like of shape (n_samples,), default=None
            Site of each row (any hashable labels); None is one site.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : DWDClassifier
        """
        self._check_params()
        batch, classes = self._validate_batch(
            X, y, sample_group, sample_weight, reset=True, infer_classes=True
        )
        self._update(batch, classes, first=True)
        return self

    def partial_fit(self, X, y, sample_group=None, sample_weight=None, classes=None):
        """Update the model with one batch of a stream (renewable estimation).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_group : array-like of shape (n_samples,), default=None
            Site of each row of this batch.
        sample_weight : array-like of shape (n_samples,), default=None
        classes : array-like of shape (n_classes,), default=None
            All classes of the stream; required on the first call.

        Returns
        -------
        self : DWDClassifier
        """
        self._check_params()
        if is_balanced_class_weight(self.class_weight):
            raise ValueError(
                "class_weight='balanced' is not supported by partial_fit (a "
                "stream has no class counts to balance by); pass a dict."
            )
        first = not hasattr(self, "curvature_")
        batch, classes = self._validate_batch(
            X, y, sample_group, sample_weight, reset=first, classes=classes
        )
        self._update(batch, classes, first=first)
        return self

    # -- the algorithm box ------------------------------------------------

    def _update(self, batch, classes, *, first):
        """Validated batch -> sites -> summaries -> server update -> state."""
        weights = self._row_weights(batch, classes)
        Y = self._one_vs_rest_targets(batch.y, classes)
        X = batch.X
        p1 = X.shape[1] + int(bool(self.fit_intercept))
        sites = SiteData(
            X, Y, weights, site_row_indices(batch.site_codes, batch.n_sites),
            self.n_jobs, bool(self.fit_intercept),
        )
        q = check_q(self.q)
        common = dict(q=q, alpha=float(self.alpha), fit_intercept=self.fit_intercept)
        n_models = Y.shape[1]
        if first:
            theta = np.zeros((p1, n_models))
            prior, seen, n_batches = None, 0.0, 0
            started = np.zeros(n_models, dtype=bool)
        else:
            theta, prior = self._theta, self.curvature_
            seen, n_batches, started = self.n_samples_seen_, self.n_batches_, self._started
        # A model whose rows so far all sit on one side has no minimizer (the
        # intercept would run off): it starts once a batch shows both sides.
        positive = weights > 0
        two_sided = np.any(positive[:, None] & (Y > 0), 0) & np.any(positive[:, None] & (Y < 0), 0)
        starting = ~started & two_sided
        curvature = np.zeros((n_models, p1, p1))
        n_iter = 0
        if starting.any() or not started.any():
            # eq. 26: a model's first estimate solves its batch's equation
            new, curv, info = solve_batch(
                sites, theta, prior=prior, center=theta, max_iter=self.max_iter,
                tol=self.tol, frozen=~starting, **common,
            )
            theta = np.where(starting, new, theta)
            curvature[~started] = curv[~started]
            n_iter = info["n_iter"]
        if started.any():
            if self.online_steps == 1:  # Algorithm 1 as published (eq. 37)
                new, curv = published_step(sites, theta, prior=prior, **common)
                n_iter = max(n_iter, 1)
            else:  # renewable estimating equation (30), curvature at θ_{b-1} (eq. 35)
                new, curv, info = solve_batch(
                    sites, theta, prior=prior, center=theta,
                    max_iter=self.online_steps, tol=self.tol,
                    scale=seen + sites.weight_sum, refresh_curvature=False,
                    warn=False, frozen=~started, **common,
                )
                n_iter = max(n_iter, info["n_iter"])
            theta = np.where(started, new, theta)
            curvature[started] = curv[started]
        prior_sum = 0.0 if prior is None else prior
        # every check passed and every number is computed: commit the state
        self.classes_ = classes
        self._theta = theta
        self.curvature_ = prior_sum + curvature
        self.n_samples_seen_ = seen + sites.weight_sum
        self.n_batches_ = n_batches + 1
        self.n_iter_ = n_iter
        self._started = started | starting
        if self.fit_intercept:
            self.intercept_, self.coef_ = theta[0].copy(), theta[1:].T.copy()
        else:
            self.intercept_, self.coef_ = np.zeros(theta.shape[1]), theta.T.copy()

    def _check_params(self):
        check_q(self.q)
        for name, low in (("alpha", 0.0), ("tol", 0.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"{name} must be a real number, got {value!r}.")
            if not np.isfinite(value) or value < low or (name == "tol" and value == 0):
                raise ValueError(f"{name} must be finite and >= {low}, got {value!r}.")
        for name in ("max_iter", "online_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
        if not isinstance(self.fit_intercept, (bool, np.bool_)):
            raise ValueError(f"fit_intercept must be a bool, got {self.fit_intercept!r}.")
