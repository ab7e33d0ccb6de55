"""The curvature in factored form, for few rows and many features (issue #23).

While the rows seen and their Gram matrix take fewer numbers than the
``p1 x p1`` matrix (``m p1 + m² < p1²``, ``m`` below about ``0.62 p1``;
:func:`factored_is_smaller`), a model's curvature matrix (plus ridge, plus the prior of earlier batches) is kept as

``H = diag(r) + Σ_b Z_bᵀ Z_b``,  ``Z_b = diag(s_b) X̄_b``,

the rows ``X̄_b`` of each batch (``[1, X_b]`` with an intercept) scaled by
``s_b = sqrt(w Ṽ''(u))``: ``m p1`` numbers instead of ``p1²``. A Newton
system is solved through the ``m x m`` matrix ``M = I + Z_pen Z_penᵀ / c``
(Woodbury; ``c`` the ridge of the penalized block, the same on every
penalized coordinate), the unpenalized intercept eliminated exactly by its
Schur complement ``σ = r_0 + zᵀ M⁻¹ z`` (``z = s``, the intercept column of
``Z``). ``M`` needs only the rows' Gram matrix ``X Xᵀ``, formed once per
pair of batches and kept, so every Newton step costs ``O(m³ + m p)``; in
the coordinates of the span of the rows (:mod:`._row_span`, where the
solver runs these systems when it can) ``O(m³)``.

:class:`RowSites` asks in-process sites for these rows (a summary kind only
:class:`~skfedpriv.linear_model._dwd_solver.SiteData` answers: the rows'
weighted features themselves, which the remote protocol never sends, so
remote sites keep the dense ``p1 x p1`` sums). :func:`curvature_form`
chooses the form of a batch; :class:`CurvatureStack` is the state (and the
public ``curvature_``), forming the dense matrices only on request.
"""

import mmap
import threading

import numpy as np
import scipy.sparse as sp
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.linalg.lapack import dpotrf, dpotrs, spotrf, spotrs

__all__ = ["CurvatureStack", "RowBlock", "RowCurvature", "RowSites", "curvature_form"]

# up to this many parameters the dense matrix (at most 40 000 numbers) costs
# little and stays the path: the factored one reaches the same optimum to
# tol, not the same digits (scikit-learn's sample-weight check compares a
# weighted fit with one on repeated rows, which may take the other form)
_DENSE_UP_TO = 200


def factored_is_smaller(n_rows, p1):
    """Whether ``n_rows`` rows of ``p1`` numbers and their ``n_rows x
    n_rows`` Gram matrix take fewer numbers than the ``p1 x p1`` matrix
    (``n_rows`` below about ``0.62 p1``)."""
    return n_rows * p1 + n_rows * n_rows < p1 * p1


# from this many rows a factor asked in single precision is factored in float32
# (spotrf: 0.30 ms against dpotrf's 0.55 ms at 400 x 400, one BLAS thread);
# below, the float32 copy and its call cost about what they save
SINGLE_FROM = 256
# ... and only where cond(M) <= 1 + trace(M) - m (M = I + a PSD matrix: every
# eigenvalue at least 1, the largest at most 1 plus the PSD part's trace) is
# at most this: a float32 solve then errs by at most about 6e-4 relative
# (n = 400, p = 2 000 / 10 000: 400-700)
SINGLE_MAX_COND = 1e4


# numpy asks the kernel for huge pages for arrays from 4 MiB on (madvise),
# and where the kernel must compact memory to find them (defrag=madvise,
# this machine's setting), the first touch of a fresh 32 MB copy stalled
# 0.1-0.16 s instead of 9 ms on ordinary pages (benchmarks/README.md, "Few
# rows"). Copies of the rows from this size on are made with numpy's advice
# off (still reusing memory the allocator holds: 1.1 ms for 6.4 MB), or,
# where numpy offers no switch, in an anonymous memory map
_ORDINARY_PAGES_FROM = 1 << 22
_HUGEPAGE_SWITCH = getattr(getattr(getattr(np, "_core", None), "multiarray", None),
                           "_set_madvise_hugepage", None)
_HUGEPAGE_LOCK = threading.Lock()


def _private_copy(X):
    """A copy of the rows ``X`` that no caller holds (dense rows of at least
    ``_ORDINARY_PAGES_FROM`` bytes on pages numpy does not advise as huge)."""
    if sp.issparse(X) or X.nbytes < _ORDINARY_PAGES_FROM:
        return X.copy()
    if _HUGEPAGE_SWITCH is not None:
        # a process-wide hint: ours are the only toggles, under one lock
        with _HUGEPAGE_LOCK:
            advised = _HUGEPAGE_SWITCH(False)
            try:
                return X.copy()
            finally:
                _HUGEPAGE_SWITCH(advised)
    out = np.frombuffer(mmap.mmap(-1, X.nbytes), dtype=X.dtype).reshape(X.shape)
    np.copyto(out, X)
    return out


