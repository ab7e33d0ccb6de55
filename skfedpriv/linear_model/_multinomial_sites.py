"""Sites of the multinomial (softmax) loss for the federated Newton solver.

The multinomial loss couples its class models, so the solver sees all of
them as one parameter vector: ``theta`` of shape ``(p1 * K, 1)``, the
flattened ``(p1, K)`` matrix (row ``j`` of feature ``j``, row 0 the intercept
when there is one; index ``j * K + k``). Every answer is a sum over the
sites of fixed-size summaries of their rows, as for
:class:`~skfedpriv.linear_model._dwd_sites.DWDSites`: the loss sum, the
gradient sum ``Σ_i w_i x̄_i (p_i - e_{y_i})ᵀ``, the curvature matrix
``Σ_i w_i (x̄_i x̄_iᵀ) ⊗ (diag(p_i) - p_i p_iᵀ)`` or its products with a
few vectors, and losses along a direction.

With intercepts, the loss does not change when every class's intercept
moves by the same amount (the softmax is shift-invariant): the objective is
flat along ``v``, the intercepts' common shift, and a Newton system singular
there (rounding along it can even fake a descent). The server adds the
data-independent gauge term ``½ W (vᵀθ)²`` to every answer (``W`` the
batch's weight): it fixes scikit-learn's symmetric parametrization
(intercepts summing to zero, where every fit from ``θ = 0`` stays) and
changes no prediction.
"""

import numpy as np

from .._loss import MultinomialLoss
from .._losses import penalty_mask
from .._sites import site_row_indices
from ._dwd_sites import DWDSites
from ._dwd_solver import _augmented_sum, augmented_gram, augmented_scores
from ._inference_multinomial import (
    class_pair_gram,
    shift_projector,
    site_multinomial_inference,
    softmax,
    softmax_hessian,
)

__all__ = ["MultinomialSites", "multinomial_penalty"]


def multinomial_penalty(n_params, n_classes, fit_intercept):
    """The ridge mask of the flattened parameters: the intercepts (row 0 of
    every class) unpenalized."""
    return np.repeat(penalty_mask(n_params, fit_intercept), n_classes)


def site_multinomial_summary(X, Y, weights, Theta, fit_intercept, with_curvature):
    """One site's loss sum, gradient sum (``(p1, K)``) and, if asked, its
    curvature matrix (``(p1 K, p1 K)``) at the ``(p1, K)`` parameters."""
    loss = MultinomialLoss()
    scores = augmented_scores(X, Theta, fit_intercept)
    row_loss, residual = loss.value_and_gradient(scores, Y)
    grad = _augmented_sum(X, weights[:, None] * residual, fit_intercept)
    curvature = None
    if with_curvature:
        pairs = softmax_hessian(softmax(scores))
        curvature = class_pair_gram(X, weights[:, None, None] * pairs, fit_intercept)
    return weights @ row_loss, grad, curvature


def site_multinomial_product(X, Y, weights, Theta, V, fit_intercept):
    """One site's curvature products ``Σ_i w_i x̄_i ((diag p_i - p_i p_iᵀ) Vᵀ x̄_i)ᵀ``."""
    scores = augmented_scores(X, Theta, fit_intercept)
    rows = MultinomialLoss().curvature_product(scores, augmented_scores(X, V, fit_intercept))
    return _augmented_sum(X, weights[:, None] * rows, fit_intercept)


def site_multinomial_line_losses(X, Y, weights, Theta, S, steps, fit_intercept):
    """One site's loss sums at ``Theta + t S`` for each step ``t``."""
    loss = MultinomialLoss()
    base, slope = augmented_scores(X, Theta, fit_intercept), augmented_scores(X, S, fit_intercept)
    return np.array([weights @ loss.value(base + t * slope, Y) for t in steps])


