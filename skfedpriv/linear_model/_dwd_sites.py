"""The sites interface of :class:`~skfedpriv.DWDClassifier`.

:class:`DWDSites` declares what the estimator asks of the sites holding one
batch of rows, wherever they run: in this process
(:class:`~skfedpriv.linear_model._dwd_solver.SiteData`, what ``fit`` and
``partial_fit`` build from ``X, y, sample_group``) or behind a transport
(:class:`skfedpriv.flower.RemoteSites`). The estimator takes such an object
from outside through :meth:`~skfedpriv.DWDClassifier.fit_sites` and
:meth:`~skfedpriv.DWDClassifier.partial_fit_sites`, which run the same
update as ``fit`` and ``partial_fit``.

Parameters of all one-vs-rest models are held together as ``Theta`` of shape
``(p1, K)``, row 0 the intercept when there is one (``p1 = p + 1``);
curvatures as ``(K, p1, p1)``.
"""

import abc

import numpy as np

from .._loss import as_loss
from .._losses import one_vs_rest_targets
from ..privacy._objective_perturbation import clip_augmented_rows

__all__ = ["DWDSites", "loss_message", "prepare_rows", "side_flags"]


def loss_message(sites, loss):
    """What names the loss in a request to ``sites``: the loss object for
    sites that take one (``speaks_loss_objects``), genDWD's ``q`` for sites
    of a transport whose messages carry only ``q`` (ValueError for another
    loss)."""
    loss = as_loss(loss)
    if getattr(sites, "speaks_loss_objects", False):
        return loss
    if loss.q is None:
        raise ValueError(
            f"these sites ({type(sites).__name__}) speak only genDWD's q; they "
            f"cannot compute summaries of the {loss.name} loss."
        )
    return loss.q


def side_flags(Y, weights):
    """Whether each class model has rows of positive weight with target +1,
    and with target -1: two boolean arrays of shape (K,)."""
    positive = weights > 0
    return (np.any(positive[:, None] & (Y > 0), 0),
            np.any(positive[:, None] & (Y < 0), 0))


def prepare_rows(X, y, sample_weight, classes, *, fit_intercept, class_weight=None,
                 clip_norm=None):
    """One site's rows as the summaries use them (what a site does at ``prepare``).

    Parameters
    ----------
    X : ndarray of shape (n, p)
    y : ndarray of shape (n,)
        Labels, all in ``classes``.
    sample_weight : ndarray of shape (n,)
    classes : ndarray of shape (n_classes,)
    fit_intercept : bool
    class_weight : ndarray of shape (n_classes,) or None
        Weight of each class, multiplied into ``sample_weight``.
    clip_norm : float or None
        With a privacy mechanism: every row weighs one (else ValueError) and
        is clipped so that ``‖(1, x)‖₂ <= clip_norm``.

    Returns
    -------
    X : ndarray of shape (n, p)
        Clipped when ``clip_norm`` is set.
    Y : ndarray of shape (n, K)
        One-vs-rest targets in {-1, +1}: one column for two classes, else
        one per class.
    weights : ndarray of shape (n,)
    """
    Y = one_vs_rest_targets(y, classes)
    weights = sample_weight
    if class_weight is not None:
        lookup = dict(zip(np.asarray(classes).tolist(), np.asarray(class_weight, dtype=float)))
        weights = sample_weight * np.array([lookup[label] for label in y.tolist()], dtype=float)
    if clip_norm is not None and not np.all(weights == 1.0):
        raise ValueError(
            "sample_weight (and class_weight) are not supported with a privacy "
            "mechanism: the sensitivity bounds assume every row weighs one."
        )
    if clip_norm is not None:
        X = clip_augmented_rows(X, float(clip_norm), bool(fit_intercept))
    return X, Y, weights


