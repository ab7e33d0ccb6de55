"""Few rows: a factored fit solved in the span of the rows (issue #23).

With the same ridge on every penalized coefficient, a Newton step of the
factored path (:mod:`._factored_curvature`) never leaves the span of the
rows seen: the loss's gradient is a combination of rows, the ridge's is the
coefficient itself, and the Woodbury solve ``H⁻¹g`` of a vector in the span
is in the span (so is the majorization step's). From a start and a centre in
the span, every iterate is ``β = Xᵀa`` and the fit over ``p`` features is a
fit over coordinates in an orthonormal basis of the span (Hastie and
Tibshirani 2004, "Efficient quadratic regularization for expression arrays",
the reduction of ridge-penalized models with ``p >> n``): with the Gram
matrix of the ``m`` rows ``G = X Xᵀ = L Lᵀ`` (Cholesky; pivoted, of rank
``r``, when ``G`` is singular: ``G[π][:, π] = L Lᵀ``), the rows of
``Q = L₁⁻¹ X_π`` (``L₁`` the leading ``r x r`` block, ``X_π`` the pivot rows)
are orthonormal and row ``i``'s coordinates are its row of ``L``. Losses,
ridge (``‖Qᵀγ‖ = ‖γ‖``), curvature and prior are the same functions of the
``r`` coordinates ``γ = Qβ``, so the solver runs unchanged on the ``m x r``
rows ``L``, and ``β = X_πᵀ L₁⁻ᵀ γ`` at the end: one Gram matrix
(``m² p / 2`` flops, each pair of batches' formed once and kept by the rows),
one Cholesky factor, one pass over the rows for ``β``; no Newton step passes
over the ``p`` columns.

A start or centre whose distance to the span exceeds ``_OUTSIDE`` of its
norm (none the solver produces: a factored state's estimates are in the
span) is not reduced: the caller takes the unreduced factored path.
"""

import numpy as np
from scipy.linalg.lapack import dpotrf, dpstrf, dtrtrs

from ._factored_curvature import CurvatureStack, RowBlock, RowCurvature, _block_gram

__all__ = ["RowSpan", "reduce_to_row_span"]

# a start or centre farther than this (relative) from the span is not reduced
_OUTSIDE = 1e-12


def _factor_gram(gram):
    """``(L, order, rank)`` with ``gram[order][:, order] = L Lᵀ``, ``L`` of
    shape (m, rank): Cholesky, pivoted (LAPACK ``pstrf``, its default
    tolerance: the rows it leaves out are within ``sqrt(m ε)`` of their norm
    from the span of the others) when ``gram`` is not positive definite
    (repeated or dependent rows)."""
    factor, info = dpotrf(gram, lower=1, clean=1)
    if info == 0:
        return factor, np.arange(len(gram)), len(gram)
    factor, piv, rank, _ = dpstrf(gram, lower=1)
    return np.tril(factor)[:, :rank], piv - 1, int(rank)


class RowSpan:
    """An orthonormal basis of the span of ``blocks``' rows (see the module
    doc), from their Gram matrix.

    Parameters
    ----------
    blocks : sequence of RowBlock
        Their rows stacked in this order are the ``m`` rows.
    """

    def __init__(self, blocks):
        self.blocks = tuple(blocks)
        self.offsets = np.cumsum([0] + [len(b) for b in self.blocks])
        self.gram = _block_gram(self.blocks)
        L, order, self.rank = _factor_gram(self.gram)
        self.coordinates = np.empty((len(order), self.rank))
        self.coordinates[order] = L
        self.pivots, self.L1 = order[:self.rank], L[:self.rank]

    def _rows_times(self, V):
        """``X V`` of the stacked rows (one pass), shape (m, K)."""
        return np.vstack([np.asarray(b.X @ V) for b in self.blocks])

    def reduce(self, V):
        """Coordinates ``Q V`` of ``V`` (p, K) in the basis, shape (r, K)."""
        if not V.any():
            return np.zeros((self.rank, V.shape[1]))
        return dtrtrs(self.L1, self._rows_times(V)[self.pivots], lower=1)[0]

    def expand(self, coordinates):
        """``Qᵀ γ`` for coordinates (r, K): the vectors of shape (p, K)."""
        a = np.zeros((self.offsets[-1], coordinates.shape[1]))
        a[self.pivots] = dtrtrs(self.L1, coordinates, lower=1, trans=1)[0]
        return sum(np.asarray(b.X.T @ a[start:stop])
                   for b, start, stop in zip(self.blocks, self.offsets, self.offsets[1:]))

    def in_span(self, V):
        """Coordinates of ``V`` (p, K), or None when a column lies farther
        than ``_OUTSIDE`` of its norm from the span (not reduced)."""
        coordinates = self.reduce(V)
        if V.any():
            residual = np.linalg.norm(V - self.expand(coordinates), axis=0)
            if np.any(residual > _OUTSIDE * np.linalg.norm(V, axis=0)):
                return None
        return coordinates

    def reduced_blocks(self, groups, fit_intercept):
        """One :class:`RowBlock` of coordinates per group of consecutive
        blocks (``groups``: ``(first, stop)`` block indices), their Gram
        matrices taken from ``G``."""
        spans = [slice(self.offsets[a], self.offsets[b]) for a, b in groups]
        reduced = [RowBlock(self.coordinates[s], fit_intercept, copy=False) for s in spans]
        for block in reduced:
            block.in_span = True
        for block, rows in zip(reduced, spans):
            for other, columns in zip(reduced, spans):
                block.preset_gram(other, self.gram[rows, columns])
        return reduced


