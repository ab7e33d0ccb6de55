"""``release(obj)``: publish any fitted object that holds skfedpriv estimators.

A Pipeline, a ColumnTransformer, a VotingClassifier, the fitted models of
``cross_validate(..., return_estimator=True)``, a list or dict of them: each
is copied with every skfedpriv estimator in it replaced by its
:meth:`~skfedpriv.linear_model._base.FederatedClassifierMixin.release`, and
the copy is checked, by pickling it, to hold no training state and no seed.
"""

import copy
import pickle

from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from .linear_model._base import FederatedClassifierMixin, TrainingState

__all__ = ["release"]


class _Discard:
    """A file that forgets what is written (the walk needs the traversal only)."""

    def write(self, data):
        return len(data)


class _Walker(pickle.Pickler):
    """Pickle's own traversal of an object graph, with a look at each object.

    ``visit(obj)`` returns True to stop the traversal below ``obj``. Pickle
    reaches whatever a pickle of the object would carry (``__dict__``,
    ``__slots__``, ``__reduce__`` state, containers), which is exactly what
    ``joblib.dump`` of it would publish.
    """

    def __init__(self, visit):
        super().__init__(_Discard(), protocol=pickle.HIGHEST_PROTOCOL)
        self._visit = visit

    def persistent_id(self, obj):
        return id(obj) if self._visit(obj) else None


def _walk(obj, visit):
    try:
        _Walker(visit).dump(obj)
    except _SearchRefused:
        raise
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise TypeError(
            "release() checks what it returns by pickling it, and this object "
            f"cannot be pickled ({type(exc).__name__}: {exc}); it cannot "
            "guarantee that no training state remains. Release the skfedpriv "
            "estimators themselves with est.release()."
        ) from exc


class _SearchRefused(TypeError):
    """A fitted hyperparameter search was asked to be released."""


def _is_search(obj):
    return "cv_results_" in getattr(obj, "__dict__", ())


def _refuse_search(obj):
    raise _SearchRefused(
        f"release() does not publish a fitted {type(obj).__name__}: its "
        "cv_results_, best_score_, best_params_ and best_index_ come from "
        "un-noised validation scores of the candidate models, a function of the "
        "data that no mechanism covers. Publish release(search.best_estimator_) "
        "(the refit model, whose noise and budget charge are covered; the choice "
        "of its hyperparameters is not, see docs/tuning.md)."
    )


def _released_copy(estimator):
    """A skfedpriv estimator's release, or an unfitted clone without a seed."""
    try:
        return estimator.release()
    except NotFittedError:
        unfitted = clone(estimator)
        if "random_state" in unfitted.get_params(deep=False):
            unfitted.set_params(random_state=None)
        return unfitted


def _check_released(obj):
    """Refuse if training state or a seeded skfedpriv estimator remains."""
    def visit(item):
        if isinstance(item, TrainingState):
            raise RuntimeError("a TrainingState")
        if isinstance(item, FederatedClassifierMixin):
            if "_training_state" in vars(item):
                raise RuntimeError(f"the training state of a {type(item).__name__}")
            if getattr(item, "random_state", None) is not None:
                raise RuntimeError(f"a seeded {type(item).__name__}")
        return False

    try:
        _walk(obj, visit)
    except RuntimeError as exc:
        raise ValueError(
            f"release() could not remove everything secret: the copy still holds "
            f"{exc} (reached through an object it does not know how to release). "
            "Nothing was returned; release the skfedpriv estimators themselves "
            "with est.release()."
        ) from None


def release(obj):
    """Return a publishable copy of any object holding skfedpriv estimators.

    Every skfedpriv estimator reachable from ``obj`` (a step of a Pipeline,
    a ColumnTransformer or FeatureUnion part, an estimator of a
    VotingClassifier, StackingClassifier, CalibratedClassifierCV or
    OneVsRestClassifier, an item of a list, tuple or dict — anything a
    pickle of ``obj`` would carry) is replaced by its ``release()``: the
    fitted copy that holds only its published attributes, with
    ``random_state=None``; an unfitted one by a clone with
    ``random_state=None``. The rest of ``obj`` is deep-copied; ``obj``
    itself is not changed.

    The copy is then pickled (to nowhere) to check that it holds no
    training state (:class:`~skfedpriv.linear_model._base.TrainingState`)
    and no seeded skfedpriv estimator; if it does (e.g. an object that
    reaches an estimator's state by some other path), or cannot be pickled,
    nothing is returned and an error says why.

    What this covers: the skfedpriv estimators' privacy claims hold for
    the copy (see each estimator's Notes). Other fitted parts are published
    as they are, and no claim of this package covers them: a
    ``StandardScaler``'s ``mean_`` and ``scale_`` are the raw data's (use
    :class:`~skfedpriv.BoundedScaler`, whose bounds are declared), a
    calibrator of ``CalibratedClassifierCV`` is fitted on un-noised scores
    of held-out rows.

    Parameters
    ----------
    obj : object
        A fitted Pipeline or meta-estimator, a skfedpriv estimator, or any
        picklable container of them.

    Returns
    -------
    released : object
        A copy of ``obj`` to publish (pickle, ``joblib.dump``, share).

    Raises
    ------
    TypeError
        If ``obj`` is, or holds, a fitted hyperparameter search
        (``GridSearchCV``, ``RandomizedSearchCV``, ...): its ``cv_results_``
        and ``best_*`` attributes are un-noised functions of the data.
        Publish ``release(search.best_estimator_)``. Also if ``obj`` cannot
        be pickled.
    ValueError
        If the copy would still hold training state or a seed.

    Examples
    --------
    >>> import io, joblib
    >>> from sklearn.datasets import load_digits
    >>> from sklearn.pipeline import make_pipeline
    >>> from skfedpriv import BoundedScaler, LogisticRegression, release
    >>> X, y = load_digits(n_class=2, return_X_y=True)   # pixels in [0, 16]
    >>> pipe = make_pipeline(
    ...     BoundedScaler(lower=0, upper=16),
    ...     LogisticRegression(mechanism="tree", feature_clip_norm=8.0,
    ...                        n_rounds=20, classes=[0, 1])).fit(X, y)
    >>> published = release(pipe)        # publish this; keep pipe to continue
    >>> hasattr(published[-1], "_training_state"), published[-1].random_state
    (False, None)
    >>> bool((published.predict(X) == pipe.predict(X)).all())
    True
    >>> _ = joblib.dump(published, io.BytesIO())  # holds the release only
    """
    found = {}

    def visit(item):
        if isinstance(item, FederatedClassifierMixin):
            found[id(item)] = item
            return True
        if _is_search(item):
            _refuse_search(item)
        return False

    _walk(obj, visit)
    memo = {key: _released_copy(estimator) for key, estimator in found.items()}
    released = copy.deepcopy(obj, memo)
    _check_released(released)
    return released
