"""Shared input handling of the federated classifiers.

Every estimator of the package validates a batch the same way: features
through scikit-learn's ``validate_data``, labels against ``classes_``,
``sample_group`` and ``sample_weight`` against the row count, and all of it
*before* any fitted attribute changes, so a rejected call leaves the estimator
exactly as it was.
"""

import contextlib
import copy
import inspect

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils.multiclass import check_classification_targets, type_of_target, unique_labels
from sklearn.utils.validation import check_is_fitted, validate_data

from .._param_validation import InvalidParameterError, validate_parameters
from .._sites import check_sample_group
from ._stream_position import check_position, commit_position, new_stream_id

_FEATURE_ATTRIBUTES = ("n_features_in_", "feature_names_in_")

# the target types scikit-learn's check_classification_targets accepts
_CLASSIFICATION_TARGETS = ("binary", "multiclass", "multiclass-multioutput",
                           "multilabel-indicator", "multilabel-sequences")


@contextlib.contextmanager
def _restore_feature_attributes_on_error(estimator):
    """Undo ``validate_data(reset=True)``'s writes if validation fails later."""
    saved = {a: getattr(estimator, a) for a in _FEATURE_ATTRIBUTES if hasattr(estimator, a)}
    try:
        yield
    except BaseException:
        for attribute in _FEATURE_ATTRIBUTES:
            if attribute in saved:
                setattr(estimator, attribute, saved[attribute])
            elif hasattr(estimator, attribute):
                delattr(estimator, attribute)
        raise


def _labels_outside(y, classes):
    """The distinct labels of ``y`` that are not in the sorted ``classes``."""
    try:
        position = np.minimum(np.searchsorted(classes, y), len(classes) - 1)
        outside = classes[position] != y
    except TypeError:  # labels that do not order against the classes
        outside = ~np.isin(y, classes)
    return np.unique(y[outside]) if outside.any() else y[:0]


# scikit-learn >= 1.7 lets unique_labels take the target types already read
_UNIQUE_LABELS_TAKES_TYPES = "ys_types" in inspect.signature(unique_labels).parameters


def _labels_of(y, y_type):
    """``unique_labels(y)``, passing the target type already read where
    scikit-learn takes it (older releases read it again)."""
    if _UNIQUE_LABELS_TAKES_TYPES:
        return unique_labels(y, ys_types={y_type})
    return unique_labels(y)


def _classification_target_type(y):
    """``(type_of_target(y), labels)`` of a validated 1-d ``y``, the type
    read once, with scikit-learn's ``check_classification_targets`` run where
    it would raise or warn (a type it rejects; more classes than half of over
    20 rows), so those errors and that warning are scikit-learn's own.
    Integer and boolean labels are typed from their sorted distinct values
    (``labels``, what ``unique_labels(y)`` returns for them); other labels
    give ``labels=None`` and the type serves :func:`_labels_of`, which would
    otherwise read it again."""
    labels = None
    if isinstance(y, np.ndarray) and y.ndim == 1 and y.size and y.dtype.kind in "biu":
        # type_of_target's checks of y's form and values cannot fail on these:
        # its answer is the count of labels, without its two check_array passes
        labels = np.unique(y)
        y_type = "multiclass" if labels.size > 2 else "binary"
    else:
        y_type = type_of_target(y, input_name="y")
    many = ("multiclass" in y_type and len(y) > 20
            and len(np.unique(y) if labels is None else labels) > round(0.5 * len(y)))
    if y_type not in _CLASSIFICATION_TARGETS or many:
        check_classification_targets(y)
    return y_type, labels


