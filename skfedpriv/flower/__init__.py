"""Federated DWD and logistic regression across processes and machines with Flower.

``pip install "skfedpriv[flower]"``. Each site runs a Flower ClientApp that
holds its own rows (:func:`make_client_app`); the server runs a ServerApp
holding a :class:`~skfedpriv.DWDClassifier` (:func:`make_server_app`).
:class:`RemoteSites` implements the estimator's sites interface
(:class:`~skfedpriv.linear_model.DWDSites`) over a transport, and the server
calls the estimator's public ``fit_sites`` / ``partial_fit_sites`` on it, so
the fitted model equals the in-process ``fit`` on the pooled rows up to
floating-point summation order, in the same number of rounds.

With a :class:`SitePrivacy` (``mechanism='local-gaussian'``), clipping,
noise and release counting happen at the site; the server only ever
receives noised summaries, besides the site's row and feature counts (the
same for neighbouring data sets: one row replaced). A private site is the
trust boundary: K, σ, the clip, the release caps and its batches come from
its own configuration (declared ``classes``) and its own ledger file
(``ledger_path``, required), never from a request, and each of its
refusals reaches the server as a :class:`SiteRefusal` with a fixed text
(:data:`REFUSAL_TEXTS`), whatever the server asks. With a
:class:`ContinualSitePrivacy` (``mechanism='local-tree'`` or
``'local-blt'``) the site also holds its own prefix-sum noise stream in
that file and answers each batch of its horizon once, in order (request
``continual``).

Requests (``op``): ``describe`` (row count, feature count; labels unless
private), ``prepare`` (weight sum; unless private, which sides of each
one-vs-rest model are present),
``summary``, ``gram``, ``curvature_product``, ``line_losses``,
``inference_summary`` and ``second_order_summary`` (raw sums, refused by
private sites), ``noised``
(gradient, curvature or Gram matrix plus the site's own Gaussian noise)
and ``continual`` (the batch's linearized summaries plus the next
increment of the site's own stream). A request for sums names its loss by
the loss's registry spec (entries ``loss`` and ``loss-<param>``, e.g.
``loss='gendwd', loss-q=1.0``; since protocol version 5): a non-private
site computes the sums of any margin loss of the registry, so a
``LogisticRegression(solver='newton')`` fits on the same sites; a private
site only the genDWD loss of its own :class:`SitePrivacy`.

Logistic regression (Algorithm 1 of the correlated-noise paper): each
learner is a :class:`LogisticSite` (``make_client_app(...,
protocol='logistic')``) holding its rows and, with a
:class:`LearnerPrivacy`, its own correlated-noise stream; the server's
:class:`~skfedpriv.LogisticRegression` sends the global model each round and
steps with the mean of the learners' messages ``ĝ_i^r`` (request
``round``). :class:`RemoteLearners` implements the estimator's learners
interface (:class:`~skfedpriv.linear_model.LogisticLearners`) over a
transport, and the server calls the public ``fit_sites`` /
``partial_fit_sites`` on it. :func:`federated_fit` and :func:`federated_partial_fit` take
either estimator.

Everything but :func:`make_client_app`, :func:`make_server_app` and
:class:`GridTransport` is the transport-neutral protocol of
:mod:`skfedpriv.federated`, re-exported here, and works without Flower
(``LocalTransport`` runs the same protocol in one process).
"""

from ..federated import (
    REFUSAL_TEXTS,
    ContinualSitePrivacy,
    DWDSite,
    LearnerPrivacy,
    LocalTransport,
    LogisticSite,
    RemoteLearners,
    RemoteSites,
    SiteLedgerFile,
    SitePrivacy,
    SiteRefusal,
    federated_fit,
    federated_partial_fit,
)
from ._apps import GridTransport, make_client_app, make_server_app

__all__ = [
    "ContinualSitePrivacy",
    "DWDSite",
    "GridTransport",
    "LearnerPrivacy",
    "LocalTransport",
    "LogisticSite",
    "RemoteLearners",
    "RemoteSites",
    "REFUSAL_TEXTS",
    "SiteLedgerFile",
    "SitePrivacy",
    "SiteRefusal",
    "federated_fit",
    "federated_partial_fit",
    "make_client_app",
    "make_server_app",
]
