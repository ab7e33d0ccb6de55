"""The three estimators answer the same questions with the same names (#12).

Privacy is switched the same way (``mechanism``, default None), the same
fitted attributes carry the same meaning, the same mistakes raise the same
exception type, and the same tags describe the same behaviour.
"""

import inspect
import math

import numpy as np
import pytest
from sklearn.datasets import make_classification

from skfedpriv import DecentralizedLogisticRegression, DWDClassifier, LogisticRegression
from skfedpriv import InvalidParameterError

ESTIMATORS = (DWDClassifier, LogisticRegression, DecentralizedLogisticRegression)

PRIVATE = {
    DWDClassifier: dict(mechanism="laplace", clip_norm=3.0),
    LogisticRegression: dict(mechanism="tree", feature_clip_norm=3.0, n_rounds=4),
    DecentralizedLogisticRegression: dict(mechanism="laplace"),
}
SMALL = {
    DWDClassifier: {},
    LogisticRegression: dict(n_rounds=4),
    DecentralizedLogisticRegression: {},
}


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=120, n_features=4, random_state=0)
    sites = np.repeat(["a", "b", "c"], 40)
    return X, y, sites


@pytest.mark.parametrize("Estimator", ESTIMATORS)
def test_privacy_is_switched_by_mechanism_with_the_same_defaults(Estimator):
    defaults = {name: p.default for name, p in
                inspect.signature(Estimator).parameters.items()}
    assert defaults["mechanism"] is None
    assert defaults["epsilon"] == 1.0
    assert defaults["random_state"] is None and defaults["classes"] is None
    assert defaults["budget"] is None
    assert "clip_norm" in defaults and "fit_intercept" in defaults
    # the first sentence of clip_norm says what it bounds: a row or a gradient
    doc = Estimator.__doc__
    described = doc[doc.index("clip_norm :"):].split("\n", 1)[1]
    first_sentence = " ".join(described.split(".")[0].split()).lower()
    assert "bound" in first_sentence, first_sentence
    assert ("row" in first_sentence) != ("gradient" in first_sentence), first_sentence


@pytest.mark.parametrize("Estimator", ESTIMATORS)
def test_non_private_fit_reports_no_finite_guarantee(Estimator, data):
    X, y, sites = data
    est = Estimator(**SMALL[Estimator]).fit(X, y, sample_group=sites)
    assert est.privacy_spent_ == (math.inf, 0.0)
    assert np.all(np.asarray(est.noise_scale_) == 0.0)
    assert est.__sklearn_tags__().non_deterministic is False


@pytest.mark.parametrize("Estimator", ESTIMATORS)
def test_private_fit_has_the_same_release_attributes(Estimator, data):
    X, y, sites = data
    est = Estimator(classes=[0, 1], **PRIVATE[Estimator]).fit(X, y, sample_group=sites)
    epsilon, delta = est.privacy_spent_
    assert 0 < epsilon <= 1.0 + 1e-9 and 0 <= delta < 1
    assert np.all(np.asarray(est.noise_scale_) > 0)
    assert est.__sklearn_tags__().non_deterministic is True
    assert est.coef_.shape == (1, X.shape[1]) and est.intercept_.shape == (1,)
    assert list(est.classes_) == [0, 1]
    released = est.release()
    np.testing.assert_array_equal(released.predict(X), est.predict(X))
    assert not hasattr(released, "_training_state")


@pytest.mark.parametrize("Estimator", (LogisticRegression, DecentralizedLogisticRegression))
def test_learner_labels_use_one_spelling(Estimator, data):
    X, y, sites = data
    est = Estimator(**SMALL[Estimator]).fit(X, y, sample_group=sites)
    assert list(est.learner_labels_) == ["a", "b", "c"]
    assert not hasattr(est, "learners_")


@pytest.mark.parametrize("Estimator", ESTIMATORS)
@pytest.mark.parametrize("name, value", [("epsilon", -1.0), ("epsilon", "1"),
                                         ("mechanism", "no-such"), ("fit_intercept", 1),
                                         ("budget", 3)])
def test_the_same_mistake_raises_the_same_error_whether_or_not_private(
        Estimator, name, value, data):
    X, y, sites = data
    est = Estimator(**{**SMALL[Estimator], name: value})
    with pytest.raises(InvalidParameterError, match=name):
        est.fit(X, y, sample_group=sites)
    assert not hasattr(est, "classes_")


@pytest.mark.parametrize("Estimator", ESTIMATORS)
def test_release_function_publishes_each_estimator_as_its_release(Estimator, data):
    """``skfedpriv.release(est)`` is ``est.release()`` for a lone estimator
    (#20): the same public attributes, no training state, no seed."""
    import skfedpriv

    assert {"release", "StreamReplayError"} <= set(skfedpriv.__all__)
    X, y, sites = data
    est = Estimator(classes=[0, 1], **{**SMALL[Estimator], **PRIVATE[Estimator]}).fit(
        X, y, sample_group=sites)
    published = skfedpriv.release(est)
    assert type(published) is Estimator and not hasattr(published, "_training_state")
    assert published.random_state is None
    np.testing.assert_array_equal(published.coef_, est.release().coef_)