class RowBlock:
    """One batch's rows ``X`` (a private copy unless ``copy=False``), with
    the Gram matrices ``X X_otherᵀ`` against other blocks kept once formed."""

    # rows of coordinates in the span of other rows (:mod:`._row_span`): their
    # curvature stays factored (the form is chosen in the original coordinates)
    in_span = False

    def __init__(self, X, fit_intercept, copy=True):
        self.X = _private_copy(X) if copy else X
        self.fit_intercept = bool(fit_intercept)
        self._grams = {}

    def __len__(self):
        return self.X.shape[0]

    def __getstate__(self):
        # the Gram matrices are formed again when needed (keyed by identity)
        return {"X": self.X, "fit_intercept": self.fit_intercept, "_grams": {}}

    def preset_gram(self, other, product):
        """Keep ``product`` as ``X X_otherᵀ`` (known from elsewhere)."""
        self._grams[id(other)] = (other, product)

    def gram(self, other):
        """``X X_otherᵀ`` of the features (no intercept column)."""
        key = id(other)
        if key not in self._grams:
            if id(self) in other._grams and other is not self:
                return other._grams[id(self)][1].T
            product = self.X @ other.X.T
            self._grams[key] = (other, product.toarray() if sp.issparse(product)
                                else np.asarray(product))
        return self._grams[key][1]

    def scores(self, v):
        """``X̄ v`` for ``v`` of shape (p1,)."""
        if not self.fit_intercept:
            return np.asarray(self.X @ v)
        return np.asarray(self.X @ v[1:]) + v[0]

    def sums(self, t):
        """``X̄ᵀ t`` for ``t`` of shape (m,)."""
        out = np.asarray(self.X.T @ t)
        return np.concatenate(([t.sum()], out)) if self.fit_intercept else out


class RowCurvature:
    """``diag(r) + Σ_b Z_bᵀ Z_b`` of one model (see the module doc).

    Parameters
    ----------
    blocks : tuple of RowBlock
    scales : tuple of ndarray
        ``s_b``, one per block.
    diag : ndarray of shape (p1,)
    intercept : bool
        Coordinate 0 is the (unpenalized) intercept.
    """

    # ndarray + RowCurvature defers to RowCurvature.__radd__
    __array_ufunc__ = None

    def __init__(self, blocks, scales, diag, intercept):
        self.blocks, self.scales = tuple(blocks), tuple(scales)
        self.diag, self.intercept = np.asarray(diag, dtype=float), bool(intercept)

    @property
    def shape(self):
        return (len(self.diag),) * 2

    ndim = 2
    dtype = np.dtype(float)

    @property
    def n_rows(self):
        return sum(len(b) for b in self.blocks)

    @property
    def nbytes(self):
        """Bytes of this factored form (the rows and their scales)."""
        return self.diag.nbytes + sum(_nbytes(b.X) + s.nbytes
                                      for b, s in zip(self.blocks, self.scales))

    def dense(self):
        """The ``p1 x p1`` matrix (``8 p1²`` bytes)."""
        from ._dwd_solver import augmented_gram  # _dwd_solver imports the solver

        out = np.diag(self.diag)
        for block, s in zip(self.blocks, self.scales):
            out += augmented_gram(block.X, s * s, block.fit_intercept)
        return out

    def __array__(self, dtype=None, copy=None):
        return self.dense() if dtype is None else self.dense().astype(dtype)

    def __getitem__(self, key):
        return self.dense()[key]

    def copy(self):
        return RowCurvature(self.blocks, self.scales, self.diag.copy(), self.intercept)

    def __add__(self, other):
        if isinstance(other, RowCurvature):
            return RowCurvature(self.blocks + other.blocks, self.scales + other.scales,
                                self.diag + other.diag, self.intercept or other.intercept)
        if np.isscalar(other) and other == 0:
            return self
        return self.dense() + np.asarray(other)

    __radd__ = __add__

    def shifted(self, shift):
        """``H + shift I``."""
        return RowCurvature(self.blocks, self.scales, self.diag + shift, self.intercept)

    def dot(self, v):
        """``H v`` for ``v`` of shape (p1,): two passes over the rows."""
        out = self.diag * v
        for block, s in zip(self.blocks, self.scales):
            out = out + block.sums(s * s * block.scores(v))
        return out

    def woodbury(self, single=False):
        """The factor of this system (:class:`WoodburyFactor`; ``single``:
        its ``m x m`` factor in float32 from ``SINGLE_FROM`` rows on)."""
        return WoodburyFactor(self, single)


