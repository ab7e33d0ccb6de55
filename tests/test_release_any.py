"""``skfedpriv.release(obj)`` publishes any fitted object holding private
estimators (#20, point 8): Pipelines, meta-estimators, containers."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.calibration import CalibratedClassifierCV
from sklearn.compose import ColumnTransformer
from sklearn.datasets import make_classification
from sklearn.ensemble import VotingClassifier
from sklearn.model_selection import GridSearchCV, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

from skfedpriv import (
    BoundedScaler,
    DWDClassifier,
    LogisticRegression,
    release,
)
from skfedpriv.linear_model._base import FederatedClassifierMixin, TrainingState
from test_randomness import PRIVATE

pytestmark = pytest.mark.filterwarnings("ignore::skfedpriv.privacy.SeededNoiseWarning")



@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=80, n_features=4, random_state=0)
    return np.clip(X, -3, 3), y


def _secrets(obj):
    """Every TrainingState, and every skfedpriv estimator holding one or a
    seed, that a pickle of ``obj`` carries (pickle's own traversal)."""
    found = []

    class Look(pickle.Pickler):
        def persistent_id(self, item):
            if isinstance(item, TrainingState):
                found.append(item)
            elif isinstance(item, FederatedClassifierMixin) and (
                    "_training_state" in vars(item) or item.random_state is not None):
                found.append(item)
            return None

    import io
    Look(io.BytesIO()).dump(obj)
    return found


@pytest.mark.parametrize("Estimator", list(PRIVATE))
def test_release_of_a_pipeline(Estimator, data):
    """Fails on the code before #20: no skfedpriv.release; joblib.dump(pipe)
    wrote the training state."""
    X, y = data
    pipe = make_pipeline(BoundedScaler(lower=-3, upper=3),
                         Estimator(random_state=4, **PRIVATE[Estimator])).fit(X, y)
    before = pickle.dumps(pipe)
    assert _secrets(pipe)  # the training pipeline does hold secrets (the check looks)
    published = release(pipe)
    assert pickle.dumps(pipe) == before  # the original is untouched and continues
    assert type(published) is type(pipe) and not _secrets(published)
    assert b"_training_state" not in pickle.dumps(published)
    assert published[-1].random_state is None and pipe[-1].random_state == 4
    for method in ("predict", "decision_function", "score"):
        args = (X, y) if method == "score" else (X,)
        np.testing.assert_array_equal(getattr(published, method)(*args),
                                      getattr(pipe, method)(*args))


def test_search_is_refused_and_its_best_estimator_released(data):
    X, y = data
    search = GridSearchCV(make_pipeline(BoundedScaler(lower=-3, upper=3),
                                        LogisticRegression(**PRIVATE[LogisticRegression])),
                          {"logisticregression__learning_rate": [0.25, 0.5]}, cv=2,
                          error_score="raise").fit(X, y)
    with pytest.raises(TypeError, match="best_estimator_"):
        release(search)
    with pytest.raises(TypeError, match="best_estimator_"):
        release({"search": search})
    published = release(search.best_estimator_)
    assert not _secrets(published)
    np.testing.assert_array_equal(published.predict(X), search.predict(X))


def test_release_of_meta_estimators_and_containers(data):
    X, y = data
    dwd = DWDClassifier(**PRIVATE[DWDClassifier])
    lr = LogisticRegression(**PRIVATE[LogisticRegression])
    objects = {
        "voting": VotingClassifier([("dwd", dwd), ("lr", lr)]).fit(X, y),
        "calibrated": CalibratedClassifierCV(lr, cv=2).fit(X, y),
        "columns": make_pipeline(
            ColumnTransformer([("bounded", BoundedScaler(lower=-3, upper=3), [0, 1, 2, 3])]),
            dwd).fit(X, y),
        "folds": cross_validate(lr, X, y, cv=2, return_estimator=True),
    }
    for name, obj in objects.items():
        assert _secrets(obj), name
        published = release(obj)
        assert not _secrets(published), name
        assert b"_training_state" not in pickle.dumps(published), name
    published = release(objects["voting"])
    np.testing.assert_array_equal(published.predict(X), objects["voting"].predict(X))
    folds = release(objects["folds"])["estimator"]
    assert len(folds) == 2 and all(not hasattr(f, "_training_state") for f in folds)


def test_shared_estimators_stay_shared_and_unfitted_ones_lose_their_seed(data):
    X, y = data
    est = DWDClassifier(random_state=3, **PRIVATE[DWDClassifier]).fit(X, y)
    template = LogisticRegression(random_state=5, **PRIVATE[LogisticRegression])
    published = release([est, est, template])
    assert published[0] is published[1] and published[0] is not est
    assert published[2].random_state is None and not hasattr(published[2], "classes_")
    assert template.random_state == 5 and est.random_state == 3


def test_refuses_what_it_cannot_clean(data):
    X, y = data
    est = DWDClassifier(**PRIVATE[DWDClassifier]).fit(X, y)
    with pytest.raises(ValueError, match="TrainingState"):
        release({"model": est, "state": est._training_state})
    with pytest.raises(TypeError, match="cannot be pickled"):
        release([est, lambda x: x])
    # a FunctionTransformer of a module-level function pickles and releases
    pipe = make_pipeline(FunctionTransformer(np.tanh), LogisticRegression(
        **PRIVATE[LogisticRegression])).fit(X, y)
    assert not _secrets(release(pipe))


#: The public fitted attributes of this round's private paths: the noised
#: releases, and the rest declared data-independent in their docstrings
#: (docs/privacy.md's table).
NEW_PRIVATE_PATHS = {
    "logistic quadratic": (
        lambda: LogisticRegression(solver="quadratic", mechanism="blt", n_rounds=2,
                                   feature_clip_norm=4.0, classes=[0, 1], random_state=1),
        {"coef_", "intercept_"},
        {"classes_", "learner_labels_", "n_features_in_", "n_iter_", "n_rounds_seen_",
         "noise_scale_", "privacy_spent_", "sensitivity_", "solver_"}),
    "dwd secagg-tree": (
        lambda: DWDClassifier(mechanism="secagg-tree", n_batches=2, clip_norm=4.0,
                              classes=[0, 1], random_state=1),
        {"coef_", "intercept_"},
        {"classes_", "n_batches_", "n_features_in_", "n_iter_", "n_samples_seen_",
         "noise_scale_", "privacy_spent_", "rho_"}),
    "dwd local-gaussian inference": (
        lambda: DWDClassifier(mechanism="local-gaussian", inference=True, clip_norm=4.0,
                              classes=[0, 1], random_state=1),
        {"coef_", "intercept_", "coef_cov_", "coef_se_", "intercept_se_", "private_refinement_"},
        {"classes_", "n_batches_", "n_features_in_", "n_iter_", "n_samples_seen_",
         "noise_scale_", "privacy_spent_", "rho_"}),
}


@pytest.mark.parametrize("path", list(NEW_PRIVATE_PATHS))
def test_new_private_paths_publish_only_releases_and_data_independent_values(path):
    """Every public fitted attribute of the release is a noised release or
    declared data-independent; the declared ones are equal on neighbouring
    data sets (one row replaced, the same seed), and the release holds no
    secret."""
    make, noised, independent = NEW_PRIVATE_PATHS[path]
    X, y = make_classification(n_samples=300, n_features=4, random_state=0)
    X = np.clip(X, -3, 3)
    g = np.arange(300) % 3
    Xn, yn = X.copy(), y.copy()
    Xn[0], yn[0] = -X[0], 1 - y[0]
    check_neighbouring_releases(lambda rows, labels: make().fit(rows, labels, sample_group=g),
                                (X, y), (Xn, yn), noised, independent)


def check_neighbouring_releases(fit, data, neighbour, noised, independent):
    """``fit(X, y)`` on both data sets: the release's public fitted
    attributes are ``noised | independent``, the ``independent`` ones equal
    on both, and the release holds no secret."""
    fitted = []
    for rows, labels in (data, neighbour):
        with warnings.catch_warnings():  # the seeded-noise and noise warnings
            warnings.simplefilter("ignore")
            est = fit(rows, labels)
        published = release(est)
        assert not _secrets(published)
        public = {k for k in vars(published) if k.endswith("_") and not k.startswith("_")}
        assert public == noised | independent
        fitted.append(published)
    for name in independent:
        a, b = getattr(fitted[0], name), getattr(fitted[1], name)
        np.testing.assert_array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
