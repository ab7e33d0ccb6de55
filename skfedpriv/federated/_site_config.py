"""What every private site checks before it reads a row (no Flower import).

A private site fixes its class set and its ledger file itself and compares
each request with its own configuration; these helpers are shared by the
DWD sites (:mod:`._site`, :mod:`._continual_site`) and the logistic learners
(:mod:`._learner`).
"""

import numbers
import os

import numpy as np

from .._param_validation import InvalidParameterError, Interval
from ._ledger_file import SiteLedgerFile
from ._refusal import MISMATCH, Refused

#: What a site's privacy settings need to survive processes: an integer seed
#: (or None) and a ledger file path.
_PROCESS_SAFE_CONSTRAINTS = {
    "random_state": [Interval(numbers.Integral, 0, None), None],
    "ledger_path": [str, os.PathLike, None],
}


def declared_classes(classes, owner):
    """The sorted label set a private site declares (at least two labels)."""
    if classes is None:
        raise InvalidParameterError(
            f"a private site declares its label set: pass classes to {owner} (the labels "
            "its rows may carry; the server's requests must name the same).")
    classes = np.unique(np.asarray(list(classes)))
    if classes.ndim != 1 or classes.size < 2:
        raise InvalidParameterError(f"classes of {owner} must name at least two labels.")
    return classes


def required_ledger(ledger_path, owner):
    """The private site's ledger file: required and existing, so no run starts from zero."""
    if ledger_path is None:
        raise InvalidParameterError(
            f"a private site keeps its releases in a ledger file of its own: pass ledger_path "
            f"to {owner} (a path at the site, the same for every run and process of the site).")
    if not os.path.isfile(ledger_path):
        raise InvalidParameterError(
            f"no site ledger file at {os.fspath(ledger_path)!r} ({owner}): create it once with "
            "SiteLedgerFile.create(path) when the site is set up; a missing ledger is never "
            "recreated.")
    return SiteLedgerFile(ledger_path)


def labels_differ(request, classes):
    """Whether the request's class list is other than ``classes`` (the site's own)."""
    theirs = request.get("classes")
    try:
        return len(theirs) != len(classes) or np.asarray(theirs).tolist() != classes.tolist()
    except TypeError:
        return True


def refuse_mismatch(checks, site):
    """Refuse (:data:`MISMATCH`) when any ``name: request value differs`` check is True."""
    differ = sorted(name for name, bad in checks.items() if bad)
    if differ:
        raise Refused(MISMATCH, f"site {site}: the request differs on {differ}.")


def checked_theta(request, shape):
    """The request's parameters as an array of ``shape`` with finite entries, or refused."""
    theta = np.asarray(request.get("theta"), dtype=float)
    if theta.shape != shape or not np.all(np.isfinite(theta)):
        raise Refused(MISMATCH, f"parameters of shape {theta.shape}, expected {shape}.")
    return theta