def _nbytes(X):
    if sp.issparse(X):
        return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    return X.nbytes


def _block_gram(blocks):
    """``X_all X_allᵀ`` of the blocks' rows stacked (kept by the blocks)."""
    if len(blocks) == 1:
        return blocks[0].gram(blocks[0])
    if not blocks:
        return np.zeros((0, 0))
    return np.block([[a.gram(b) for b in blocks] for a in blocks])


class WoodburyFactor:
    """Solves ``H x = g`` for a :class:`RowCurvature` through ``m x m``
    systems: Woodbury on the penalized block, whose ridge ``c`` is the same
    on every coordinate, and the Schur complement of the intercept. A
    system without that structure (or no penalty) is solved densely.

    With ``single`` (at least ``SINGLE_FROM`` rows, and ``cond(M)`` bounded
    by ``SINGLE_MAX_COND``) ``M`` is factored in float32 (formed in float64,
    rounded once): solves then carry a relative error of about ``cond(M)``
    times float32's epsilon, for the early Newton steps' directions only
    (the line search accepts each step on float64 values);
    :meth:`decrement_bound` never uses such a factor. Where float32 finds
    ``M`` not positive definite, the float64 factor is taken."""

    # the intercept's Schur complement was not positive: solved with a jitter
    jittered = False

    def __init__(self, curvature, single=False):
        self.curvature = curvature
        diag, start = curvature.diag, int(curvature.intercept)
        penalized = diag[start:]
        self.dense = None
        if (len(penalized) == 0 or penalized[0] <= 0
                or not np.all(penalized == penalized[0])):
            self.dense = cho_factor(curvature.dense())
            return
        self.c = float(penalized[0])
        s = np.concatenate(curvature.scales) if curvature.scales else np.zeros(0)
        self.s = s
        self.gram = gram = _block_gram(curvature.blocks)
        # M = I + diag(s) G diag(s) / c, formed in place
        M = gram * s[:, None]
        M *= s[None, :] / self.c
        M.flat[::len(s) + 1] += 1.0
        self.M = None
        if len(s):  # LAPACK directly: scipy's checks cost more than a small factor
            # on M's Fortran view (M is symmetric: Mᵀ is M, its upper triangle
            # read as the lower), so LAPACK factors in place: no copy to
            # Fortran order (at m = 400 the copy took 1.6-3 ms, the factor 0.5-1.4)
            if (single and len(s) >= SINGLE_FROM
                    and 1.0 + np.trace(M) - len(s) <= SINGLE_MAX_COND):
                self.M, info = spotrf(M.T.astype(np.float32), lower=1, clean=0,
                                      overwrite_a=1)
                if info != 0:  # not positive definite in float32: float64
                    self.M = None
            if self.M is None:
                self.M, info = dpotrf(M.T, lower=1, clean=0, overwrite_a=1)
                if info != 0:  # pragma: no cover - I + a PSD matrix
                    raise LinAlgError(f"potrf failed with info={info}")
        if curvature.intercept:
            # σ = r_0 + zᵀ M⁻¹ z, z = s the intercept column of Z
            self.Mz = self._m_solve(s)
            sigma = diag[0] + s @ self.Mz
            if sigma <= 0:  # no curvature along the intercept: the dense path's jitter
                sigma = 1e-12 * max(diag.sum() / len(diag), 1e-12)
                self.jittered = True
            self.sigma = sigma
            self._gram_s2 = gram @ (s * s)

    @property
    def single(self):
        """Whether ``M`` is factored in float32."""
        return self.M is not None and self.M.dtype == np.float32

    def _m_solve(self, t):
        if self.M is None:
            return t
        if self.single:
            return spotrs(self.M, t, lower=1)[0].astype(float)
        return dpotrs(self.M, t, lower=1)[0]

    def decrement_bound(self, curvature, g):
        """An upper bound of ``½ gᵀ H⁻¹ g`` for ``H = curvature``, a
        :class:`RowCurvature` on this factor's rows and diagonal with other
        scales (the same model at a nearby point), from this factor alone:
        ``H ⪰ κ H_old`` with ``κ = min(1, min_i s_i² / s_old,i²)`` (the
        diagonal and every row's term scaled by at least ``κ``), so
        ``gᵀ H⁻¹ g <= gᵀ H_old⁻¹ g / κ``. ``inf`` where it does not apply
        (other rows or diagonal, a dense, jittered or float32 factor, a row
        whose scale fell to 0)."""
        old = self.curvature
        if (self.dense is not None or self.jittered or self.single
                or len(curvature.blocks) != len(old.blocks)
                or any(a is not b for a, b in zip(curvature.blocks, old.blocks))
                or not np.array_equal(curvature.diag, old.diag)):
            return np.inf
        if old.scales:
            s_old, s_new = np.concatenate(old.scales), np.concatenate(curvature.scales)
            seen = s_old > 0
            with np.errstate(divide="ignore"):
                kappa = min(1.0, float(np.min((s_new[seen] / s_old[seen]) ** 2, initial=1.0)))
        else:
            kappa = 1.0
        if not kappa > 0:
            return np.inf
        return 0.5 * float(g @ self.solve(g)) / kappa

    def _rows_times(self, v):
        """``X v`` of the stacked rows (no intercept), one pass."""
        blocks = self.curvature.blocks
        if len(blocks) == 1:  # a fit's one block: no stacking
            return np.asarray(blocks[0].X @ v)
        return np.concatenate([np.asarray(b.X @ v) for b in blocks])

    def _rows_sum(self, weights):
        """``Xᵀ w`` of the stacked rows for ``w`` over all rows, one pass."""
        blocks = self.curvature.blocks
        if len(blocks) == 1:
            return np.asarray(blocks[0].X.T @ weights)
        starts = np.cumsum([0] + [len(b) for b in blocks])
        return sum(np.asarray(b.X.T @ weights[a:z])
                   for b, a, z in zip(blocks, starts, starts[1:]))

    def solve(self, g):
        """``H⁻¹ g`` for ``g`` of shape (p1,)."""
        if self.dense is not None:
            return cho_solve(self.dense, g)
        blocks, s, c = self.curvature.blocks, self.s, self.c
        start = int(self.curvature.intercept)
        g_pen = g[start:]
        # t = Z_pen g_pen, one pass over the rows
        t = s * self._rows_times(g_pen) if blocks else s
        if start:
            x0 = (g[0] - self.Mz @ t / c) / self.sigma
            # Z_pen h for h = g_pen - Z_penᵀ z x0, with Z_pen Z_penᵀ z = s G s²
            t = t - x0 * s * self._gram_s2
        else:
            x0 = None
        weights = s * (self._m_solve(t) / c)
        if start:
            weights = weights + x0 * s * s
        x_pen = (g_pen - self._rows_sum(weights)) / c
        return np.concatenate(([x0], x_pen)) if start else x_pen


