"""scikit-learn's estimator contract for DWDClassifier."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from skfedpriv import DWDClassifier


@parametrize_with_checks([DWDClassifier(), DWDClassifier(q=2.5, online_steps=1),
                          DWDClassifier(inference=True)])
def test_sklearn_compatible(estimator, check):
    check(estimator)