class MultinomialSites(DWDSites):
    """The rows of each site of one batch, in this process, for the
    multinomial loss (a :class:`DWDSites` whose one "model" is the
    flattened parameter matrix).

    Parameters
    ----------
    X : ndarray of shape (n, p)
    y : ndarray of shape (n,)
    sample_weight : ndarray of shape (n,)
    site_codes : ndarray of int of shape (n,)
        Site of each row, in ``range(n_sites)``.
    n_sites : int
    """

    speaks_loss_objects = True

    def __init__(self, X, y, sample_weight, site_codes, n_sites):
        self._raw = (X, y, sample_weight, site_codes)
        self.n_features, self.n_sites = X.shape[1], n_sites

    def labels(self):
        return self._raw[1]

    def prepare(self, classes, *, fit_intercept, class_weight=None, clip_norm=None):
        if clip_norm is not None:
            raise ValueError("the multinomial Newton path runs no privacy mechanism.")
        X, y, weights, codes = self._raw
        Y = (y[:, None] == np.asarray(classes)[None, :]).astype(float)
        if class_weight is not None:
            weights = weights * (Y @ np.asarray(class_weight, dtype=float))
        self.parts = [(X[rows], Y[rows], weights[rows])
                      for rows in site_row_indices(codes, self.n_sites) if len(rows)]
        self.fit_intercept, self.n_classes = bool(fit_intercept), len(classes)
        self.weight_sum = float(weights.sum())
        # with unpenalized intercepts, a class without rows has no minimizer
        self.two_sided = np.array([bool(np.all((weights > 0) @ Y > 0))])
        self.rounds = self.floats_sent = 0
        p1 = self.n_features + self.fit_intercept
        self._gauge = np.zeros(p1 * self.n_classes)
        if self.fit_intercept:
            self._gauge[:self.n_classes] = 1.0 / np.sqrt(self.n_classes)

    def _matrix(self, theta):
        return theta.reshape(-1, self.n_classes)

    def _count(self, *results):
        self.rounds += 1
        self.floats_sent += sum(int(np.size(r)) for r in results if r is not None)

    def summaries(self, Theta, loss, with_curvature):
        with_curvature = bool(np.any(with_curvature))
        results = [site_multinomial_summary(X, Y, w, self._matrix(Theta), self.fit_intercept,
                                            with_curvature) for X, Y, w in self.parts]
        total = np.array([sum(r[0] for r in results)])
        grad = sum(r[1] for r in results).reshape(-1, 1)
        curvature = sum(r[2] for r in results)[None] if with_curvature else None
        self._count(total, grad, curvature)
        shift = self._gauge @ Theta[:, 0]
        total = total + 0.5 * self.weight_sum * shift**2
        grad = grad + self.weight_sum * shift * self._gauge[:, None]
        if with_curvature:
            curvature = curvature + self.weight_sum * np.outer(self._gauge, self._gauge)[None]
        return total, grad, curvature

    def majorizer(self, loss):
        """``½ (Σ_i w_i x̄_i x̄_iᵀ) ⊗ I_K`` (Böhning's bound of the Hessian)."""
        gram = sum(augmented_gram(X, w, self.fit_intercept) for X, _, w in self.parts)
        self._count(gram)
        return MultinomialLoss.curvature_bound * np.kron(gram, np.eye(self.n_classes))

    def curvature_product(self, Theta, V, loss, exact=None):
        out = sum(site_multinomial_product(X, Y, w, self._matrix(Theta), self._matrix(V),
                                           self.fit_intercept) for X, Y, w in self.parts)
        out = out.reshape(-1, 1)
        self._count(out)
        return out + self.weight_sum * self._gauge[:, None] * (self._gauge @ V)

    def line_losses(self, Theta, S, steps, loss):
        out = sum(site_multinomial_line_losses(X, Y, w, self._matrix(Theta), self._matrix(S),
                                               steps, self.fit_intercept)
                  for X, Y, w in self.parts)
        out = np.asarray(out).reshape(len(steps), 1)
        self._count(out)
        shifts = np.array([self._gauge @ (Theta[:, 0] + t * S[:, 0]) for t in steps])
        return out + 0.5 * self.weight_sum * shifts[:, None] ** 2

    offers_inference = True

    def inference_summary(self, Theta, derivative=None, curvature=None):
        """The sites' summed multinomial inference summary at ``Theta``
        (:func:`~._inference_multinomial.site_multinomial_inference`; the
        loss's derivatives are implied, the arguments kept for the margin
        sites' signature). The server adds ``W`` times the projector on
        the shift directions to the curvature (data-independent, the
        intercepts' gauge term among them: see
        :mod:`._inference_multinomial`)."""
        total = sum((site_multinomial_inference(X, Y, w, self._matrix(Theta), self.fit_intercept)
                     for X, Y, w in self.parts[1:]),
                    site_multinomial_inference(*self.parts[0], self._matrix(Theta),
                                               self.fit_intercept))
        self.rounds += 1
        self.floats_sent += total.n_floats
        p1 = self.n_features + self.fit_intercept
        total.curvature = total.curvature + self.weight_sum * shift_projector(p1, self.n_classes)
        return total

    def noised_summary(self, kind, Theta, loss, std, random_state):
        raise NotImplementedError("the multinomial Newton path runs no privacy mechanism.")