class CurvatureStack:
    """The curvature of every one-vs-rest model in factored form: behaves
    as the ``(n_models, p1, p1)`` array it stands for (``np.asarray`` forms
    it, ``stack[k]`` is model k's :class:`RowCurvature`, itself array-like),
    in ``n_rows p1`` numbers per model instead of ``p1²``."""

    __array_ufunc__ = None

    def __init__(self, models):
        self.models = list(models)

    def __len__(self):
        return len(self.models)

    def __iter__(self):
        return iter(self.models)

    @property
    def shape(self):
        return (len(self.models),) + self.models[0].shape

    ndim = 3
    dtype = np.dtype(float)

    @property
    def n_rows(self):
        return max(m.n_rows for m in self.models)

    @property
    def in_span(self):
        """Whether the rows are coordinates in a span (:mod:`._row_span`)."""
        return any(b.in_span for m in self.models for b in m.blocks)

    @property
    def nbytes(self):
        """Bytes of the factored form: the rows (shared by the models, counted
        once), their Gram matrices kept and each model's scales."""
        blocks = {id(b): b for m in self.models for b in m.blocks}.values()
        rows = sum(_nbytes(b.X) + sum(g.nbytes for _, g in b._grams.values())
                   for b in blocks)
        return rows + sum(m.nbytes - sum(_nbytes(b.X) for b in m.blocks)
                          for m in self.models)

    def dense(self):
        """The ``(n_models, p1, p1)`` array (``8 n_models p1²`` bytes)."""
        return np.stack([m.dense() for m in self.models])

    def __array__(self, dtype=None, copy=None):
        return self.dense() if dtype is None else self.dense().astype(dtype)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self.models[key]
        return self.dense()[key]

    def copy(self):
        return CurvatureStack([m.copy() for m in self.models])

    def __add__(self, other):
        if isinstance(other, CurvatureStack):
            mine, theirs = self.models, other.models
            if len(theirs) == 1 and len(mine) > 1:
                theirs = theirs * len(mine)
            if len(mine) == 1 and len(theirs) > 1:
                mine = mine * len(theirs)
            total = CurvatureStack([a + b for a, b in zip(mine, theirs)])
            # the dense form once it is the smaller one
            if total.in_span or factored_is_smaller(total.n_rows, total.shape[1]):
                return total
            return total.dense()
        if np.isscalar(other) and other == 0:
            return self
        return self.dense() + np.asarray(other)

    __radd__ = __add__

    def product(self, V):
        """``H_k v_k`` for every model, ``V`` of shape (p1, K)."""
        return np.stack([m.dot(V[:, k]) for k, m in enumerate(self.models)], axis=1)


