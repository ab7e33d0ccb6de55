"""A transport that records the exchanges, for tests that look at exactly
what the server sent and received (production's LocalTransport keeps none)."""

from skfedpriv.federated import LocalTransport


class RecordingTransport(LocalTransport):
    """:class:`~skfedpriv.federated.LocalTransport` keeping ``log``: the
    ``(request, replies)`` of every request the sites answered (a refused
    request raises before it is logged)."""

    def __init__(self, sites):
        super().__init__(sites)
        self.log = []

    def __call__(self, request):
        replies = super().__call__(request)
        self.log.append((dict(request), replies))
        return replies
