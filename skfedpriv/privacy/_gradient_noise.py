"""Correlated gradient noise of the learners of ``LogisticRegression``.

Algorithm 1 of Zhang, Zhu, Fay and Johansson, "Locally differentially
private online federated learning with correlated noise"
(``shared/papers/ldp-online-federated-correlated-noise.txt``): every learner
``i`` adds to its round-``r`` message ``g_i^r`` the increment
``(B ξ_i)_{r+1} - (B ξ_i)_r`` of its own noise stream (lines 11-12), so what
the server accumulates is a noisy prefix sum ``(A G_i + B ξ_i)_r`` (eq. 4).

This module holds the privacy math of that protocol, data-independent and
free of estimator code, so the in-process estimator and a Flower learner
(:mod:`skfedpriv.flower`) calibrate and draw identically:

* :data:`MECHANISMS`, the names of the factorizations ``A = B C`` (section
  III-B) and their implementations;
* :func:`max_non_expansive_step` and :func:`gradient_sensitivity`, the L2
  sensitivity of ``g_i^r`` (Lemma IV.8, Appendix B eq. 15);
* :func:`calibrate_gradient_noise`, the noise scale of ``ξ_i`` for (ε, δ);
* :class:`LearnerNoise`, each learner's stream and its unsent increments.
"""

import copy
import math

import numpy as np

from .._loss import LogisticLoss
from .._param_validation import Registry
from ._calibration import gaussian_sigma
from ._factorizations import FACTORIZATIONS

#: Mechanism name -> factorization of the prefix-sum matrix (a callable
#: ``n_rounds -> PrefixSumFactorization``): independent noise (``C = I``),
#: binary tree (eq. 5) with the plain or the Honaker estimator, Toeplitz
#: square root (eq. 8), optimal (eq. 7) and buffered linear Toeplitz.
MECHANISMS = Registry("mechanism", {
    name: FACTORIZATIONS[name]
    for name in ("independent", "tree", "honaker", "toeplitz", "optimal", "blt")
})


def max_non_expansive_step(feature_clip_norm, fit_intercept, alpha, loss=None):
    """Largest local step size for which every local step is non-expansive.

    With rows clipped to ``C_x`` the clipped per-model gradient of a convex
    margin loss (``loss``, default logistic) on ``x_bar = (1, x)`` is
    ``ψ(θ·x_bar) x_bar`` with ``ψ`` monotone and ``c``-Lipschitz (``c`` the
    loss's ``curvature_bound``, 1/4 for the logistic loss), so the clipped
    loss is convex and ``L``-smooth with ``L = c (C_x² + fit_intercept)``;
    with the penalty, ``L + alpha``. A
    gradient step of a convex ``L'``-smooth function is non-expansive for
    ``η <= 2 / L'`` (Baillon-Haddad). Without row clipping only the penalty
    step ``(1 - η alpha)`` is kept a contraction: ``η <= 2 / alpha``.

    Returns
    -------
    step : float
        ``2 / (L + alpha)``, or ``2 / alpha`` when ``feature_clip_norm`` is
        None (``inf`` if also ``alpha == 0``).
    """
    if feature_clip_norm is None:
        return 2.0 / alpha if alpha > 0 else math.inf
    bound = (LogisticLoss() if loss is None else loss).curvature_bound
    smooth = bound * (feature_clip_norm**2 + float(fit_intercept))
    return 2.0 / (smooth + alpha)


def gradient_sensitivity(clip_norm, local_steps, rows_clipped):
    """L2 bound on the change of one learner's ``g_i^r`` when one client is replaced.

    Lemma IV.8 / Appendix B eq. 15: ``2 B_g / τ`` when the local steps are
    non-expansive (rows clipped, step size within
    :func:`max_non_expansive_step`), else ``2 B_g`` (every local step moves
    by η times a mean of vectors of norm at most ``B_g`` plus a contracting
    penalty step, so ``‖z_τ - z_τ'‖ <= 2 η τ B_g``).
    """
    if rows_clipped:
        return 2.0 * clip_norm / local_steps
    return 2.0 * clip_norm


class GradientNoiseCalibration:
    """The noise of one private stream, from the hyperparameters alone.

    Attributes
    ----------
    factorization : PrefixSumFactorization or None
        ``A = B C`` of the R×R prefix-sum matrix (None without a mechanism).
    gradient_sensitivity : float
        Of each ``g_i^r`` (:func:`gradient_sensitivity`).
    factorization_sensitivity : float
        Largest column norm of ``C`` (``nan`` without a mechanism).
    sensitivity : float
        L2 sensitivity of ``C G_i``, their product (``nan`` without a mechanism).
    noise_scale : float
        Standard deviation σ of each entry of ``ξ_i`` (0 without a mechanism).
    privacy_spent : tuple of float
        ``(epsilon, delta)``; ``(inf, 0.0)`` without a mechanism.
    """

    def __init__(self, factorization, gradient_sensitivity, factorization_sensitivity,
                 sensitivity, noise_scale, privacy_spent):
        self.factorization = factorization
        self.gradient_sensitivity = gradient_sensitivity
        self.factorization_sensitivity = factorization_sensitivity
        self.sensitivity = sensitivity
        self.noise_scale = noise_scale
        self.privacy_spent = privacy_spent


