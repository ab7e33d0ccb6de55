"""``LogisticRegression(solver='quadratic')``: the batches' quadratic models
of the logistic loss, released by every learner as prefix sums with
correlated noise.

Each batch is one step: every learner sends its rows' second-order model
``(a_b, J_b)`` at the public ``θ_{b-1}``
(:func:`~skfedpriv.privacy._logistic_summaries.logistic_quadratic_summary`)
plus its noise increment; the server adds them to the prefix sums and takes
``θ_b`` minimizing the summed quadratic models plus the ridge
(post-processing). The privacy math (bounds, claim) is in
:mod:`skfedpriv.privacy._logistic_summaries`; the noise streams are DWD's
(:class:`~skfedpriv.privacy._continual_summaries.SiteNoiseStreams`, one per
learner).
"""

import copy
import math
import warnings

import numpy as np
import scipy.sparse as sp

from .._losses import add_intercept_column, count_models, one_vs_rest_targets, penalty_mask
from .._losses import split_intercept
from ..privacy import as_generator, clip_rows, warn_if_seeded
from ..privacy._continual_summaries import NoiseDominatesWarning, SiteNoiseStreams, continual_sigma
from ..privacy._gradient_noise import MECHANISMS
from ..privacy._logistic_summaries import (
    logistic_quadratic_summary,
    quadratic_noise_to_signal,
    quadratic_sensitivities,
)
from ._base import TrainingState
from ._dwd_private import _dense_blocks, _project_psd
from ._local_steps import round_rows
from ._newton import _solve_psd

__all__ = ["quadratic_coefficient_clip", "quadratic_row_norm", "quadratic_update"]


def quadratic_row_norm(settings):
    """``C2``: the bound on ``‖x̄‖`` (rows clipped to ``feature_clip_norm``,
    the intercept's 1 included)."""
    return math.sqrt(settings.feature_clip_norm**2 + float(settings.fit_intercept))


def quadratic_coefficient_clip(settings, n_models):
    """``B_c``: ``clip_norm`` times ``sqrt(K) / 2``, the norm of every row's
    coefficient vector at ``θ = 0`` (``-y/2`` per model), so the default 1
    clips no row at the start and the sensitivity is no larger than the
    signal needs (data-independent: K is declared). Measured: with two
    classes 0.5 against a clip of 1 gave breast cancer 0.889 -> 0.919 and
    Table 1 0.893 -> 0.914 (BLT, ε = 1, 10 seeds; benchmarks/README.md)."""
    return settings.clip_norm * 0.5 * math.sqrt(n_models)


def _batch_summary(X, y, classes, theta, settings):
    """``(a, J)`` summed over the rows of one step (sums over rows, so over
    learners too); CSR rows densified a block at a time."""
    p1, n_models = theta.shape
    a, J = np.zeros_like(theta), np.zeros((n_models, p1, p1))
    for rows in _dense_blocks(X):
        block = X[rows].toarray() if sp.issparse(X) else X[rows]
        Xb = add_intercept_column(clip_rows(block, settings.feature_clip_norm),
                                  settings.fit_intercept)
        part_a, part_J = logistic_quadratic_summary(
            Xb, one_vs_rest_targets(y[rows], classes), theta,
            quadratic_coefficient_clip(settings, n_models))
        a, J = a + part_a, J + part_J
    return a, J


def _step(state, X, y, classes, settings):
    """One batch: the summaries at ``θ_{b-1}`` plus the learners' noise into
    the prefix sums, then ``θ_b`` (post-processing). Updates ``state``."""
    a, J = _batch_summary(X, y, classes, state.theta, settings)
    noise_var = 0.0
    if state.noise is not None:
        noise_a, noise_J = state.noise.next()
        a, J = a + noise_a, J + noise_J
        noise_var = state.noise.prefix_variance(state.step)
    state.linear = state.linear + a
    state.curvature = state.curvature + J
    state.n_seen += len(y)
    state.step += 1
    p1 = state.theta.shape[0]
    ridge = settings.ridge("quadratic") * state.n_seen * penalty_mask(p1, settings.fit_intercept)
    # curvature below the prefix noise's spectral norm is taken at that level
    system = _project_psd(state.curvature, math.sqrt(noise_var)) + np.diag(ridge)[None]
    state.theta = -_solve_psd(system, state.linear)