class RowSites:
    """In-process sites, with the curvature summary sent as the rows
    ``D^½ X̄`` (:meth:`SiteData.curvature_rows
    <skfedpriv.linear_model._dwd_solver.SiteData.curvature_rows>`) instead
    of the ``p1 x p1`` sum; every other request as the sites answer it."""

    def __init__(self, sites):
        self._sites = sites

    def __getattr__(self, name):
        return getattr(self._sites, name)

    def summaries(self, Theta, loss, with_curvature):
        total, grad, _ = self._sites.summaries(Theta, loss, False)
        curvature = (self._sites.curvature_rows(Theta, loss, with_curvature)
                     if np.any(with_curvature) else None)
        return total, grad, curvature

    def majorizer(self, loss):
        return self._sites.majorizer_rows(loss)


def ridge_matrix(ridge, rows, fit_intercept):
    """The ridge as a ``(1, p1, p1)`` matrix: dense, or factored (no rows)."""
    if rows:
        return CurvatureStack([RowCurvature((), (), ridge, fit_intercept)])
    return np.diag(ridge)[None]


def model_systems(base, ridge, n_models):
    """``base + ridge`` for each of ``n_models`` models (one shared ``base``)."""
    if isinstance(base, CurvatureStack):
        return CurvatureStack([(base + ridge)[0]] * n_models)
    return np.broadcast_to(base[None] + ridge, (n_models,) + base.shape)


def prior_product(prior, V):
    """``P_k v_k`` for every model."""
    if isinstance(prior, CurvatureStack):
        return prior.product(V)
    return np.einsum("kij,jk->ik", prior, V)


def shifted(system, shift):
    """``system + shift I`` of one model."""
    if isinstance(system, RowCurvature):
        return system.shifted(shift)
    return system + shift * np.eye(system.shape[0])


def stack_curvatures(matrices):
    """One ``(K, p1, p1)`` curvature from the models' matrices."""
    if all(isinstance(m, RowCurvature) for m in matrices):
        return CurvatureStack(matrices)
    return np.stack([np.asarray(m) for m in matrices])


def select_models(mask, chosen, other):
    """Per model, ``chosen[k]`` where ``mask[k]`` else ``other[k]``."""
    if isinstance(chosen, CurvatureStack) or isinstance(other, CurvatureStack):
        return CurvatureStack([chosen[k] if m else other[k] for k, m in enumerate(mask)])
    return np.where(np.asarray(mask)[:, None, None], chosen, other)


def zero_curvature(n_models, p1, rows, fit_intercept):
    """The curvature of no rows, in the form of the batch."""
    if rows:
        return CurvatureStack([RowCurvature((), (), np.zeros(p1), fit_intercept)] * n_models)
    return np.zeros((n_models, p1, p1))


def curvature_form(sites, prior, p1, *, wanted, alpha, penalty):
    """The form of a batch's curvature: ``(prior, rows)``, ``rows`` True for
    the factored form, chosen with more than ``_DENSE_UP_TO`` parameters
    while the rows seen (the prior's and this batch's) and their Gram matrix
    take fewer numbers than the dense matrix (:func:`factored_is_smaller`),
    on in-process sites that send rows, with a ridge on every coefficient
    (``alpha > 0``, the default penalty). A factored prior that the batch
    takes past that size is formed densely here."""
    stacked = isinstance(prior, CurvatureStack)
    able = (wanted and p1 > _DENSE_UP_TO and alpha > 0 and penalty is None
            and getattr(sites, "offers_curvature_rows", False)
            and (prior is None or stacked))
    if able and factored_is_smaller(sites.n_rows + (prior.n_rows if stacked else 0), p1):
        return prior, True
    return (prior.dense() if stacked else prior), False
