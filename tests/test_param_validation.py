"""Tests of the declarative hyperparameter check (skfedpriv._param_validation)."""

import math
import numbers

import numpy as np
import pytest

from skfedpriv._param_validation import (
    InvalidParameterError,
    Interval,
    Options,
    Registry,
    validate_parameters,
)


@pytest.mark.parametrize(
    "closed, low_ok, high_ok",
    [("both", True, True), ("left", True, False), ("right", False, True),
     ("neither", False, False)],
)
def test_interval_bounds_follow_closed(closed, low_ok, high_ok):
    interval = Interval(numbers.Real, 0, 1, closed=closed)
    assert interval.is_satisfied_by(0) is low_ok
    assert interval.is_satisfied_by(1.0) is high_ok
    assert interval.is_satisfied_by(0.5)
    assert not interval.is_satisfied_by(-1e-12)
    assert not interval.is_satisfied_by(1 + 1e-12)


@pytest.mark.parametrize("value", [True, np.bool_(False), math.nan, math.inf, "1", None])
def test_interval_refuses_bools_non_finite_and_non_numbers(value):
    assert not Interval(numbers.Real, None, None).is_satisfied_by(value)


def test_integral_interval_refuses_floats_accepts_numpy_ints():
    interval = Interval(numbers.Integral, 1, None)
    assert interval.is_satisfied_by(np.int64(3))
    assert not interval.is_satisfied_by(3.0)
    assert not interval.is_satisfied_by(0)


def test_registry_is_the_options_and_the_implementation_map():
    registry = Registry("solver", {"newton": len, "mm": abs})
    assert registry["mm"] is abs
    assert sorted(registry) == ["mm", "newton"] and len(registry) == 2
    assert "newton" in registry and "other" not in registry
    assert registry.is_satisfied_by("mm") and not registry.is_satisfied_by(None)
    with pytest.raises(InvalidParameterError, match="Unknown solver 'other'"):
        registry["other"]
    with pytest.raises(InvalidParameterError):
        registry[["unhashable"]]


def test_invalid_parameter_error_is_value_and_type_error():
    assert issubclass(InvalidParameterError, ValueError)
    assert issubclass(InvalidParameterError, TypeError)


CONSTRAINTS = {
    "rate": [Interval(numbers.Real, 0, None, closed="neither")],
    "kind": [None, Options("a", "b")],
    "seed": ["random_state"],
    "flag": ["boolean"],
    "classes": [None, "array-like"],
    "owner": [dict],
}
VALID = {"rate": 0.1, "kind": None, "seed": None, "flag": True, "classes": [0, 1],
         "owner": {}}


def test_valid_parameters_pass():
    validate_parameters(CONSTRAINTS, VALID, "Est")
    validate_parameters(CONSTRAINTS, {**VALID, "kind": "b", "seed": np.random.default_rng(0),
                                      "classes": np.arange(2)}, "Est")
    validate_parameters(CONSTRAINTS, {**VALID, "seed": np.random.RandomState(0)}, "Est")


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("rate", 0, r"must be a float in the range \(0, inf\)"),
        ("kind", "c", r"must be None or a str among \['a', 'b'\]"),
        ("seed", -1, "non-negative int"),
        ("seed", 1.5, "non-negative int"),
        ("flag", 1, "must be a bool"),
        ("classes", "ab", "array-like"),
        ("owner", [], "an instance of dict"),
    ],
)
def test_each_mismatch_names_the_parameter_what_it_accepts_and_the_value(name, value, expected):
    with pytest.raises(InvalidParameterError, match=expected) as info:
        validate_parameters(CONSTRAINTS, {**VALID, name: value}, "Est")
    assert f"'{name}' parameter of Est" in str(info.value)
    assert repr(value) in str(info.value)


def test_a_parameter_without_constraints_is_refused():
    with pytest.raises(InvalidParameterError, match="no constraint for the parameter 'new'"):
        validate_parameters(CONSTRAINTS, {**VALID, "new": 1}, "Est")


def test_parameter_layout_round_trip():
    from skfedpriv._losses import add_intercept_column, penalty_mask, split_intercept

    rng = np.random.default_rng(0)
    X, coef, intercept = rng.normal(size=(5, 3)), rng.normal(size=(2, 3)), rng.normal(size=2)
    theta = np.column_stack([intercept, coef])  # (n_models, 1 + p): intercept first
    scores = add_intercept_column(X, True) @ theta.T
    np.testing.assert_allclose(scores, X @ coef.T + intercept)
    got_coef, got_intercept = split_intercept(theta, True)
    np.testing.assert_array_equal(got_coef, coef)
    np.testing.assert_array_equal(got_intercept, intercept)
    np.testing.assert_array_equal(penalty_mask(4, True), [0, 1, 1, 1])
    np.testing.assert_array_equal(penalty_mask(3, False), [1, 1, 1])
    assert add_intercept_column(X, False) is X
    no_coef, no_intercept = split_intercept(coef, False)
    np.testing.assert_array_equal(no_coef, coef)
    np.testing.assert_array_equal(no_intercept, np.zeros(2))
