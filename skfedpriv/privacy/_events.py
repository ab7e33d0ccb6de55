"""Privacy spends as typed events that compose by type.

As dp-accounting's ``DpEvent`` classes do, each kind of spend is one class
that validates its parameters and says how it composes:

* :class:`PureEvent` (``"laplace"`` / ``"pure"``): ε-DP, basic composition;
* :class:`ApproxEvent` (``"approx"``): a generic (ε, δ) claim, basic
  composition;
* :class:`GaussianEvent` (``"gaussian"``): σ and the L2 sensitivity known,
  composed exactly as one Gaussian mechanism with the others of its type;
* :class:`ZCDPEvent` (``"zcdp"``): a ρ-zCDP release, composed by adding ρ.

:data:`EVENTS` maps a spend's mechanism name to its class;
:class:`~skfedpriv.privacy.PrivacyLedger` dispatches on it. A new kind of
spend is one class here and one registry line.
"""

from ._calibration import (
    _check_delta,
    _check_gaussian,
    _check_positive_finite,
    _epsilon_for_mu,
    check_privacy_params,
    gaussian_zcdp,
    zcdp_to_dp,
)

__all__ = ["ApproxEvent", "EVENTS", "GaussianEvent", "PureEvent", "ZCDPEvent"]


def _checked_claim(epsilon, exact, mechanism, required=False):
    """Return the claimed ε, or ``exact`` if None and not ``required``;
    reject invalid claims."""
    if epsilon is None and not required:
        return float(exact)
    epsilon, _ = check_privacy_params(epsilon)
    if epsilon < exact * (1 - 1e-9):
        raise ValueError(
            f"epsilon={epsilon!r} is not a valid guarantee for this "
            f"{mechanism!r} spend: it is at least {exact!r} at this delta."
        )
    return epsilon


class PrivacyEvent:
    """A kind of spend. ``validate`` returns the ledger entry's fields
    ``(epsilon, delta, rho, sigma, sensitivity)``; ``composes`` names its
    composition group: ``"basic"`` (ε and δ add up) or ``"gaussian"`` (the
    Gaussian group: exact Gaussian composition when every member is
    ``exact_gaussian``, else zCDP)."""

    composes = "basic"
    exact_gaussian = False

    @staticmethod
    def validate(mechanism, epsilon, delta, *, sigma, sensitivity, rho, require_epsilon):
        raise NotImplementedError


class PureEvent(PrivacyEvent):
    """An ε-DP release (Laplace or any pure mechanism)."""

    @staticmethod
    def validate(mechanism, epsilon, delta, *, sigma, sensitivity, rho, require_epsilon):
        if sigma is not None or rho is not None:
            raise ValueError(f"{mechanism!r} spends take no sigma or rho.")
        epsilon, delta = check_privacy_params(epsilon, delta)
        if delta != 0.0:
            raise ValueError(f"{mechanism!r} spends are pure ε-DP: delta must be 0.")
        if sensitivity is not None:
            sensitivity = _check_positive_finite(sensitivity, "sensitivity")
        return epsilon, 0.0, None, None, sensitivity


class GaussianEvent(PrivacyEvent):
    """A Gaussian release of noise σ and L2 sensitivity Δ."""

    composes = "gaussian"
    exact_gaussian = True

    @staticmethod
    def validate(mechanism, epsilon, delta, *, sigma, sensitivity, rho, require_epsilon):
        if sigma is None or sensitivity is None:
            raise ValueError("'gaussian' spends need sigma and sensitivity.")
        sigma, sensitivity = _check_gaussian(sigma, sensitivity)
        delta = _check_delta(delta, positive=True)
        exact = _epsilon_for_mu(sensitivity / sigma, delta)
        epsilon = _checked_claim(epsilon, exact, mechanism, require_epsilon)
        return epsilon, delta, gaussian_zcdp(sigma, sensitivity), sigma, sensitivity


class ZCDPEvent(PrivacyEvent):
    """A ρ-zCDP release."""

    composes = "gaussian"

    @staticmethod
    def validate(mechanism, epsilon, delta, *, sigma, sensitivity, rho, require_epsilon):
        if rho is None:
            raise ValueError("'zcdp' spends need rho.")
        if sigma is not None or sensitivity is not None:
            raise ValueError(
                "'zcdp' spends take rho only; record Gaussian releases as "
                "'gaussian' with sigma and sensitivity."
            )
        rho = _check_positive_finite(rho, "rho")
        delta = _check_delta(delta, positive=True)
        epsilon = _checked_claim(epsilon, zcdp_to_dp(rho, delta), mechanism, require_epsilon)
        return epsilon, delta, rho, None, None


class ApproxEvent(PrivacyEvent):
    """Any (ε, δ)-DP release."""

    @staticmethod
    def validate(mechanism, epsilon, delta, *, sigma, sensitivity, rho, require_epsilon):
        if sigma is not None or rho is not None or sensitivity is not None:
            raise ValueError("'approx' spends take only epsilon and delta.")
        epsilon, delta = check_privacy_params(epsilon, delta)
        return epsilon, delta, None, None, None


#: mechanism name of a spend -> its event class
EVENTS = {
    "laplace": PureEvent,
    "pure": PureEvent,
    "gaussian": GaussianEvent,
    "zcdp": ZCDPEvent,
    "approx": ApproxEvent,
}
