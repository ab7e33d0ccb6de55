"""The federated protocol, transport-neutral: site handlers, remote sites, local transport.

A site (:class:`DWDSite`, :class:`LogisticSite`) holds its rows and answers
requests (dicts of arrays and scalars) with fixed-size sums; the server
side (:class:`RemoteSites`, :class:`RemoteLearners`) implements the
estimators' sites / learners interfaces over any *transport*, a callable
``request -> list of replies``. :class:`LocalTransport` calls the sites in
this process; :mod:`skfedpriv.flower` carries the same requests as Flower
messages. :func:`federated_fit` and :func:`federated_partial_fit` drive a
``DWDClassifier`` or ``LogisticRegression`` over a transport.

A private site (:class:`SitePrivacy`, :class:`ContinualSitePrivacy`,
:class:`LearnerPrivacy`) is the trust boundary: K, σ, the clip, the release caps, its batches and rounds come
from its own configuration (declared ``classes``) and its own ledger file
(:class:`SiteLedgerFile`, required), never from a request, and each of its
refusals reaches the server as a :class:`SiteRefusal` with a fixed text
(:data:`REFUSAL_TEXTS`).

Examples
--------
>>> import numpy as np
>>> from skfedpriv import DWDClassifier
>>> from skfedpriv.federated import DWDSite, LocalTransport, federated_fit
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(90, 3)); y = (X[:, 0] + 0.5 * rng.normal(size=90) > 0).astype(int)
>>> g = np.arange(90) % 3
>>> sites = [DWDSite(lambda b, s=s: (X[g == s], y[g == s]), name=f"s{s}") for s in range(3)]
>>> remote = federated_fit(DWDClassifier(), LocalTransport(sites))
>>> local = DWDClassifier().fit(X, y, sample_group=g)
>>> bool(np.allclose(remote.coef_, local.coef_, atol=1e-8))
True
"""

from ._continual_site import ContinualSitePrivacy
from ._learner import LearnerPrivacy, LogisticSite
from ._ledger_file import SiteLedgerFile
from ._refusal import REFUSAL_TEXTS, SiteRefusal
from ._server import (
    LocalTransport,
    RemoteLearners,
    RemoteSites,
    federated_fit,
    federated_partial_fit,
)
from ._site import PROTOCOL_VERSION, DWDSite, SitePrivacy

__all__ = [
    "ContinualSitePrivacy",
    "DWDSite",
    "LearnerPrivacy",
    "LocalTransport",
    "LogisticSite",
    "PROTOCOL_VERSION",
    "REFUSAL_TEXTS",
    "RemoteLearners",
    "RemoteSites",
    "SiteLedgerFile",
    "SitePrivacy",
    "SiteRefusal",
    "federated_fit",
    "federated_partial_fit",
]