def check_sample_weight(sample_weight, n_samples):
    """Validate ``sample_weight``: finite, non-negative, one per row."""
    if sample_weight is None:
        return np.ones(n_samples)
    if np.isscalar(sample_weight):
        sample_weight = np.full(n_samples, sample_weight, dtype=float)
    weights = np.asarray(sample_weight, dtype=float)
    if weights.ndim != 1 or weights.shape[0] != n_samples:
        raise ValueError(
            f"sample_weight.shape == {weights.shape}, expected ({n_samples},)."
        )
    if not np.all(np.isfinite(weights)):
        raise ValueError("sample_weight contains NaN or infinity.")
    if np.any(weights < 0):
        raise ValueError("Negative values in sample_weight are not allowed.")
    if n_samples and not np.any(weights > 0):
        raise ValueError("Sample weights must contain at least one non-zero number.")
    return weights


class TrainingState:
    """The secret training state of a fitted estimator, in one object.

    Everything an estimator needs to continue a stream but must not publish
    lives here: noise generators and noise-stream state, raw (un-noised)
    sums and curvature, gossip and tree buffers. It is held by the estimator
    as ``_training_state`` and is never part of a release:
    :meth:`FederatedClassifierMixin.release` drops it. Its repr shows the
    names it holds, never the values.
    """

    def __init__(self, **values):
        self.__dict__.update(values)

    def __repr__(self):
        return f"TrainingState(<secret: {', '.join(sorted(vars(self)))}>)"


class StreamSettings:
    """Base of each estimator's frozen settings dataclass (its validated
    hyperparameters, data-independent). :meth:`stream_key` is what a stream's
    accumulated state and guarantee depend on: a continuation whose key
    differs is refused (:meth:`FederatedClassifierMixin._check_settings_unchanged`)."""

    def stream_key(self):
        """The settings a stream is bound to (default: all of them)."""
        return self


class ReleasedModelError(RuntimeError):
    """Training was asked of a released model, which holds no training state."""


class Batch:
    """One validated batch: features (an ndarray or a CSR matrix), labels,
    sites and row weights."""

    __slots__ = ("X", "y", "site_labels", "site_codes", "sample_weight")

    def __init__(self, X, y, site_labels, site_codes, sample_weight):
        self.X = X
        self.y = y
        self.site_labels = site_labels
        self.site_codes = site_codes
        self.sample_weight = sample_weight

    @property
    def n_sites(self):
        return len(self.site_labels)


