"""Where a private stream stands, so that no position is continued twice.

A private training estimator that is copied (``pickle``, ``copy.deepcopy``,
``joblib.dump``) and continued on both copies from the same position would
publish two models whose difference is the noise-free difference of their
updates: the copies draw the same noise from the same generator state. Every
committed update of a private stream therefore carries a stream id (128 bits
of OS entropy drawn when the stream starts) and its position (the number of
updates committed on the stream). A continuation from ``(stream, position)``
is accepted once:

* in this process, by :data:`_NEXT` (stream id -> next position), checked
  before the call reads any data and checked and advanced under a lock when
  the update is committed;
* across processes and runs, when the estimator's ``budget`` is backed by a
  file, by the budget file's stream table: read before the call reads any
  data or charges (:meth:`~skfedpriv.privacy.PrivacyBudget.stream_at`), and
  checked and advanced in one SQLite transaction at the commit
  (:meth:`~skfedpriv.privacy.PrivacyBudget.advance_stream`).

Without a budget file a copy continued in another process is not seen: not
continuing two copies of a training estimator is then the publisher's duty.
"""

import threading
import uuid

from ..privacy import PrivacyBudgetError

__all__ = ["StreamReplayError", "check_position", "commit_position", "new_stream_id"]

# stream id -> the position its next continuation must start from (this process)
_NEXT = {}
_LOCK = threading.Lock()


class StreamReplayError(PrivacyBudgetError):
    """A private stream was asked to continue from a position already continued.

    Raised by ``partial_fit`` of a copy (pickle, deep copy) of a private
    training estimator when the original or another copy already continued
    from the same point: the second continuation would draw the same noise
    and publish the noise-free difference of the two updates.
    """


def new_stream_id():
    """128 bits of OS entropy naming a new private stream."""
    return uuid.uuid4().hex


def _refusal(owner):
    return StreamReplayError(
        f"This {owner} continues a private stream from a point that was already "
        "continued (a copy or pickle of the training estimator, or the original "
        "after a copy continued): both would draw the same noise, and the two "
        "releases would give away the noise-free difference of their updates. "
        "Continue the stream on one object only, or call fit to start a new stream."
    )


def check_position(stream_id, position, budget, owner):
    """Raise :class:`StreamReplayError` if this process, or the file of
    ``budget``, already continued ``stream_id`` from ``position`` (a read:
    nothing is recorded; :func:`commit_position` decides)."""
    with _LOCK:
        taken = _NEXT.get(stream_id)
    if taken is not None and taken != position:
        raise _refusal(owner)
    if budget is not None and budget.path is not None and not budget.stream_at(
            stream_id, position):
        raise _refusal(owner)


def commit_position(stream_id, position, budget, owner):
    """Record that ``stream_id`` moves from ``position`` to ``position + 1``.

    Checked and advanced atomically in this process and, when ``budget`` is
    backed by a file, in the file (one transaction). Raises
    :class:`StreamReplayError` when the position was already taken, with
    nothing recorded.
    """
    with _LOCK:
        taken = _NEXT.get(stream_id)
        if taken is not None and taken != position:
            raise _refusal(owner)
        if budget is not None and budget.path is not None:
            if not budget.advance_stream(stream_id, position):
                raise _refusal(owner)
        _NEXT[stream_id] = position + 1
