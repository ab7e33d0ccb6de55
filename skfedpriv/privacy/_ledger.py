"""Privacy accounting: the ledger of spends, its entries and its composition
rules, and the error raised when a spend does not fit a budget.

The budget that charges a ledger lives in :mod:`._budget`.
"""

import math
from dataclasses import dataclass

from ._calibration import _check_delta, _epsilon_for_mu, zcdp_to_dp
from ._events import EVENTS

__all__ = ["LedgerEntry", "PrivacyBudgetError", "PrivacyLedger"]


class PrivacyBudgetError(RuntimeError):
    """Raised when a spend would exceed a privacy budget, or the budget cannot be charged.

    The spend that raises is not recorded: the budget and its ledger are left
    exactly as they were before the call. Also raised by every operation of
    an in-memory budget that was copied into another process (see
    :class:`PrivacyBudget`).
    """


_MECHANISMS = tuple(EVENTS)


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded privacy spend.

    Attributes
    ----------
    note : str
        What the spend was for (free text).
    mechanism : {"laplace", "pure", "gaussian", "zcdp", "approx"}
        How the spend composes, see :class:`PrivacyLedger`.
    epsilon, delta : float
        The (ε, δ) guarantee of this spend on its own.
    rho : float or None
        zCDP parameter (Gaussian and zCDP spends).
    sigma, sensitivity : float or None
        Noise standard deviation and L2 sensitivity (Gaussian spends).
    """

    note: str
    mechanism: str
    epsilon: float
    delta: float
    rho: float | None = None
    sigma: float | None = None
    sensitivity: float | None = None


class PrivacyLedger:
    """Record of privacy spends and their composition.

    Each call to :meth:`record` appends a :class:`LedgerEntry`. The total
    privacy loss (:meth:`total`) composes the entries by these rules:

    1. ``"laplace"`` / ``"pure"`` entries (ε-DP, δ = 0): basic composition,
       ``ε_pure = Σ ε_i``.
    2. ``"approx"`` entries (a generic (ε, δ) claim): basic composition,
       ``ε_approx = Σ ε_i``, ``δ_approx = Σ δ_i``.
    3. ``"gaussian"`` and ``"zcdp"`` entries form the Gaussian group G, composed
       at a target ``δ_G`` (by default ``Σ δ_i`` over G):

       * if every entry in G is ``"gaussian"`` (σ_i, Δ_i known), the adaptive
         composition is *exactly* one Gaussian mechanism with
         ``μ = Δ/σ = √(Σ (Δ_i/σ_i)²) = √(2 Σ ρ_i)`` ([2]_ Cor. 3.3; for k
         releases of the same σ and Δ this is one release with sensitivity
         ``Δ√k``), so ``ε_G`` is the exact analytic ε of that Gaussian at
         ``δ_G`` (:func:`gaussian_epsilon`);
       * otherwise ``ρ = Σ ρ_i`` (zCDP composition, [3]_ Lemma 2.3) and
         ``ε_G = zcdp_to_dp(ρ, δ_G)``;
       * with the default ``δ_G``, ``ε_G`` is further capped by ``Σ ε_i``
         over G (basic composition of the recorded per-entry guarantees, which
         :meth:`record` verifies are valid).

    The total is ``(ε_pure + ε_approx + ε_G, δ_approx + δ_G)`` — the sum of
    guarantees of independent parts is valid by basic composition.

    A ledger is plain data: it pickles, and a copy is independent.

    Attributes
    ----------
    entries : tuple of LedgerEntry
        The recorded spends, oldest first (read-only view).

    References
    ----------
    .. [1] C. Dwork and A. Roth, "The Algorithmic Foundations of Differential
       Privacy", 2014, Theorem 3.16 (basic composition).
    .. [2] J. Dong, A. Roth and W. J. Su, "Gaussian Differential Privacy",
       J. R. Stat. Soc. B 84(1), 2022, Corollary 3.3 (composition of
       Gaussian mechanisms) and Corollary 2.13 (privacy profile).
    .. [3] M. Bun and T. Steinke, "Concentrated Differential Privacy:
       Simplifications, Extensions, and Lower Bounds", TCC 2016, Lemma 2.3.
    .. [4] B. Balle and Y.-X. Wang, ICML 2018, Theorem 8.

    Examples
    --------
    >>> from skfedpriv.privacy import PrivacyLedger, gaussian_sigma
    >>> ledger = PrivacyLedger()
    >>> _ = ledger.record("counts", "laplace", epsilon=0.5)
    >>> s = gaussian_sigma(1.0, 1e-6, 1.0)
    >>> for t in range(4):
    ...     _ = ledger.record(f"round {t}", "gaussian", delta=1e-6,
    ...                       sigma=s, sensitivity=1.0)
    >>> eps, delta = ledger.total()
    >>> eps < 0.5 + 4 * 1.0, delta
    (True, 4e-06)
    """

    def __init__(self):
        self._entries = []

    @property
    def entries(self):
        return tuple(self._entries)

    def __len__(self):
        return len(self._entries)

    def __repr__(self):
        return f"PrivacyLedger(<{len(self._entries)} entries>)"

    @staticmethod
    def make_entry(note, mechanism, epsilon=None, delta=0.0, *, sigma=None,
                   sensitivity=None, rho=None, require_epsilon=False):
        """Validate a spend and build its :class:`LedgerEntry` (not recorded).

        See :meth:`record` for the parameters. With ``require_epsilon=True``
        (a budget's spends) ``epsilon`` must be given for every mechanism;
        otherwise Gaussian and zCDP spends may leave it to the exact value.
        """
        if not isinstance(note, str):
            raise TypeError(f"note must be a str, got {type(note).__name__}.")
        if mechanism not in EVENTS:
            raise ValueError(f"mechanism must be one of {_MECHANISMS}, got {mechanism!r}.")
        epsilon, delta, rho, sigma, sensitivity = EVENTS[mechanism].validate(
            mechanism, epsilon, delta, sigma=sigma, sensitivity=sensitivity, rho=rho,
            require_epsilon=require_epsilon)
        return LedgerEntry(note, mechanism, epsilon, delta, rho=rho, sigma=sigma,
                           sensitivity=sensitivity)

    def record(self, note, mechanism, epsilon=None, delta=0.0, *, sigma=None,
               sensitivity=None, rho=None):
        """Validate and append one spend.

        Parameters
        ----------
        note : str
            What the spend is for.
        mechanism : {"laplace", "pure", "gaussian", "zcdp", "approx"}
            * ``"laplace"`` / ``"pure"``: an ε-DP release; needs ``epsilon``,
              ``delta`` must be 0 (``sensitivity`` optional, informational).
            * ``"gaussian"``: needs ``sigma``, ``sensitivity`` (L2) and
              ``0 < delta < 1``. ``epsilon`` defaults to the exact analytic ε
              at ``delta``; if given, it must be a valid claim (at least the
              exact ε), otherwise ValueError.
            * ``"zcdp"``: a ρ-zCDP release; needs ``rho`` and ``0 < delta <
              1``; ``epsilon`` defaults to ``zcdp_to_dp(rho, delta)`` and, if
              given, must be at least that.
            * ``"approx"``: any (ε, δ)-DP release; needs ``epsilon``.
        epsilon, delta : float
            The guarantee of this spend on its own.
        sigma, sensitivity, rho : float, optional
            Mechanism details, see ``mechanism``.

        Returns
        -------
        entry : LedgerEntry
            The recorded entry.
        """
        entry = self.make_entry(note, mechanism, epsilon, delta, sigma=sigma,
                                sensitivity=sensitivity, rho=rho)
        self._entries.append(entry)
        return entry

    def _append(self, entry):
        self._entries.append(entry)

    @property
    def rho(self):
        """Total zCDP ρ of the Gaussian and zCDP entries (Σ ρ_i)."""
        return float(sum(e.rho for e in self._entries
                         if EVENTS[e.mechanism].composes == "gaussian"))

    def total(self, delta=None):
        """Total (ε, δ) of all recorded spends under the ledger's rules.

        Parameters
        ----------
        delta : float, optional
            Target δ for the Gaussian/zCDP group (``0 < delta < 1``). Defaults
            to the sum of the δ's recorded for those entries. Ignored when the
            ledger holds no Gaussian or zCDP entry.

        Returns
        -------
        epsilon, delta : tuple of float
            A valid (ε, δ)-DP guarantee for the composition of all entries
            (``(0.0, 0.0)`` for an empty ledger).
        """
        eps_basic = 0.0
        delta_basic = 0.0
        group = []
        for e in self._entries:
            if EVENTS[e.mechanism].composes == "gaussian":
                group.append(e)
            else:
                eps_basic += e.epsilon
                delta_basic += e.delta
        if not group:
            return float(eps_basic), float(delta_basic)

        if delta is None:
            delta_g = float(sum(e.delta for e in group))
            cap = float(sum(e.epsilon for e in group))
            if delta_g >= 1.0:
                # The recorded δ's add to >= 1: nothing better than the sum.
                return eps_basic + cap, delta_basic + delta_g
        else:
            delta_g = _check_delta(delta, positive=True)
            cap = math.inf

        if all(EVENTS[e.mechanism].exact_gaussian for e in group):
            mu = math.sqrt(sum((e.sensitivity / e.sigma) ** 2 for e in group))
            eps_g = _epsilon_for_mu(mu, delta_g)
        else:
            eps_g = zcdp_to_dp(sum(e.rho for e in group), delta_g)
        eps_g = min(eps_g, cap)
        return float(eps_basic + eps_g), float(delta_basic + delta_g)
