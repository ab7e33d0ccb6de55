"""Rows to learners and rounds: how a batch of a decentralized stream is played.

A round gives each learner its next row (Wang et al. 2025, section 2: one
loss per learner per round); a batch runs as many rounds as its busiest
learner has rows, the others sit the remaining rounds out (a mask).
"""

from collections import namedtuple

import numpy as np
import scipy.sparse as sp

from .._sites import site_row_indices

#: Where a batch's rows go: learner of each distinct ``sample_group`` label
#: (in batch order), the rows of each label, and the rounds the batch runs.
Allocation = namedtuple("Allocation", ["learner_of_label", "rows", "n_rounds"])


def allocate_rounds(batch, learner_labels):
    """Map a batch's rows to (learner, round); ``learner_labels`` fixed by the stream.

    Learner ``i``'s ``k``-th row of the batch is its row of the batch's
    ``k``-th round; the batch runs ``max_i (rows of learner i)`` rounds.
    """
    index = {v: i for i, v in enumerate(learner_labels.tolist())}
    learner_of_label = np.empty(batch.n_sites, dtype=np.intp)
    for k, label in enumerate(batch.site_labels.tolist()):
        if label not in index:
            raise ValueError(
                f"sample_group names learner {label!r}, which is not one of the "
                f"learners of this stream {learner_labels.tolist()!r}; the "
                "learners are fixed by the first call."
            )
        learner_of_label[k] = index[label]
    rows = site_row_indices(batch.site_codes, batch.n_sites)
    n_rounds = max((len(r) for r in rows), default=0)
    return Allocation(learner_of_label, rows, int(n_rounds))


def round_arrays(batch, allocation, n_learners, classes, fit_intercept):
    """The batch as arrays ``(n_learners, n_rounds, n_params)`` with a row mask.

    The rows ``x_bar = (1, x)`` are dense here: a CSR ``batch.X`` is
    densified one learner's rows at a time, straight into these arrays
    (no dense copy of the batch besides them)."""
    y = np.searchsorted(classes, batch.y)
    shape = (n_learners, allocation.n_rounds)
    start = int(fit_intercept)
    Xr, yr = np.zeros(shape + (start + batch.X.shape[1],)), np.zeros(shape, dtype=np.intp)
    mask = np.zeros(shape, dtype=bool)
    for k, rows in enumerate(allocation.rows):
        i = allocation.learner_of_label[k]
        block = batch.X[rows]
        Xr[i, : len(rows), start:] = block.toarray() if sp.issparse(block) else block
        Xr[i, : len(rows), :start] = 1.0
        yr[i, : len(rows)] = y[rows]
        mask[i, : len(rows)] = True
    return Xr, yr, mask