def _start(settings, n_features, classes, learner_labels, n_rows, *, random_state, budget):
    """A new stream's state: the warnings, the one charge, then the noise
    streams (one per learner of the first batch). Returns ``(state,
    calibration)``, ``calibration`` the released noise attributes."""
    p1, n_models = n_features + int(settings.fit_intercept), count_models(classes)
    state = TrainingState(
        theta=np.zeros((p1, n_models)), linear=np.zeros((p1, n_models)),
        curvature=np.zeros((n_models, p1, p1)), noise=None, n_seen=0, step=0,
        learner_index={label: i for i, label in enumerate(learner_labels)},
        noise_at_learners=False)
    if settings.mechanism is None:
        return state, dict(noise_scale_=0.0, sensitivity_=math.nan,
                           privacy_spent_=(math.inf, 0.0))
    factorization = MECHANISMS[settings.mechanism](settings.n_rounds)
    sigma = continual_sigma(settings.epsilon, settings.delta, factorization)
    row_norm, coefficient_clip = (quadratic_row_norm(settings),
                                  quadratic_coefficient_clip(settings, n_models))
    ratio = quadratic_noise_to_signal(factorization, sigma, len(learner_labels), p1, n_models,
                                      row_norm, coefficient_clip, n_rows)
    if ratio > 1.0:
        warnings.warn(NoiseDominatesWarning(
            f"solver='quadratic', mechanism={settings.mechanism!r}: the noise of the summed "
            f"linear term is expected to be {ratio:.3g} times the largest sum {n_rows:.0f} "
            f"rows could give; the model will be mostly noise. About {ratio * n_rows:.0f} "
            "rows at this epsilon (or a larger epsilon, fewer learners, a smaller "
            "feature_clip_norm) bring the ratio to one."), stacklevel=6)
    warn_if_seeded(random_state, "LogisticRegression")  # before the charge: may be an error
    spent = (float(settings.epsilon), float(settings.delta))
    if budget is not None:
        budget.spend(*spent, note=f"LogisticRegression(solver='quadratic', mechanism="
                     f"{settings.mechanism!r}) on a new stream", mechanism="gaussian",
                     sigma=sigma, sensitivity=factorization.sensitivity)
    state.noise = SiteNoiseStreams(
        factorization, len(learner_labels), p1, n_models, sigma,
        quadratic_sensitivities(row_norm, coefficient_clip), as_generator(random_state))
    return state, dict(noise_scale_=sigma, sensitivity_=factorization.sensitivity,
                       privacy_spent_=spent)


def _advancing_copy(noise):
    """A copy of the noise streams to advance in a call that may still fail
    (a lost commit, a refusal): the committed stream stays at its position.
    The generators are shared (their draws are the call's one side effect,
    never repeated) and so is the read-only factorization."""
    memo = {id(noise.factorization): noise.factorization}
    for stream in noise.streams:
        generator = getattr(stream._draw.source, "__self__", None)  # rng.standard_normal
        if generator is not None:
            memo[id(generator)] = generator
    return copy.deepcopy(noise, memo=memo)


def _check_learners(state, site_labels):
    """Every learner of a later batch must have a noise stream (the first
    batch's learners): refused before any draw."""
    new = [label for label in site_labels.tolist() if label not in state.learner_index]
    if new:
        raise ValueError(
            f"solver='quadratic': learners {new[:5]!r} were not in the stream's first "
            "batch, whose learners hold the noise streams; start a new stream (fit) "
            "with every learner in its first batch.")


def quadratic_update(batch, classes, settings, previous, *, first, new_stream, random_state,
                     budget, rounds_seen):
    """One ``fit`` (``n_rounds`` steps) or ``partial_fit`` (one step) of the
    quadratic solver; writes nothing on the estimator.

    Parameters
    ----------
    batch : Batch
    classes : ndarray
    settings : LogisticSettings
    previous : TrainingState or None
        The stream's state (None when ``first``); copied, not changed (its
        noise streams too: the copy advances, sharing the generators, so a
        call that fails before its commit leaves the stream where it was).
    first, new_stream : bool
    random_state, budget
        The estimator's hyperparameters.
    rounds_seen : int
        Steps run so far (public).

    Returns
    -------
    release : dict
    training_state : TrainingState
    """
    n_steps = settings.n_rounds if new_stream else 1
    if first:
        n_rows = len(batch.y) * (1 if new_stream else settings.n_rounds)
        state, noise_release = _start(settings, batch.X.shape[1], classes,
                                      batch.site_labels.tolist(), n_rows,
                                      random_state=random_state, budget=budget)
    else:
        _check_learners(previous, batch.site_labels)
        state = TrainingState(**vars(previous))
        state.noise = _advancing_copy(previous.noise) if previous.noise is not None else None
        noise_release = previous.noise_release
    state.noise_release = noise_release
    for rows in round_rows(batch.site_codes, n_steps):
        _step(state, batch.X[rows], batch.y[rows], classes, settings)
    coef, intercept = split_intercept(state.theta.T, settings.fit_intercept)
    labels = np.empty(len(state.learner_index), dtype=object)
    labels[:] = list(state.learner_index)
    release = {
        "classes_": classes,
        "coef_": coef,
        "intercept_": intercept,
        "learner_labels_": labels,
        "n_rounds_seen_": rounds_seen + n_steps,
        "n_iter_": n_steps,
        "solver_": "quadratic",
        "_settings": settings,
        **noise_release,
    }
    return release, state
