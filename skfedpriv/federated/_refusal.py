"""What a private site tells the server when it refuses a request: a fixed text.

A private site's reply is a release, and so is its refusal. Every refusal of
a private site therefore reaches the server as a :class:`SiteRefusal` whose
text is one of the constants below, chosen from the request and the site's
own configuration and ledger only: no label, count, side or sum, and the
same text on neighbouring data sets (one row replaced). The reason in
detail goes to the site's own log (logger ``skfedpriv.federated``), where the
site's operator reads it.

A failure that depends on the rows themselves (a label outside the site's
declared classes, a weight other than one, a non-finite value) means the
rows are outside the domain the site's guarantee is stated on; the site
refuses every request on that batch with :data:`REFUSED`, the text of any
refusal it does not classify.
"""

import logging

from ..privacy import PrivacyBudgetError

__all__ = ["EXHAUSTED", "MISMATCH", "NOT_IN_ORDER", "RAW_SUMS", "REFUSED", "REFUSAL_TEXTS",
           "SiteRefusal"]

#: A protocol version, class set, q, clip, fit_intercept, horizon, batch or
#: hyperparameter other than the site's own configuration.
MISMATCH = "site refused: the request does not match the site's own configuration"
#: A release past what the site's calibration covers (its ledger's caps, its horizon).
EXHAUSTED = "site refused: the releases the site's calibration covers are used up"
#: A logistic round asked again, or before its turn.
NOT_IN_ORDER = "site refused: the site answers each round of its stream once, in order"
#: Raw sums asked of a private site.
RAW_SUMS = "site refused: a private site sends noised summaries only"
#: Anything else (the site's rows outside its declared domain included).
REFUSED = "site refused the request"

REFUSAL_TEXTS = frozenset({MISMATCH, EXHAUSTED, NOT_IN_ORDER, RAW_SUMS, REFUSED})

_LOG = logging.getLogger("skfedpriv.federated")


class SiteRefusal(PermissionError):
    """A private site's refusal, as the server receives it (one of :data:`REFUSAL_TEXTS`)."""


class Refused(PermissionError):
    """A refusal with its reason, raised inside the site: the reason stays at the site.

    Parameters
    ----------
    text : str
        One of :data:`REFUSAL_TEXTS`: what the server is told.
    detail : str
        The reason for the site's own log (may name data-derived values).
    """

    def __init__(self, text, detail):
        super().__init__(detail)
        self.text = text


def _text_of(exc):
    if isinstance(exc, Refused):
        return exc.text
    if isinstance(exc, PrivacyBudgetError):  # a noise stream past its horizon
        return EXHAUSTED
    return REFUSED


def answer_or_refuse(site_name, answer, request):
    """``answer(request)``, every exception of it turned into a bare :class:`SiteRefusal`.

    The original exception is logged at the site and not chained (the
    refusal is raised once the handler is left): the refusal the server
    holds carries its fixed text and nothing else.
    """
    try:
        return answer(request)
    except Exception as exc:  # noqa: BLE001 - every failure is a refusal
        _LOG.warning("site %s refused a request: %s: %s", site_name, type(exc).__name__, exc)
        text = _text_of(exc)
    raise SiteRefusal(text)
