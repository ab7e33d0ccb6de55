"""Privacy spends as typed events (#21): the ledger dispatches on the event
class of each spend and composes by its type."""

import math

import pytest

from skfedpriv.privacy import PrivacyLedger, gaussian_epsilon, gaussian_sigma
from skfedpriv.privacy._calibration import zcdp_to_dp
from skfedpriv.privacy._events import EVENTS, GaussianEvent, PureEvent, ZCDPEvent


def test_every_mechanism_name_has_an_event_class():
    assert set(EVENTS) == {"laplace", "pure", "gaussian", "zcdp", "approx"}
    assert EVENTS["gaussian"] is GaussianEvent and EVENTS["zcdp"] is ZCDPEvent
    assert EVENTS["laplace"] is EVENTS["pure"] is PureEvent


def test_composition_by_type():
    """Pure and approx spends add up; Gaussian spends compose exactly as one
    Gaussian mechanism (μ² adds); a zCDP spend joins them by adding ρ."""
    sigma = gaussian_sigma(1.0, 1e-6, 1.0)
    ledger = PrivacyLedger()
    ledger.record("a", "laplace", epsilon=0.3)
    ledger.record("b", "approx", epsilon=0.2, delta=1e-7)
    for _ in range(3):
        ledger.record("g", "gaussian", delta=1e-6, sigma=sigma, sensitivity=1.0)
    eps, delta = ledger.total(delta=1e-5)
    assert eps == pytest.approx(0.5 + gaussian_epsilon(sigma, 1e-5, math.sqrt(3)), rel=1e-9)
    assert delta == pytest.approx(1e-7 + 1e-5)
    ledger.record("z", "zcdp", rho=0.01, delta=1e-6)
    eps, _ = ledger.total(delta=1e-5)
    rho = 3 * 0.5 / sigma**2 + 0.01
    assert eps == pytest.approx(0.5 + zcdp_to_dp(rho, 1e-5), rel=1e-9)


def test_a_new_kind_of_spend_is_one_class_and_one_registry_line(monkeypatch):
    class HalfEpsilonEvent(PureEvent):
        """A toy kind: an ε-DP spend whose recorded guarantee is ε itself."""

    monkeypatch.setitem(EVENTS, "toy", HalfEpsilonEvent)
    ledger = PrivacyLedger()
    ledger.record("x", "toy", epsilon=0.25)
    ledger.record("y", "laplace", epsilon=0.5)
    assert ledger.total() == (0.75, 0.0)
    with pytest.raises(ValueError, match="mechanism must be one of"):
        PrivacyLedger().record("x", "no-such", epsilon=1.0)
