"""Private estimators declare the scikit-learn checks they fail, and the list is exact."""

import pytest
import sklearn
from sklearn.utils.estimator_checks import check_estimator
from sklearn.utils.fixes import parse_version

from skfedpriv import DecentralizedLogisticRegression, DWDClassifier, LogisticRegression
from skfedpriv.estimator_checks import NOISE_DEPENDENT, expected_failed_checks

# the lists are made on scikit-learn 1.9; older versions run a few of the
# label checks on binary labels, which a private fit on classes=[0, 1] takes
RECENT = parse_version(sklearn.__version__) >= parse_version("1.9")

PRIVATE = [
    DWDClassifier(mechanism="laplace", clip_norm=3.0, classes=[0, 1], random_state=0),
    DWDClassifier(mechanism="local-gaussian", clip_norm=3.0, random_state=0),
    LogisticRegression(mechanism="blt", feature_clip_norm=1.0, epsilon=50.0, random_state=0),
    DecentralizedLogisticRegression(mechanism="laplace", classes=[0, 1], random_state=0),
]


def _failed(estimator):
    results = check_estimator(estimator, on_fail=None, on_skip=None)
    return {r["check_name"] for r in results if r["status"] == "failed"}, results


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("estimator", PRIVATE, ids=repr)
def test_declared_failures_are_exactly_the_failing_checks(estimator):
    declared = expected_failed_checks(estimator)
    failed, results = _failed(estimator)
    run = {r["check_name"] for r in results}
    assert failed <= set(declared), "failing checks that are not declared"
    passing = {name for name in set(declared) & run - failed
               if declared[name] not in NOISE_DEPENDENT
               and (RECENT or "labels outside" not in declared[name])}
    assert not passing, "declared checks that pass"
    assert all(reason for reason in declared.values())
    # scikit-learn reads the declaration: every failure becomes an expected one
    with_reasons = check_estimator(estimator, expected_failed_checks=declared,
                                   on_fail=None, on_skip=None)
    assert not [r for r in with_reasons if r["status"] == "failed"]
    assert {r["check_name"] for r in with_reasons if r["status"] == "xfail"} == failed


@pytest.mark.parametrize("Estimator",
                         [DWDClassifier, LogisticRegression, DecentralizedLogisticRegression])
def test_non_private_estimators_declare_nothing(Estimator):
    # tests/test_dwd_estimator_checks.py and friends run every check on them
    assert expected_failed_checks(Estimator()) == {}


def test_other_estimators_are_refused():
    from sklearn.linear_model import LogisticRegression as SklearnLogisticRegression

    with pytest.raises(TypeError, match="not an estimator of skfedpriv"):
        expected_failed_checks(SklearnLogisticRegression())
