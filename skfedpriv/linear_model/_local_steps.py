"""One communication round of local SGD for all learners at once.

This is lines 4-10 of Algorithm 1 of Zhang, Zhu, Fay, Johansson (LDP online
federated learning with correlated noise), vectorized over learners: every
present learner starts from the global model ``x^r``, takes ``τ`` clipped
gradient steps on its clients of the round (eq. 2, first line) and returns

    g_i^r = (x^r - z_i^{r,τ}) / (η τ)          (Algorithm 1, line 10).

The loss is the logistic loss of one-vs-rest class models (one model for two
classes; :mod:`skfedpriv._losses`), on rows ``x_bar = (1, x)`` (intercept
first). Learners are never looped over in Python: rows of all learners that
belong to local step ``t`` are processed together, and per-learner sums are
segment sums (``np.add.reduceat``) over rows sorted by learner. The only
Python loop is over the ``τ`` local steps.

:class:`LogisticLearners` declares what a federated runtime offers the
server of :class:`~skfedpriv.LogisticRegression`: each round, every present
learner's local update message given the global model and the round
settings. :class:`BatchLearners` is the in-process implementation over the
rows of a batch; :mod:`skfedpriv.flower` implements it over remote learners.
"""

import abc

import numpy as np
import scipy.sparse as sp

from .._loss import LogisticLoss
from .._losses import add_intercept_column, one_vs_rest_targets, penalty_mask
from ..privacy import clip_rows, clip_vectors