class FederatedClassifierMixin(ClassifierMixin):
    """Validation shared by ``fit`` and ``partial_fit`` of the classifiers.

    ``sample_group`` is requested by default for metadata routing, so a
    routed Pipeline or GridSearchCV passes it on without ``set_fit_request``.
    """

    __metadata_request__fit = {"sample_group": True}
    __metadata_request__partial_fit = {"sample_group": True}

    #: Private attribute names (beyond the public ``name_`` ones) that a
    #: release keeps because prediction needs them; each must be a covered,
    #: data-independent or noised quantity.
    _release_private_attributes = ()

    #: ``__init__`` parameter -> accepted constraints; see
    #: :mod:`skfedpriv._param_validation`. Every estimator declares all of its
    #: parameters, privacy ones included (checked whether or not used).
    _parameter_constraints = {}

    def _is_private(self):
        """Whether a privacy mechanism is switched on."""
        return getattr(self, "mechanism", None) is not None

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # fresh noise at every fit under a mechanism
        tags.non_deterministic = self._is_private()
        # fit, partial_fit and the predictions take CSR rows (converted
        # from other sparse formats), with the results of dense rows
        tags.input_tags.sparse = True
        return tags

    # -- one stream pattern: validate, compute, then commit -----------------

    def _validate_params(self):
        """Check every hyperparameter, then the rules that tie several together.

        Returns the dict the update reads its settings from (what
        :meth:`_check_param_combinations` returns). Nothing is stored.
        """
        # the declared names are the __init__ parameters (tests/test_architecture.py),
        # read without get_params' signature inspection on every streamed batch
        params = {name: getattr(self, name) for name in self._parameter_constraints}
        validate_parameters(self._parameter_constraints, params, type(self).__name__)
        return self._check_param_combinations(params)

    def _check_param_combinations(self, params):
        """Cross-parameter rules (estimators override); raise
        :class:`~skfedpriv._param_validation.InvalidParameterError`. Returns
        the settings the update uses (by default ``params`` unchanged)."""
        return params

    def _begin_call(self, new_stream, **context):
        """What every ``fit`` / ``partial_fit`` (and ``fit_sites`` /
        ``partial_fit_sites``) checks before it reads any data: the
        hyperparameters, the call (:meth:`_check_call`), that a release is
        not continued, and that the stream can take this continuation
        (:meth:`_check_continuation`). Returns ``(settings, first)``, where
        ``first`` says whether the call starts a stream."""
        settings = self._validate_params()
        self._check_noise_source()
        self._check_call(settings, new_stream)
        if not new_stream:
            self._check_can_continue()
        first = new_stream or not hasattr(self, "_training_state")
        if not first:
            self._check_continuation(settings, **context)
            position = self._stream_position()
            if position is not None:
                check_position(*position, getattr(self, "budget", None),
                               type(self).__name__)
        return settings, first

    def _check_noise_source(self):
        """Under a mechanism, refuse a generator object as ``random_state``.

        :func:`sklearn.base.clone` deep-copies a ``Generator`` or
        ``RandomState`` hyperparameter, so every clone (each GridSearchCV
        candidate, each ``cross_validate`` fold, the refit) would draw the
        same noise, and two releases on neighbouring folds would give away
        the noise-free difference of their models. ``None`` (fresh OS
        entropy per stream) and an integer seed (which warns, see
        :class:`~skfedpriv.privacy.SeededNoiseWarning`) remain.
        """
        if self._is_private() and isinstance(
                getattr(self, "random_state", None), (np.random.Generator, np.random.RandomState)):
            raise InvalidParameterError(
                f"{type(self).__name__} with a privacy mechanism does not take a "
                f"{type(self.random_state).__name__} as random_state: clone() copies "
                "it, so every clone (grid-search candidate, cross-validation fold, "
                "refit) would draw the same noise. Use random_state=None (fresh OS "
                "entropy for each stream) for a real release, or an integer seed "
                "for tests and reproducible experiments."
            )

    def _stream_position(self):
        """``(stream id, position)`` of the private stream this estimator
        would continue, or None (no private stream)."""
        state = getattr(self, "_training_state", None)
        stream_id = getattr(state, "stream_id", None)
        return None if stream_id is None else (stream_id, state.position)

    def _check_call(self, settings, new_stream):
        """Rules on the call itself (estimators override); raise to refuse."""

    def _check_continuation(self, settings, **context):
        """Refuse a continuation the stream cannot take (settings changed
        since it started, its horizon spent; estimators override)."""

    def _check_settings_unchanged(self, settings, started_with):
        """The one "unchanged mid-stream" check: ``settings.stream_key()``
        must equal the key the stream started with (raises ValueError
        before anything changes)."""
        now = settings.stream_key()
        if now != started_with:
            raise ValueError(
                "The stream's hyperparameters changed in the middle of a stream "
                f"(was {started_with}, now {now}); the accumulated state and the "
                "guarantee belong to the stream's settings. Call fit, or start a "
                "new estimator."
            )

    def _fit_batch(self, X, y, sample_group, sample_weight=None, classes=None, *,
                   new_stream):
        """The one code path of ``fit`` (``new_stream=True``) and ``partial_fit``.

        :meth:`_begin_call`, validate the batch, compute the update
        (:meth:`_update`, which writes nothing on the estimator), then
        :meth:`_commit` it. A call that raises changes nothing (the only
        writes before the commit, ``n_features_in_`` and
        ``feature_names_in_``, are undone).
        """
        settings, first = self._begin_call(new_stream)
        with _restore_feature_attributes_on_error(self):
            batch, classes = self._validate_batch(
                X, y, sample_group, sample_weight, reset=first, classes=classes,
                infer_classes=new_stream,
            )
            release, training_state = self._update(
                batch, classes, settings, first=first, new_stream=new_stream)
        self._commit(release, training_state, first=first)
        return self

    def _update(self, batch, classes, settings, *, first, new_stream):
        """One batch of the algorithm; returns ``(release, training_state)``:
        the public fitted attributes (dict) and the secret
        :class:`TrainingState`. Must not write on the estimator. ``first``:
        the call starts a stream; ``new_stream``: the call is ``fit``."""
        raise NotImplementedError

    def _sites_classes(self, classes, labels, *, first, new_stream, who):
        """The classes of a call on rows that stay at sites (``fit_sites`` /
        ``partial_fit_sites``): declared, or on a new stream read from the
        ``labels`` the sites report (None: they keep them private). Labels
        outside the classes are refused, as ``fit`` refuses such rows."""
        declared = self._declared_classes(classes, first_call=first)
        if new_stream and declared is None:
            if labels is None:
                raise ValueError(f"The {who} do not report their labels: pass classes.")
            declared = unique_labels(np.asarray(labels))
        # read from the labels or the classes hyperparameter: already in order
        return self._resolve_classes(
            np.asarray([] if labels is None else labels), declared, first_call=first,
            sorted_labels=declared is not None and declared is not classes)

    def _check_sites_width(self, n_features, *, first, who):
        """A continuation on sites must keep the stream's feature count."""
        if not first and n_features != self.n_features_in_:
            raise ValueError(
                f"The {who} have {n_features} features, but {type(self).__name__} "
                f"is expecting {self.n_features_in_} features as input."
            )

    def _commit_sites(self, release, training_state, n_features, *, first):
        """:meth:`_commit` for an update computed on sites: a new stream takes
        the sites' feature count, and their features have no names."""
        if first:
            release["n_features_in_"] = n_features
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        self._commit(release, training_state, first=first)

    def _commit(self, release, training_state, *, first):
        """Write one update: the public attributes of ``release`` (dict name ->
        value) and the secret ``training_state``. Public fitted attributes of
        an earlier stream that ``release`` lacks are removed, so a stream
        never shows another stream's numbers.

        Under a mechanism the update first takes its stream's next position
        (:mod:`._stream_position`): a copy of the training estimator that
        continues from a position already continued raises
        :class:`StreamReplayError` here, before anything is written."""
        if self._is_private():
            continued = None if first else self._stream_position()
            stream_id, position = continued or (new_stream_id(), 0)
            commit_position(stream_id, position, getattr(self, "budget", None),
                            type(self).__name__)
            training_state.stream_id, training_state.position = stream_id, position + 1
        for name in list(vars(self)):
            stale = (name.endswith("_") and not name.startswith("_")
                     and name not in release and name not in _FEATURE_ATTRIBUTES)
            if stale:
                delattr(self, name)
        for name, value in release.items():
            setattr(self, name, value)
        self._training_state = training_state

    def release(self):
        """Return the release: a fitted copy holding only published attributes.

        The returned estimator has the same hyperparameters except
        ``random_state``, which is None: a seed (or a generator's state)
        would let a holder of the release refit candidate neighbouring
        datasets with the same noise and match ``coef_`` exactly. It has every
        public fitted attribute (``coef_``, ``intercept_``, ``classes_``, ...), each
        of which is covered by the privacy claim of the mechanism (see the
        estimator's Notes) or data-independent. It holds no training state
        (noise streams, generators, raw sums, curvature): it predicts,
        scores, pickles and can be shared. Publish this object, never the
        training estimator itself, whose pickle carries the secret state
        needed to continue the stream.

        ``partial_fit`` on a release raises :class:`ReleasedModelError`;
        ``fit`` starts a new stream (and spends the budget anew).

        Returns
        -------
        released : estimator
            A new fitted estimator of the same class.
        """
        check_is_fitted(self)
        released = clone(self)
        if "random_state" in released.get_params(deep=False):
            released.set_params(random_state=None)
        for name, value in vars(self).items():
            public = name.endswith("_") and not name.startswith("_")
            if public or name in self._release_private_attributes:
                setattr(released, name, copy.deepcopy(value))
        return released

    def _check_can_continue(self):
        """Raise if a fitted estimator has no training state (a release)."""
        if hasattr(self, "classes_") and not hasattr(self, "_training_state"):
            raise ReleasedModelError(
                f"This {type(self).__name__} is a release (see release()): it "
                "holds no training state, so it cannot continue a stream with "
                "partial_fit. Continue on the training estimator, or call fit "
                "to start a new stream."
            )

    def _validate_batch(self, X, y, sample_group, sample_weight, *, reset, classes=None,
                        infer_classes=False):
        """Validate a batch and the classes it is labelled with.

        ``infer_classes=True`` (``fit``) takes the classes from ``y``;
        otherwise (``partial_fit``) they come from ``classes`` on the first
        call and must match ``classes_`` afterwards.
        Returns the :class:`Batch` and the classes the estimator will hold.
        Nothing fitted is modified except ``n_features_in_`` and
        ``feature_names_in_`` when ``reset``: callers run it inside
        :func:`_restore_feature_attributes_on_error` (as :meth:`_fit_batch`
        does), which undoes those writes if anything later fails.
        """
        if _is_validated_batch(self, X, y, reset=reset):
            # already what validate_data returns: its writes on reset only
            if reset:
                self.n_features_in_ = X.shape[1]
                if hasattr(self, "feature_names_in_"):
                    del self.feature_names_in_
        else:
            X, y = validate_data(
                self, X, y, reset=reset, dtype=np.float64, y_numeric=False,
                accept_sparse="csr",
            )
        if infer_classes or reset:
            # later batches are checked against classes_ below, which
            # rejects continuous targets as well
            y_type, y_labels = _classification_target_type(y)
        site_labels, site_codes = check_sample_group(sample_group, X.shape[0])
        weights = check_sample_weight(sample_weight, X.shape[0])
        declared = self._declared_classes(classes, first_call=reset or infer_classes)
        # the classes hyperparameter comes back as unique_labels made it
        sorted_labels = declared is not None and declared is not classes
        read_from_y = infer_classes and declared is None
        if read_from_y:
            declared = y_labels if y_labels is not None else _labels_of(y, y_type)
            sorted_labels = True
        batch_classes = self._resolve_classes(y, declared, first_call=reset,
                                              sorted_labels=sorted_labels,
                                              labels_known=read_from_y)
        return Batch(X, y, site_labels, site_codes, weights), batch_classes

    def _declared_classes(self, classes, *, first_call):
        """The label set declared by the user, or None.

        A label set read from the data would reveal a row's label (a row with
        a new label changes ``classes_`` and the shape of ``coef_``), so under
        a privacy mechanism it must be declared: through the ``classes``
        hyperparameter or the ``classes`` argument of the first
        ``partial_fit``. Without a mechanism ``fit`` infers it, as in
        scikit-learn.
        """
        declared = getattr(self, "classes", None)
        if declared is not None:
            declared = np.asarray(declared)
            if declared.ndim != 1:
                raise ValueError(
                    f"classes must be a 1-d array-like of labels, got shape {declared.shape}."
                )
            declared = unique_labels(declared)
            if classes is not None and not np.array_equal(
                unique_labels(np.asarray(classes)), declared
            ):
                raise ValueError(
                    f"classes={classes!r} passed to partial_fit differs from the "
                    f"classes hyperparameter {declared!r}."
                )
            return declared
        if classes is None and first_call and self._is_private():
            raise ValueError(
                "With a privacy mechanism the label set must be declared, not read "
                "from the data (a row with a new label would change classes_ and "
                "the shape of coef_): set the classes hyperparameter, e.g. "
                f"{type(self).__name__}(..., classes=[0, 1]), or pass classes= to "
                "the first partial_fit."
            )
        return classes

    def _resolve_classes(self, y, classes, *, first_call, sorted_labels=False,
                         labels_known=False):
        """The classes a batch with labels ``y`` is fitted with: ``classes``
        (already ``unique_labels``'s output when ``sorted_labels``), or on a
        continuation ``classes_``; refused with one class or labels of ``y``
        outside them (not searched for when ``labels_known``: ``classes``
        are ``y``'s own labels)."""
        if classes is None and first_call:
            raise ValueError(
                "classes must be passed on the first call to partial_fit."
            )
        if classes is not None:
            if not sorted_labels:
                classes = unique_labels(np.asarray(classes))
            if not first_call and not np.array_equal(classes, self.classes_):
                raise ValueError(
                    f"`classes={classes!r}` is not the same as on the last "
                    f"call to partial_fit, was: {self.classes_!r}."
                )
        else:
            classes = self.classes_
        if len(classes) < 2:
            raise ValueError(
                "Classifier can't train when only one class is present: "
                f"classes={classes!r}."
            )
        unseen = y[:0] if labels_known else _labels_outside(y, classes)
        if unseen.size:
            raise ValueError(
                f"y contains labels {unseen!r} that are not in classes "
                f"{classes!r}."
            )
        return classes

    def decision_function(self, X):
        """Signed distance-like score of each row to each class's hyperplane.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Sparse rows are scored as CSR, without densifying them.

        Returns
        -------
        scores : ndarray of shape (n_samples,) for two classes, else
            (n_samples, n_classes)
        """
        check_is_fitted(self)
        X = self._prediction_rows(validate_data(self, X, reset=False, dtype=np.float64,
                                                accept_sparse="csr"))
        scores = np.asarray(X @ self.coef_.T) + self.intercept_
        return scores.ravel() if scores.shape[1] == 1 else scores

    def _prediction_rows(self, X):
        """Rows as the model scores them (an estimator that clips rows in
        training may clip them here too)."""
        return X

    def predict(self, X):
        """Predict class labels: the sign of the score for two classes, else
        the class of the largest score (see :meth:`decision_function`).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Rows to label; a release predicts exactly as its training model.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Each an element of ``classes_``.
        """
        scores = self.decision_function(X)  # checks the fit first
        return scores_to_labels(self.classes_, scores)