def _diag_in_span(diag, start, rank):
    """The diagonal of a factored curvature in the coordinates: the
    intercept's entry and the penalized one (the same on every coefficient,
    else None)."""
    penalized = diag[start:]
    if len(penalized) and not np.all(penalized == penalized[0]):
        return None
    value = penalized[0] if len(penalized) else 0.0
    return np.concatenate((diag[:start], np.full(rank, value)))


class _Reduced:
    """A batch's solve in the span: the reduced sites, start, prior and
    centre, and the map of its results back to the ``p1`` coordinates."""

    def __init__(self, sites, span, batch_blocks, reduced_batch, old, start):
        self.sites, self.span, self.start = sites, span, start
        self.batch_blocks, self.reduced_batch, self.old = batch_blocks, reduced_batch, old

    def to_span(self, Theta, coordinates=None):
        """``Theta`` (p1, K) in the coordinates (intercept kept)."""
        if coordinates is None:
            coordinates = self.span.reduce(Theta[self.start:])
        return np.vstack((Theta[:self.start], coordinates))

    def from_span(self, Theta):
        """Reduced ``Theta`` back to (p1, K)."""
        return np.vstack((Theta[:self.start], self.span.expand(Theta[self.start:])))

    def results(self, Theta, Theta_span, curvature, info, frozen):
        """:func:`~._newton.solve_batch`'s results in the ``p1`` coordinates:
        frozen models exactly where they were, the curvature on the original
        rows; ``floats_sent`` counts the rows once (``p1`` numbers each, the
        average site's) beside the requests in the span."""
        out = self.from_span(Theta_span)
        if frozen is not None:
            out = np.where(np.asarray(frozen)[None, :], Theta, out)
        p1 = Theta.shape[0]
        rows = -(-sum(len(b) for b in self.batch_blocks) // max(self.sites.n_sites, 1))
        info = dict(info, floats_sent=info["floats_sent"] + rows * p1)
        return out, self.curvature_from_span(curvature, p1), info

    def curvature_from_span(self, curvature, p1):
        """A reduced :class:`CurvatureStack` on the batch's (and earlier)
        rows in the ``p1`` coordinates: the same scales, the original rows."""
        sizes = np.cumsum([len(b) for b in self.batch_blocks])[:-1]
        originals = {id(reduced): original for original, reduced in self.old}
        models = []
        for model in curvature:
            blocks, scales = [], []
            for block, s in zip(model.blocks, model.scales):
                if block is self.reduced_batch:
                    blocks += self.batch_blocks
                    scales += np.split(s, sizes)
                else:
                    blocks.append(originals[id(block)])
                    scales.append(s)
            diag = model.diag
            penalized = diag[self.start] if len(diag) > self.start else 0.0
            full = np.concatenate((diag[:self.start], np.full(p1 - self.start, penalized)))
            models.append(RowCurvature(blocks, scales, full, model.intercept))
        return CurvatureStack(models)


def _prior_blocks(prior):
    """The distinct row blocks of a factored prior, in order."""
    if prior is None:
        return []
    seen = {}
    for model in prior:
        for block in model.blocks:
            seen.setdefault(id(block), block)
    return list(seen.values())


def reduce_to_row_span(sites, Theta, prior, center, fit_intercept):
    """The solve of :func:`~._newton.solve_batch` on factored rows, moved
    into the span of the rows: ``(reduced, Theta, prior, center)`` with
    ``reduced`` (its ``sites`` and the maps back), or None when it does not
    apply (a start or centre outside the span, no rows, a penalty that is
    not the same on every coefficient)."""
    start = int(fit_intercept)
    old = _prior_blocks(prior)
    batch = list(sites.row_blocks())
    span = RowSpan(old + batch)
    if span.rank == 0:
        return None
    theta_span = span.in_span(Theta[start:])
    center_span = (theta_span if center is None or center is Theta
                   else span.in_span(center[start:]))
    if theta_span is None or center_span is None:
        return None
    diags = [] if prior is None else [_diag_in_span(m.diag, start, span.rank) for m in prior]
    if any(diag is None for diag in diags):
        return None
    groups = [(i, i + 1) for i in range(len(old))] + [(len(old), len(old) + len(batch))]
    blocks = span.reduced_blocks(groups, fit_intercept)
    reduced = _Reduced(sites.on_rows(blocks[-1]), span, batch, blocks[-1],
                       list(zip(old, blocks[:-1])), start)
    prior_span = None
    if prior is not None:
        by_id = {id(original): block for original, block in reduced.old}
        prior_span = CurvatureStack([
            RowCurvature([by_id[id(b)] for b in model.blocks], model.scales, diag,
                         model.intercept) for model, diag in zip(prior, diags)])
    center_out = None if center is None else reduced.to_span(center, center_span)
    return reduced, reduced.to_span(Theta, theta_span), prior_span, center_out