def chunk_layout(codes, local_steps):
    """Assign each row to a learner slot and a local step.

    Each learner's rows, kept in stream order, are split into ``local_steps``
    consecutive chunks of sizes as equal as possible (the first
    ``n_l mod τ`` chunks one row larger, as :func:`numpy.array_split`).

    Parameters
    ----------
    codes : ndarray of int of shape (n_rows,)
        Learner index of each row (any non-negative ints).
    local_steps : int
        Number of local steps τ.

    Returns
    -------
    order : ndarray of shape (n_rows,)
        Stable permutation sorting rows by learner (stream order kept within a
        learner).
    learners : ndarray of shape (n_present,)
        Distinct learner indices present, increasing.
    slot : ndarray of shape (n_rows,)
        Position of each (sorted) row's learner in ``learners``.
    step : ndarray of shape (n_rows,)
        Local step of each sorted row.
    chunk_size : ndarray of shape (n_rows,)
        Number of rows in the sorted row's chunk.
    """
    codes = np.asarray(codes)
    order = np.argsort(codes, kind="stable")
    learners, starts, counts = np.unique(
        codes[order], return_index=True, return_counts=True
    )
    slot = np.repeat(np.arange(learners.size), counts)
    pos = np.arange(order.size) - np.repeat(starts, counts)
    q = np.repeat(counts // local_steps, counts)
    rem = np.repeat(counts % local_steps, counts)
    big = rem * (q + 1)  # rows in the larger chunks
    in_big = pos < big
    step = np.where(
        in_big, pos // (q + 1), rem + (pos - big) // np.maximum(q, 1)
    )
    chunk_size = np.where(in_big, q + 1, q)
    return order, learners, slot, step, chunk_size


def round_rows(codes, n_rounds):
    """The rows of each round when a batch is streamed over ``n_rounds`` rounds.

    Each learner's rows, in order, are split into ``n_rounds`` consecutive
    blocks (as :func:`numpy.array_split`); block ``r`` of every learner is
    round ``r``.

    Returns
    -------
    rounds : list of ndarray
        ``n_rounds`` arrays of row indices.
    """
    if n_rounds == 1:
        return [np.arange(len(codes))]
    order, _, _, block, _ = chunk_layout(codes, n_rounds)
    perm = np.argsort(block, kind="stable")
    bounds = np.searchsorted(block[perm], np.arange(n_rounds + 1))
    by_round = order[perm]
    return [by_round[bounds[r]:bounds[r + 1]] for r in range(n_rounds)]


def local_round(theta, X, targets, codes, *, local_steps, learning_rate,
                clip_norm, alpha=0.0, penalize=None, loss=None):
    """Run τ local steps for every learner present; return their ``g_i^r``.

    Parameters
    ----------
    theta : ndarray of shape (n_models, p)
        Global model ``x^r`` (one row per one-vs-rest model; the intercept,
        if any, is the first column of ``theta``, matched by the first
        column of ones of X).
    X : ndarray of shape (n_rows, p)
        The round's rows (already clipped and augmented).
    targets : ndarray of shape (n_rows, n_models)
        Targets in {-1, +1}.
    codes : ndarray of int of shape (n_rows,)
        Learner of each row.
    local_steps : int
        τ.
    learning_rate : float
        Local step size η.
    clip_norm : float
        Bound ``B`` on each per-example gradient. With ``n_models`` models the
        per-example gradient of each model is clipped to ``B / sqrt(n_models)``,
        so the per-example gradient of all models together has norm ``<= B``.
    alpha : float, default=0.0
        L2 strength; the step is ``z <- z - η (mean clipped gradient + α D z)``
        with ``D`` the mask ``penalize``. The penalty is never clipped (it
        does not depend on the data).
    penalize : ndarray of shape (p,), default=None
        1 for penalized columns, 0 for the intercept. None penalizes all.
    loss : MarginLoss, default=None
        The margin loss of the local steps (:mod:`skfedpriv._loss`); None
        is the logistic loss.

    Returns
    -------
    learners : ndarray of shape (n_present,)
        Learner indices present in the round (increasing).
    g : ndarray of shape (n_present, n_models, p)
        ``g_i^r = (x^r - z_i^{r,τ}) / (η τ)`` of each present learner.

    Notes
    -----
    A chunk is a mini-batch of clients: the step uses the mean of the
    clipped per-example gradients of the chunk's rows. A learner with fewer
    rows than τ has empty chunks; it takes no step there (neither gradient
    nor penalty), and still divides by τ in ``g_i^r``.
    """
    n_models, p = theta.shape
    loss = LogisticLoss() if loss is None else loss
    order, learners, slot, step, chunk_size = chunk_layout(codes, local_steps)
    X = X[order]
    targets = targets[order]
    per_model_clip = clip_norm / np.sqrt(n_models)
    if penalize is None:
        penalize = np.ones(p)
    Z = np.repeat(theta[None], learners.size, axis=0)  # (n_present, K, p)
    for t in range(local_steps):
        sel = np.flatnonzero(step == t)
        if sel.size == 0:
            continue
        Xt = X[sel]
        st = targets[sel]
        lt = slot[sel]
        # margins u_jk = z_{l_j, k} . x_j
        U = np.einsum("jkp,jp->jk", Z[lt], Xt)
        # d/du loss(s u) = s * loss'(s u)
        coef = st * loss.derivative(st * U)
        grads = coef[:, :, None] * Xt[:, None, :]  # (n_t, K, p)
        grads = clip_vectors(grads.reshape(-1, p), per_model_clip).reshape(grads.shape)
        grads /= chunk_size[sel][:, None, None]
        # rows of `sel` are sorted by learner: segment sums per learner
        seg = np.flatnonzero(np.r_[True, lt[1:] != lt[:-1]])
        active = lt[seg]
        G = np.add.reduceat(grads, seg, axis=0)
        if alpha:
            G += alpha * penalize * Z[active]
        Z[active] -= learning_rate * G
    g = (theta[None] - Z) / (learning_rate * local_steps)
    return learners, g


def learner_messages(theta, X, y, codes, classes, settings):
    """Lines 4-10 for the learners of rows ``X``: each one's ``g_i^r``, un-noised.

    Rows are clipped to ``settings.feature_clip_norm`` (if set) and
    augmented to ``x_bar = (1, x)``; labels become one-vs-rest targets.

    Parameters
    ----------
    theta : ndarray of shape (n_models, p)
        The global model.
    X : ndarray of shape (n_rows, n_features)
    y : ndarray of shape (n_rows,)
    codes : ndarray of int of shape (n_rows,)
        Learner of each row.
    classes : ndarray of shape (n_classes,)
    settings : object
        With ``local_steps``, ``learning_rate``, ``clip_norm``,
        ``feature_clip_norm``, ``alpha`` and ``fit_intercept`` (validated).

    Returns
    -------
    learners : ndarray of shape (n_present,)
        The codes present, increasing.
    messages : ndarray of shape (n_present, n_models * p)
        Their flattened ``g_i^r``.
    """
    n_models, p = theta.shape
    if not X.shape[0]:
        return np.empty(0, dtype=np.intp), np.zeros((0, n_models * p))
    if settings.feature_clip_norm is not None:
        X = clip_rows(X, settings.feature_clip_norm)
    learners, g = local_round(
        theta, add_intercept_column(X, settings.fit_intercept), one_vs_rest_targets(y, classes),
        codes, local_steps=settings.local_steps, learning_rate=settings.learning_rate,
        clip_norm=settings.clip_norm, alpha=settings.ridge("local-steps"),
        penalize=penalty_mask(p, settings.fit_intercept),
        loss=getattr(settings, "loss", None),
    )
    return learners, g.reshape(learners.size, n_models * p)


class RoundRequest:
    """What the server sends its learners in one round.

    Attributes
    ----------
    step : int
        Round within the current call (``0`` in ``partial_fit``; ``0 ..
        n_rounds - 1`` in ``fit``).
    index : int
        Round ``r`` of the stream.
    theta : ndarray of shape (n_models, p)
        The global model ``x^r`` (intercept first).
    classes : ndarray of shape (n_classes,)
    settings : LogisticSettings
        The validated hyperparameters.
    noise_scale : float
        σ the server expects each private learner's noise to have (0: none).
    """

    __slots__ = ("step", "index", "theta", "classes", "settings", "noise_scale")

    def __init__(self, step, index, theta, classes, settings, noise_scale):
        self.step = step
        self.index = index
        self.theta = theta
        self.classes = classes
        self.settings = settings
        self.noise_scale = noise_scale


class LogisticLearners(abc.ABC):
    """The learners of :class:`~skfedpriv.LogisticRegression`, as its server reaches them.

    The interface a federated runtime implements to run Algorithm 1 of the
    correlated-noise paper: the estimator
    (:meth:`~skfedpriv.LogisticRegression.fit_sites`,
    :meth:`~skfedpriv.LogisticRegression.partial_fit_sites`) sends each
    round's :class:`RoundRequest` and averages the messages it gets back;
    it never sees rows. Whoever adds the learners' noise is behind this
    interface: the messages returned are the ones that leave the learners.

    Attributes
    ----------
    holds_noise : bool
        Whether the learners draw and keep their own noise streams (a
        private stream must then continue with learners that do).
    """

    holds_noise = False

    @abc.abstractmethod
    def describe(self, n_rounds):
        """What the learners tell the server at the start of a call.

        Parameters
        ----------
        n_rounds : int
            Rounds the stream will ask of them.

        Returns
        -------
        n_features : int
        labels : array-like or None
            The class labels of their rows, or None when the learners keep
            them private (the label set must then be declared).
        """

    @abc.abstractmethod
    def local_updates(self, request):
        """One round: the message of every learner present.

        Parameters
        ----------
        request : RoundRequest

        Returns
        -------
        labels : ndarray of shape (n_present,)
            The present learners' labels; learners new to the stream in the
            same round in the order they are listed here.
        messages : ndarray of shape (n_present, n_models * p)
            Each learner's ``ĝ_i^r`` (``g_i^r`` plus its noise increment
            when private), flattened from ``(n_models, p)``.
        """


class BatchLearners(LogisticLearners):
    """The learners of a batch of rows, in this process.

    Parameters
    ----------
    X : ndarray or CSR matrix
        The validated rows; CSR rows are densified one round's rows at a
        time (``fit``: about ``n / n_rounds`` rows of ``p`` floats).
    y : ndarray
        The labels.
    site_labels : ndarray of shape (n_learners,)
        Learner labels (``numpy.unique`` order).
    site_codes : ndarray of int of shape (n_rows,)
        Learner of each row (index into ``site_labels``).
    n_rounds : int
        Rounds the rows are split into: each learner's rows, in order, in
        ``n_rounds`` consecutive blocks (as :func:`numpy.array_split`),
        block ``r`` its clients of round ``r``.
    noise : LearnerNoise or None
        The learners' noise streams (held by the estimator in process,
        advanced by every round).
    """

    def __init__(self, X, y, site_labels, site_codes, n_rounds=1, noise=None):
        self.X, self.y = X, y
        self.site_labels = site_labels
        self.site_codes = site_codes
        self.noise = noise
        self._rounds = round_rows(site_codes, n_rounds)

    def describe(self, n_rounds):
        return self.X.shape[1], np.unique(self.y)

    def local_updates(self, request):
        rows = self._rounds[request.step]
        X = self.X[rows]
        if sp.issparse(X):
            X = X.toarray()  # one round's rows, dense (the local steps' updates are)
        learners, messages = learner_messages(
            request.theta, X, self.y[rows], self.site_codes[rows],
            request.classes, request.settings,
        )
        labels = self.site_labels[learners]
        if self.noise is not None:  # lines 11-12
            messages = self.noise.add(labels.tolist(), messages)
        return labels, messages
