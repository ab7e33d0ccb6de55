"""One declarative check of the public hyperparameters.

Each estimator declares ``_parameter_constraints``: a dict from each
``__init__`` parameter to a list of accepted constraints (the value is valid
when any one of them accepts it), in the spirit of scikit-learn's own
``_parameter_constraints`` (whose helpers are private, so not imported here).
:func:`validate_parameters` checks all of them at the start of ``fit`` and
``partial_fit`` -- whether or not a parameter is used by the current
settings -- and raises one exception type, :class:`InvalidParameterError`
(both a :class:`ValueError` and a :class:`TypeError`, as scikit-learn's), with
one message format.

A :class:`Registry` is both the list of allowed names of a string option and
the map from each name to its implementation (mechanisms, solvers,
factorizations), so the two cannot drift apart.

Accepted constraints:

* ``None``: the value ``None``;
* ``"boolean"``: ``bool`` or ``numpy.bool_``;
* ``"random_state"``: ``None``, a non-negative ``int``, a
  :class:`numpy.random.Generator` or :class:`numpy.random.RandomState`;
* ``"array-like"``: a list, a tuple or anything with ``__array__`` (ndarray,
  pandas Series, ...);
* a class: ``isinstance(value, cls)``;
* :class:`Interval`, :class:`Options`, :class:`Registry`.
"""

import math
import numbers
from collections.abc import Mapping

import numpy as np

__all__ = ["InvalidParameterError", "Interval", "Options", "Registry", "validate_parameters"]


class InvalidParameterError(ValueError, TypeError):
    """A hyperparameter has a type or value its estimator does not accept.

    It is a :class:`ValueError` and a :class:`TypeError`, like scikit-learn's
    ``InvalidParameterError``, so code catching either keeps working.
    """


class Interval:
    """Real or integral numbers in a range (booleans and NaN excluded).

    Parameters
    ----------
    kind : {numbers.Real, numbers.Integral}
        ``numbers.Real`` accepts finite reals (and integers); ``numbers.Integral``
        only integers.
    low, high : float or None
        Bounds; None is unbounded.
    closed : {"left", "right", "both", "neither"}, default="both"
        Which bounds belong to the interval.
    """

    def __init__(self, kind, low, high, *, closed="both"):
        if kind not in (numbers.Real, numbers.Integral):
            raise ValueError(f"kind must be numbers.Real or numbers.Integral, got {kind!r}.")
        if closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"closed must be left/right/both/neither, got {closed!r}.")
        self.kind, self.low, self.high, self.closed = kind, low, high, closed

    def is_satisfied_by(self, value):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, self.kind):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None:
            low_closed = self.closed in ("left", "both")
            if value < self.low or (value == self.low and not low_closed):
                return False
        if self.high is not None:
            high_closed = self.closed in ("right", "both")
            if value > self.high or (value == self.high and not high_closed):
                return False
        return True

    def __str__(self):
        kind = "an int" if self.kind is numbers.Integral else "a float"
        left = "[" if self.closed in ("left", "both") and self.low is not None else "("
        right = "]" if self.closed in ("right", "both") and self.high is not None else ")"
        low = "-inf" if self.low is None else self.low
        high = "inf" if self.high is None else self.high
        return f"{kind} in the range {left}{low}, {high}{right}"


class Options:
    """One of a fixed set of values (compared with ``==``, strings only)."""

    def __init__(self, *values):
        self.values = tuple(values)

    def is_satisfied_by(self, value):
        return isinstance(value, str) and value in self.values

    def __str__(self):
        return f"a str among {sorted(self.values)!r}"


class Registry(Options, Mapping):
    """Allowed names of an option and the implementation of each.

    Parameters
    ----------
    what : str
        What the names name (used in error messages), e.g. ``"mechanism"``.
    entries : dict
        ``name -> implementation`` (any object: a function, a class, a spec).

    Examples
    --------
    >>> solvers = Registry("solver", {"newton": "N", "mm": "M"})
    >>> solvers["mm"], sorted(solvers)
    ('M', ['mm', 'newton'])
    """

    def __init__(self, what, entries):
        self.what = what
        self._entries = dict(entries)
        super().__init__(*self._entries)

    def __getitem__(self, name):
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise InvalidParameterError(
                f"Unknown {self.what} {name!r}; expected one of {sorted(self._entries)}."
            ) from None

    def __iter__(self):
        return iter(self._entries)

    def __len__(self):
        return len(self._entries)

    def __contains__(self, name):
        return self.is_satisfied_by(name)

    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other


def _is_random_state(value):
    if value is None or isinstance(value, (np.random.Generator, np.random.RandomState)):
        return True
    return (isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
            and value >= 0)


_NAMED = {
    "boolean": (lambda v: isinstance(v, (bool, np.bool_)), "a bool"),
    "random_state": (_is_random_state,
                     "None, a non-negative int, a numpy Generator or a RandomState"),
    "array-like": (lambda v: isinstance(v, (list, tuple)) or hasattr(v, "__array__"),
                   "an array-like"),
}


def _accepts(constraint, value):
    if constraint is None:
        return value is None
    if isinstance(constraint, str):
        return _NAMED[constraint][0](value)
    if isinstance(constraint, type):
        return isinstance(value, constraint)
    return constraint.is_satisfied_by(value)


def _describe(constraint):
    if constraint is None:
        return "None"
    if isinstance(constraint, str):
        return _NAMED[constraint][1]
    if isinstance(constraint, type):
        return f"an instance of {constraint.__name__}"
    return str(constraint)


def validate_parameters(constraints, params, caller):
    """Check ``params`` against ``constraints``; raise on the first mismatch.

    Parameters
    ----------
    constraints : dict
        ``name -> list of constraints`` (see the module docstring).
    params : dict
        ``name -> value``, e.g. ``estimator.get_params(deep=False)``. Every
        name must have constraints (a new hyperparameter cannot go unchecked).
    caller : str
        Named in the message, e.g. ``"DWDClassifier"``.

    Raises
    ------
    InvalidParameterError
        Naming the parameter, what it accepts and what it got.
    """
    for name, value in params.items():
        if name not in constraints:
            raise InvalidParameterError(
                f"{caller} declares no constraint for the parameter {name!r}."
            )
        accepted = constraints[name]
        for constraint in accepted:  # a loop, not any(...): no generator per parameter
            if _accepts(constraint, value):
                break
        else:
            described = [_describe(c) for c in accepted]
            expected = described[0] if len(described) == 1 else (
                ", ".join(described[:-1]) + " or " + described[-1]
            )
            raise InvalidParameterError(
                f"The {name!r} parameter of {caller} must be {expected}. "
                f"Got {value!r} instead."
            )