def _is_validated_batch(estimator, X, y, *, reset=False):
    """True when ``validate_data(estimator, X, y, reset=reset, dtype=float64)``
    would return ``X`` and ``y`` unchanged and raise nothing: plain finite
    float64 rows (at least one row and one feature; of the fitted width
    unless ``reset``), a 1-d numeric or string ``y`` of the same length, no
    feature names on either side (unless ``reset``: a fit's ndarray rows
    only drop the fitted names, which the caller does with
    ``n_features_in_``, as validate_data would). Anything else goes through
    ``validate_data`` (its checks and messages); this only spares ready
    numpy batches (a stream's, a fit's) the per-call cost of those checks."""
    if type(X) is not np.ndarray or type(y) is not np.ndarray:
        return False
    if X.dtype != np.float64 or X.ndim != 2 or y.ndim != 1 or 0 in X.shape:
        return False
    if y.shape[0] != X.shape[0] or y.dtype.kind not in "biuU":
        return False
    if not reset and (hasattr(estimator, "feature_names_in_")
                      or X.shape[1] != getattr(estimator, "n_features_in_", None)):
        return False
    return bool(np.isfinite(X.sum()))


def scores_to_labels(classes, scores):
    """Labels from decision scores: the sign for two classes, else the argmax."""
    if scores.ndim == 1:
        return classes[(scores > 0).astype(int)]
    return classes[np.argmax(scores, axis=1)]


def is_balanced_class_weight(class_weight):
    return isinstance(class_weight, str) and class_weight == "balanced"


__all__ = [
    "Batch",
    "ReleasedModelError",
    "TrainingState",
    "FederatedClassifierMixin",
    "BaseEstimator",
    "check_sample_weight",
    "is_balanced_class_weight",
]
