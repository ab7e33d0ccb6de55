"""The rules that keep the package's axes apart (#12), checked on the source.

* Privacy noise is drawn only under ``skfedpriv/privacy/``: no estimator,
  solver or Flower module calls a generator's ``laplace`` / ``normal`` /
  ``standard_normal`` / ``exponential`` itself.
* ``skfedpriv/federated/`` (the protocol) and ``skfedpriv/flower/`` (its
  Flower adapter) drive estimators only through their public API: no
  private attribute or method of another object is reached (``x._name``
  where ``x`` is not ``self`` or ``cls``).
* Every ``__init__`` parameter of every estimator has a declared constraint.
"""

import ast
import inspect
import pathlib

import pytest

from skfedpriv import DecentralizedLogisticRegression, DWDClassifier, LogisticRegression
from skfedpriv.preprocessing import BoundedScaler, RowNormClipper

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "skfedpriv"
DRAWS = {"laplace", "normal", "standard_normal", "exponential", "gamma"}


def _modules(*parts):
    for path in sorted(PACKAGE.joinpath(*parts).rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def _calls_to(tree, names):
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in names):
            yield node


@pytest.mark.parametrize("part", ["linear_model", "federated", "flower"],
                         ids=["estimators", "protocol", "runtime"])
def test_no_noise_is_drawn_outside_privacy(part):
    found = [f"{path.relative_to(PACKAGE)}:{call.lineno} .{call.func.attr}()"
             for path, tree in _modules(part) for call in _calls_to(tree, DRAWS)]
    assert found == []


def test_the_rule_would_see_a_draw():
    tree = ast.parse("def f(rng):\n    return rng.laplace(scale=1.0, size=3)\n")
    assert len(list(_calls_to(tree, DRAWS))) == 1


def _private_reaches(tree):
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        yield node


@pytest.mark.parametrize("part", ["federated", "flower"])
def test_the_protocol_uses_no_private_member_of_other_objects(part):
    found = [f"{path.relative_to(PACKAGE)}:{node.lineno} .{node.attr}"
             for path, tree in _modules(part) for node in _private_reaches(tree)]
    assert found == []


def test_the_private_member_rule_would_see_an_estimator_method():
    tree = ast.parse("def f(est):\n    return est._update(1)\n")
    assert len(list(_private_reaches(tree))) == 1


@pytest.mark.parametrize("Estimator", [DWDClassifier, LogisticRegression,
                                       DecentralizedLogisticRegression, RowNormClipper,
                                       BoundedScaler])
def test_every_parameter_is_declared(Estimator):
    parameters = set(inspect.signature(Estimator).parameters)
    assert parameters == set(Estimator._parameter_constraints)
