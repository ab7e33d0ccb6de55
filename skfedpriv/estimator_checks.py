"""The scikit-learn estimator checks a private estimator fails by design, with reasons.

A private estimator refuses what its guarantee cannot cover: labels outside
its declared ``classes`` (or any label set read from the data), class
weights, a stream past the horizon its noise was calibrated for. Its fits
are noised, so checks that expect a deterministic, exact fit fail too.
scikit-learn's checks exercise exactly those things, so a private instance
fails some of them. :func:`expected_failed_checks` names each one with its
reason, in the form scikit-learn's ``check_estimator`` and
``parametrize_with_checks`` take::

    from sklearn.utils.estimator_checks import check_estimator
    from skfedpriv.estimator_checks import expected_failed_checks

    check_estimator(est, expected_failed_checks=expected_failed_checks(est))

Without a mechanism an estimator passes every check, and the list is empty.
"""

from .linear_model import DecentralizedLogisticRegression, DWDClassifier, LogisticRegression

__all__ = ["expected_failed_checks"]

# scikit-learn's checks that fit labels {0, 1, 2} (or strings, for
# check_classifiers_classes; {0, ..., 3} for the sparse ones), and that pass ``classes=[0, 1, 2]`` to
# ``partial_fit`` (check_estimators_partial_fit_n_features).
_OTHER_LABELS = (
    "check_classifier_data_not_an_array", "check_classifiers_classes",
    "check_classifiers_train", "check_dict_unchanged", "check_dont_overwrite_parameters",
    "check_dtype_object", "check_estimator_sparse_array", "check_estimator_sparse_matrix",
    "check_estimator_sparse_tag", "check_estimators_dtypes", "check_estimators_fit_returns_self",
    "check_estimators_overwrite_params", "check_f_contiguous_array_estimator",
    "check_fit2d_1feature", "check_fit2d_predict1d", "check_fit_score_takes_y",
    "check_n_features_in_after_fitting", "check_positive_only_tag_during_fit",
    "check_readonly_memmap_input", "check_supervised_y_2d",
)
_PARTIAL_FIT_CLASSES = "check_estimators_partial_fit_n_features"
# the checks that fit binary labels, or need predict_proba beside decision_function
_BINARY_LABELS = (
    "check_estimators_nan_inf", "check_estimators_pickle", "check_fit2d_1sample",
    "check_fit_check_is_fitted", "check_fit_idempotent", "check_n_features_in",
)
_PROBA = "check_decision_proba_consistency"
# DWDClassifier takes sample_weight (the others do not), so these checks run on it
_WEIGHTED = (
    "check_sample_weight_equivalence_on_dense_data",
    "check_sample_weight_equivalence_on_sparse_data",
    "check_sample_weights_list", "check_sample_weights_not_an_array",
    "check_sample_weights_not_overwritten", "check_sample_weights_pandas_series",
    "check_sample_weights_shape",
)

_UNDECLARED = ("a private estimator reads no label set from the data: it needs "
               "classes=... and refuses the check's labels")
_OUTSIDE = "the check fits labels outside the declared classes, which a private fit refuses"
_PARTIAL_FIT = ("the check's partial_fit passes classes=[0, 1, 2], which differ from the "
                "declared classes")
_HORIZON = "a private partial_fit stream needs its horizon n_rounds, which the check leaves unset"
_CLASS_WEIGHT = "class_weight is refused under a mechanism: the sensitivity bounds weigh each row once"
_ONE_LABEL = ("on one label the noised model may still predict the other declared class "
              "(noise-dependent)")

#: reasons that depend on the noise drawn: such a check may pass for a seed
NOISE_DEPENDENT = (_ONE_LABEL,)


def _label_failures(estimator):
    """The checks that fail on the label set, for the estimator's ``classes``."""
    weighted = isinstance(estimator, DWDClassifier)
    fitting = _OTHER_LABELS + (_WEIGHTED if weighted else ())
    if "max_iter" in estimator.get_params():  # scikit-learn then checks n_iter_ on 3 classes
        fitting += ("check_non_transformer_estimators_n_iter",)
    if estimator.classes is None:
        undeclared = fitting + _BINARY_LABELS + (() if weighted else (_PROBA,))
        return dict.fromkeys(undeclared, _UNDECLARED)
    failures = dict.fromkeys(fitting, _OUTSIDE) if 2 not in list(estimator.classes) else {}
    failures[_PARTIAL_FIT_CLASSES] = _PARTIAL_FIT
    return failures


def expected_failed_checks(estimator):
    """The scikit-learn checks ``estimator`` fails by design, each with its reason.

    Parameters
    ----------
    estimator : DWDClassifier, LogisticRegression or DecentralizedLogisticRegression
        An unfitted estimator, as handed to scikit-learn's ``check_estimator``.

    Returns
    -------
    failures : dict of str to str
        ``{check name: reason}``, empty without a privacy mechanism. The
        list is exact (every listed check fails, every other one passes) for
        ``classes=None`` and ``classes=[0, 1]``, the test suite's
        configurations, on scikit-learn 1.9; a check whose reason is
        noise-dependent may pass for some seeds, and older scikit-learn
        versions run a few label checks on labels 0 and 1, which then pass
        (an expected failure that passes is reported, not an error). Checks
        a scikit-learn version does not run are ignored by it.

    Examples
    --------
    >>> from skfedpriv import LogisticRegression
    >>> from skfedpriv.estimator_checks import expected_failed_checks
    >>> expected_failed_checks(LogisticRegression())
    {}
    >>> private = LogisticRegression(mechanism="tree", feature_clip_norm=1.0, classes=[0, 1])
    >>> expected_failed_checks(private)["check_classifiers_train"]
    'the check fits labels outside the declared classes, which a private fit refuses'
    """
    if not isinstance(
        estimator, (DWDClassifier, LogisticRegression, DecentralizedLogisticRegression)
    ):
        raise TypeError(f"not an estimator of skfedpriv: {type(estimator).__name__}")
    if estimator.mechanism is None:
        return {}
    failures = _label_failures(estimator)
    if isinstance(estimator, DecentralizedLogisticRegression) and estimator.n_rounds is None:
        failures[_PARTIAL_FIT_CLASSES] = _HORIZON
    if isinstance(estimator, DWDClassifier):
        failures["check_class_weight_classifiers"] = _CLASS_WEIGHT
        if estimator.classes is not None:
            failures["check_classifiers_one_label_sample_weights"] = _ONE_LABEL
            failures["check_classifiers_one_label"] = _ONE_LABEL
    return failures
