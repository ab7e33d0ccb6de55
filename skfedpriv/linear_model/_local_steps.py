"""One communication round of local SGD for all learners at once.

This is lines 4-10 of Algorithm 1 of Zhang, Zhu, Fay, Johansson (LDP online
federated learning with correlated noise), vectorized over learners: every
present learner starts from the global model ``x^r``, takes ``τ`` clipped
gradient steps on its clients of the round (eq. 2, first line) and returns

    g_i^r = (x^r - z_i^{r,τ}) / (η τ)          (Algorithm 1, line 10).

The loss is the logistic loss of one-vs-rest class models (one model for two
classes). Learners are never looped over in Python: rows of all learners that
belong to local step ``t`` are processed together, and per-learner sums are
segment sums (``np.add.reduceat``) over rows sorted by learner. The only
Python loop is over the ``τ`` local steps.
"""

import numpy as np
from scipy.special import expit

from ..privacy import clip_vectors


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


def local_round(theta, X, targets, codes, *, local_steps, learning_rate,
                clip_norm, alpha=0.0, penalize=None):
    """Run τ local steps for every learner present; return their ``g_i^r``.

    Parameters
    ----------
    theta : ndarray of shape (n_models, p)
        Global model ``x^r`` (one row per one-vs-rest model; the intercept,
        if any, is a column of ``theta`` matched by a column of ones in X).
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
        # d/du log(1 + exp(-s u)) = -s * sigmoid(-s u)
        coef = -st * expit(-st * U)
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