class DWDSites(abc.ABC):
    """The sites of one batch, as :class:`~skfedpriv.DWDClassifier` asks them.

    A federated runtime implements this interface to let the estimator fit
    on rows it never sees (:meth:`~skfedpriv.DWDClassifier.fit_sites`).
    Every answer is a sum over the sites of a fixed-size summary of each
    site's rows; nothing grows with a site's row count.

    The estimator first reads ``n_features`` and :meth:`labels`, then
    calls :meth:`prepare` once; every other member is used after
    :meth:`prepare`.

    Attributes
    ----------
    n_features : int
        Number of features of every site's rows (known before ``prepare``).
    n_sites : int
        Number of sites (each adds its own noise in :meth:`noised_summary`).
    weight_sum : float
        Total row weight of the batch (after ``prepare``).
    two_sided : ndarray of bool of shape (K,)
        Whether each class model has rows of positive weight on both sides
        in this batch (after ``prepare``).
    rounds : int
        Requests to the sites so far (each one message to every site and one
        reply).
    floats_sent : int
        Numbers one site sent back over all requests.
    """

    # -- before the update ---------------------------------------------------

    @abc.abstractmethod
    def labels(self):
        """The labels the sites' rows carry, or None when the sites do not
        release them (private sites: the label set is then declared).

        Returns
        -------
        labels : array-like or None
        """

    @abc.abstractmethod
    def prepare(self, classes, *, fit_intercept, class_weight=None, clip_norm=None):
        """Fix how the sites form their summaries for this batch.

        Each site turns its rows into targets, weights and (clipped) rows as
        :func:`prepare_rows` does, and refuses labels outside ``classes``.

        Parameters
        ----------
        classes : ndarray of shape (n_classes,)
            The label set of the stream.
        fit_intercept : bool
            Whether rows are augmented with a leading 1.
        class_weight : ndarray of shape (n_classes,) or None
            Weight of each class, multiplied into the row weights.
        clip_norm : float or None
            Set under a privacy mechanism: every row weighs one and is
            clipped to ``‖(1, x)‖₂ <= clip_norm``.
        """

    # -- after prepare -------------------------------------------------------

    @abc.abstractmethod
    def summaries(self, Theta, loss, with_curvature):
        """Summed site summaries at ``Theta`` (paper eqs. 7, 12) of the
        ``loss``: a loss object (:mod:`skfedpriv._loss`) for sites that
        ``speaks_loss_objects``, else genDWD's ``q`` (:func:`loss_message`);
        ``with_curvature`` is a bool or one flag per model (the curvature
        of the models flagged only).

        Returns
        -------
        loss : ndarray of shape (K,)
            ``Σ_i w_i ℓ(u_ik)``.
        grad : ndarray of shape (p1, K)
            ``Σ_i w_i y_ik V_q'(u_ik) x̄_i`` (no ridge term).
        curvature : ndarray of shape (K, p1, p1) or (n_flagged, p1, p1) or None
            ``Σ_i w_i Ṽ_q''(u_ik) x̄_i x̄_iᵀ`` of the models asked for, in
            their order.
        """

    @abc.abstractmethod
    def majorizer(self, loss):
        """``c Σ_i w_i x̄_i x̄_iᵀ``, shape (p1, p1), ``c`` the loss's
        ``curvature_bound`` (``(q+1)²/q`` for genDWD): a global bound of the
        loss curvature."""

    @abc.abstractmethod
    def curvature_product(self, Theta, V, loss, exact=None):
        """``Σ_i w_i Ṽ_q''(u_ik) x̄_i x̄_iᵀ v_k`` at ``Theta`` for every model,
        shape (p1, K); for the models where ``exact`` (bool of shape (K,)) is
        True, with ``V_q''`` itself (``gendwd_curvature``) in place of the
        smoothed ``Ṽ_q''``."""

    @abc.abstractmethod
    def line_losses(self, Theta, S, steps, loss):
        """Summed losses at ``Theta + t S`` for each ``t`` in ``steps``, shape
        (len(steps), K), in one round."""

    @abc.abstractmethod
    def noised_summary(self, kind, Theta, loss, std, random_state):
        """Sum over sites of each site's summary plus the site's own noise.

        What a site-local Gaussian mechanism needs from the sites, wherever
        they run: each site adds
        :func:`~skfedpriv.privacy._objective_perturbation.site_noise` of std
        ``std`` to its summary before it leaves the site.

        Parameters
        ----------
        kind : {'gradient', 'curvature', 'gram'}
            The gradient or curvature sum at ``Theta``, or the Gram matrix
            ``Σ_i x̄_i x̄_iᵀ``.
        Theta : ndarray of shape (p1, K)
        loss : loss object or float
            See :meth:`summaries`.
        std : float
            Noise std each site must use; sites that calibrate their own
            noise refuse (RuntimeError) when theirs differs.
        random_state : numpy.random.Generator
            The generator of sites that draw in this process; sites that
            draw their own noise do not use it.
        """

    def advance(self, Theta, S, steps):
        """``Theta + steps * S``, one step per model (sites that keep scores
        may update them for free)."""
        return Theta + steps * S

    #: Whether :meth:`inference_summary` is answered (coefficient inference).
    offers_inference = False

    def inference_summary(self, Theta, derivative, curvature):
        """Summed :class:`~skfedpriv.linear_model._inference_sites.InferenceSummary`
        at ``Theta`` (the loss's derivatives ``derivative(u)`` and
        ``curvature(u)`` on margins): what coefficient inference needs.
        Sites that do not offer it (``offers_inference`` False) raise
        NotImplementedError."""
        raise NotImplementedError(
            f"{type(self).__name__} does not offer the inference summary; fit with "
            "inference=False.")

    #: Whether :meth:`second_order_summary` is answered (the stream's
    #: second-order correction, ``shift_correction``). In-process sites are
    #: read directly instead (:func:`~._second_order.batch_moments`).
    offers_second_order = False

    def second_order_summary(self, Theta, cov, loss):
        """The batch's summed moments of the second-order correction at
        ``Theta`` (:func:`~._second_order.site_second_order_moments`, with
        the smoothing widths of :func:`~._second_order.smoothing_widths`
        from the batch's Gram matrix and the covariance ``cov``, shape
        ``(K, p1, p1)``): ``(S, ∂B, ∂S)`` of shapes ``(K, p1, p1, p1)``,
        ``(K, p1, p1, p1)`` and ``(K, p1², p1²)``. Raw sums: sites that do
        not offer them (``offers_second_order`` False) raise
        NotImplementedError."""
        raise NotImplementedError(
            f"{type(self).__name__} does not send the second-order moments; fit with "
            "shift_correction=None.")

    #: Whether every site can noise its own summaries ('local-gaussian'):
    #: in-process sites (the package draws for them) or remote sites that
    #: each hold a :class:`~skfedpriv.federated.SitePrivacy`.
    noises_summaries = True

    #: Whether each site holds its own noise stream of 'local-tree' /
    #: 'local-blt' and answers :meth:`continual_summary` (remote sites).
    holds_noise_streams = False

    def continual_summary(self, Theta, q, noise, step):
        """Summed ``(a_b, J_b)`` at ``Theta`` (:mod:`skfedpriv.privacy.
        _continual_summaries`), each site's plus its own stream's increment
        of step ``step``; ``noise`` (:class:`~skfedpriv.privacy.
        _continual_summaries.SiteNoiseStreams`, no streams) is what the
        server expects of them.
        Sites that do not hold streams raise NotImplementedError."""
        raise NotImplementedError(
            f"{type(self).__name__} holds no noise streams of its own.")

    def reduced_precision(self, on):
        """A speed hint of the L-BFGS phase: the next summaries may be
        formed in float32 (``on``) until switched off. Sites that ignore it
        (the default) return False; sites that follow it return True and
        answer in float64 again after ``reduced_precision(False)``."""
        return False

    def single_matrices(self, on):
        """A speed hint of the damped phase: the next curvature matrices may
        be formed from float32 products (``on``), for a damped step only.
        Sites that ignore it (the default) return False."""
        return False

    rounds = 0
    floats_sent = 0
    #: whether the requests may name the loss by a loss object
    #: (:mod:`skfedpriv._loss`); otherwise they carry genDWD's ``q``
    #: (:func:`loss_message`)
    speaks_loss_objects = False
