"""The declared horizon of a noise stream: its round count, the shape of one
round, and the error raised past the horizon.

Correlated noise (:mod:`._tree`, :mod:`._noise_stream`, the factorizations)
is calibrated for a declared number of rounds only; asking for a round past
it raises :class:`HorizonExceededError` and changes nothing.
"""

import numbers

from ._ledger import PrivacyBudgetError

__all__ = ["HorizonExceededError"]


class HorizonExceededError(PrivacyBudgetError):
    """Raised when a stream or tree is asked for a round past its horizon.

    A :class:`~skfedpriv.privacy.PrivacyBudgetError` (hence a
    ``RuntimeError``): the noise was calibrated for the declared number of
    rounds only. The object that raises is left exactly as it was before the
    call.
    """


def _check_n_rounds(n_rounds, name="n_rounds"):
    if isinstance(n_rounds, bool) or not isinstance(n_rounds, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {n_rounds!r}.")
    if n_rounds < 1:
        raise ValueError(f"{name} must be a positive integer, got {n_rounds}.")
    return int(n_rounds)


def _as_shape(shape):
    if shape is None:
        return ()
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    return tuple(int(s) for s in shape)