def calibrate_gradient_noise(mechanism, n_rounds, epsilon, delta, grad_sensitivity):
    """Factorization and noise scale of a stream of ``n_rounds`` rounds.

    σ is the exact analytic Gaussian calibration (Balle & Wang 2018) of
    (ε, δ) for the L2 sensitivity of ``C G_i`` (Appendix B, eq. 15), not the
    paper's zCDP conversion (Lemma IV.8), which adds more noise. The
    learners' noise is independent and one row is at one learner, so the
    whole stream, all learners and all rounds, is this one Gaussian
    mechanism.

    Parameters
    ----------
    mechanism : str or None
        A name of :data:`MECHANISMS`; None: no noise.
    n_rounds : int
    epsilon, delta : float
    grad_sensitivity : float
        Of each ``g_i^r`` (:func:`gradient_sensitivity`).

    Returns
    -------
    calibration : GradientNoiseCalibration
    """
    if mechanism is None:
        return GradientNoiseCalibration(None, grad_sensitivity, math.nan, math.nan, 0.0,
                                        (math.inf, 0.0))
    factorization = MECHANISMS[mechanism](n_rounds)
    column_norm = float(factorization.sensitivity)
    sensitivity = column_norm * grad_sensitivity
    return GradientNoiseCalibration(
        factorization, grad_sensitivity, column_norm, sensitivity,
        gaussian_sigma(epsilon, delta, sensitivity), (float(epsilon), float(delta)),
    )


class LearnerNoise:
    """Each learner's own correlated-noise stream and its unsent increments.

    Learners join when they first send a message; the learners joining in
    the same round share one stream of shape ``(n_new, size)`` (the rows of
    a stream are independent). Every round every joined learner's stream
    advances; a learner absent from the round keeps its increment and adds
    it to its next message (Algorithm 1, lines 11-12), so the server always
    accumulates the noisy prefix sums ``(A G_i + B ξ_i)_r``.

    Parameters
    ----------
    factorization : PrefixSumFactorization
    noise_scale : float
        σ of each entry of ``ξ_i``.
    size : int
        Entries of one message.
    rng : numpy.random.Generator
        Source of every draw (advanced by them).
    """

    def __init__(self, factorization, noise_scale, size, rng):
        self.factorization = factorization
        self.noise_scale = float(noise_scale)
        self.size = int(size)
        self.rng = rng
        self.index = {}
        self.cohorts = []  # (first index, end index, NoiseStream)
        self.pending = np.zeros((0, self.size))

    def copy(self):
        """A copy to advance in a call that may still fail: the streams, the
        learner index and the unsent increments are copied; the generator is
        shared (its draws are the call's one side effect, and a user's
        generator must advance so no other stream reuses its draws) and so
        is the read-only factorization."""
        return copy.deepcopy(self, memo={id(self.rng): self.rng,
                                         id(self.factorization): self.factorization})

    def add(self, labels, messages):
        """Advance every stream one round; return ``messages`` plus their noise.

        Parameters
        ----------
        labels : sequence of hashable
            The learners sending ``messages`` this round (new ones join, in
            this order).
        messages : ndarray of shape (len(labels), size)

        Returns
        -------
        noised : ndarray of shape (len(labels), size)

        Raises
        ------
        HorizonExceededError
            Past the factorization's ``n_rounds`` (callers check the horizon
            before anything changes).
        """
        new = [label for label in labels if label not in self.index]
        if new:
            start = len(self.index)
            for offset, label in enumerate(new):
                self.index[label] = start + offset
            stream = self.factorization.noise_stream(self.rng, self.noise_scale,
                                                     (len(new), self.size))
            self.cohorts.append((start, start + len(new), stream))
            self.pending = np.vstack([self.pending, np.zeros((len(new), self.size))])
        pending = self.pending.copy()
        for start, end, stream in self.cohorts:
            pending[start:end] += stream.next()
        rows = np.array([self.index[label] for label in labels], dtype=np.intp)
        noised = messages + pending[rows]
        pending[rows] = 0.0
        self.pending = pending
        return noised


__all__ = ["MECHANISMS", "GradientNoiseCalibration", "LearnerNoise", "calibrate_gradient_noise",
           "gradient_sensitivity", "max_non_expansive_step"]


def local_steps_noise_to_signal(calibration, n_learners, n_params, clip_norm):
    """Expected norm of the noise the server's model accumulates over the
    stream, over the largest distance the learners' messages could move it.

    After ``R`` rounds the server has moved by ``η_g η τ`` times the sum over
    rounds of the mean message. Its noise part is the mean over learners of
    their prefix-sum noise ``(B ξ_i)_R`` (per entry variance
    ``σ² ‖B_R‖² / M`` for ``M`` learners present every round); the clipped
    gradient part of each message has norm at most ``B_g`` (a mean of
    per-example gradients clipped to ``B_g``; the ridge's data-independent
    part aside), so its sum at most ``R B_g``. Public quantities only.

    Parameters
    ----------
    calibration : GradientNoiseCalibration
        Of a mechanism (not None).
    n_learners : int
        Learners of the stream (``M``).
    n_params : int
        Entries of one message (models times parameters).
    clip_norm : float
        ``B_g``.

    Returns
    -------
    ratio : float
    """
    B = np.asarray(calibration.factorization.B)
    noise = calibration.noise_scale * math.sqrt(float(B[-1] @ B[-1]) * n_params / n_learners)
    return noise / (B.shape[0] * clip_norm)
