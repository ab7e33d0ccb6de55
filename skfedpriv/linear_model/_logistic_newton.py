"""``LogisticRegression(solver='newton')``: the federated Newton / renewable
protocol with the logistic (two classes) or multinomial loss.

The same protocol as :class:`~skfedpriv.DWDClassifier`'s non-private fit
(:func:`~skfedpriv.linear_model._renewable.renewable_step` on
:func:`~skfedpriv.linear_model._newton.solve_batch`): sites send only sums
(loss, gradient, curvature matrix, losses along a direction); the server
takes Newton steps. ``fit`` minimizes

``Σ_i w_i ℓ(θ; x_i, y_i) + (α W / 2) ‖β‖²``,

``W`` the rows' weight sum and ``β`` the coefficients (the intercepts
unpenalized): scikit-learn's objective ``C Σ_i w_i ℓ_i + ½ ‖β‖²`` divided by
``C`` at ``C = 1 / (α W)``. ``partial_fit`` is the renewable update (Luo and
Song 2020; the DWD paper's OnWP): the batch's loss plus the quadratic
model ``½ (θ - θ_{b-1})ᵀ P (θ - θ_{b-1})`` of the earlier batches.
"""

from .._loss import LogisticLoss, MultinomialLoss
from .._losses import penalty_mask, split_intercept
from ._base import TrainingState
from ._dwd_solver import SiteData
from ._inference import renewable_covariance, score_covariance
from ._inference_multinomial import inference_release
from ._inference_stream import require_every_side, track_stream_shift
from ._multinomial_sites import MultinomialSites, multinomial_penalty
from ._renewable import RenewableState, renewable_step

__all__ = ["newton_loss", "newton_sites", "newton_update"]


def newton_loss(classes):
    """The loss of ``solver='newton'``: logistic for two classes, else multinomial."""
    return LogisticLoss() if len(classes) == 2 else MultinomialLoss()


def newton_sites(batch, classes):
    """The in-process sites of a validated batch, for :func:`newton_loss`."""
    if len(classes) == 2:
        return SiteData.from_site_codes(batch.X, batch.y, batch.sample_weight,
                                        batch.site_codes, batch.n_sites)
    return MultinomialSites(batch.X, batch.y, batch.sample_weight, batch.site_codes,
                            batch.n_sites)


def newton_update(sites, classes, settings, stream, rounds_seen, learner_labels, coef_cov=None,
                  shift_ratio=None):
    """One batch of the Newton path (the stream's first when ``stream`` is None).

    Parameters
    ----------
    sites : DWDSites
        The batch's sites (:func:`newton_sites`, or summary sites from outside).
    classes : ndarray of shape (n_classes,)
    settings : LogisticSettings
    stream : RenewableState or None
    rounds_seen : int
        Requests to the sites in earlier batches.
    learner_labels : ndarray of object
        The sites seen so far, this batch's included (``learner_labels_``).
    coef_cov : ndarray of shape (1, P, P) or None
        ``inference``: the covariance after the earlier batches (``P`` the
        solver's parameter count).
    shift_ratio : float or None
        ``inference``: ``Σ_{j≥2} W_j / N_j`` of the earlier batches
        (:func:`~._inference_stream.track_stream_shift`).

    Returns
    -------
    release : dict
        The public fitted attributes.
    training_state : TrainingState
        Holds ``renewable``, the :class:`RenewableState` (its ``curvature``
        is a raw statistic of the rows: never published), and with
        ``inference`` ``coef_cov`` and ``shift_ratio``.
    """
    loss = newton_loss(classes)
    _check_inference(settings, sites, classes)
    if (loss.kind == "multinomial") != isinstance(sites, MultinomialSites):
        raise ValueError(
            f"{len(classes)} classes need sites of the {loss.name} loss "
            f"({'MultinomialSites' if loss.kind == 'multinomial' else 'margin sites'}), "
            f"got {type(sites).__name__}."
        )
    fit_intercept = settings.fit_intercept
    sites.prepare(classes, fit_intercept=fit_intercept)
    p1 = sites.n_features + int(fit_intercept)
    n_classes = len(classes)
    penalty = None if n_classes == 2 else multinomial_penalty(p1, n_classes, fit_intercept)
    first = stream is None
    if first:
        stream = RenewableState.empty(p1 if n_classes == 2 else p1 * n_classes, 1)
    if settings.inference:
        require_every_side(stream.started, sites.two_sided, "LogisticRegression")
    theta, curvature, n_iter, started = renewable_step(
        sites, stream.theta, stream.curvature, stream.started, stream.seen, loss=loss,
        alpha=settings.ridge("newton"), fit_intercept=fit_intercept, max_iter=settings.max_iter,
        tol=settings.tol, online_steps=settings.max_iter, penalty=penalty, matrices=True,
        newton_online=True,
    )
    seen = stream.seen + sites.weight_sum
    inference = dict(coef_cov=None)
    if settings.inference:
        coef_cov = _covariance_step(sites, stream, coef_cov, settings, loss, theta, curvature,
                                    started, penalty)
        identified = p1 if n_classes == 2 else (n_classes - 1) * p1
        inference = dict(coef_cov=coef_cov, shift_ratio=track_stream_shift(
            None if first else shift_ratio or 0.0, sites.weight_sum, seen, identified,
            "LogisticRegression", stacklevel=7))
    renewable = RenewableState(
        theta, curvature if stream.curvature is None else stream.curvature + curvature,
        started, seen)
    coef, intercept = split_intercept(theta.reshape(p1, -1).T, fit_intercept)
    if n_classes > 2 and fit_intercept:
        # the softmax is unchanged by a common shift of the intercepts:
        # scikit-learn's symmetric convention, intercepts summing to zero
        intercept = intercept - intercept.mean()
    release = {
        "classes_": classes,
        "coef_": coef,
        "intercept_": intercept,
        "n_iter_": int(n_iter),
        "learner_labels_": learner_labels,
        "n_samples_seen_": seen,
        "n_rounds_seen_": rounds_seen + sites.rounds,
        "privacy_spent_": (float("inf"), 0.0),
        "noise_scale_": 0.0,
        "solver_": "newton",
        "_settings": settings,
    }
    if settings.inference:
        release.update(inference_release(coef_cov, n_classes, fit_intercept))
    return release, TrainingState(renewable=renewable, **inference)


def _check_inference(settings, sites, classes):
    """``inference=True`` on sites that send the inference summary;
    refused before anything is asked of the sites."""
    if not settings.inference:
        return
    if not getattr(sites, "offers_inference", False):
        raise NotImplementedError(
            f"inference=True needs sites that send the inference summary; "
            f"{type(sites).__name__} does not offer it. Fit with inference=False."
        )


def _covariance_step(sites, stream, previous, settings, loss, theta, curvature, started,
                     mask=None):
    """The covariance of the estimate after this batch: the sandwich for the
    first, then the renewable recursion (see :mod:`._inference`).

    The objective's ridge is ``(α W_b / 2) ‖β‖²`` per batch, so a row's
    penalty score is ``α P θ`` and the batch's ridge curvature ``α W_b P``;
    ``curvature`` (the batch's, ridge included) is what the renewable
    equation solved with, ``stream.curvature`` the accumulated one. ``mask``:
    the multinomial penalty mask (None: the binary model's; the
    multinomial sites' curvature then holds ``W_b`` times the projector on
    the shift directions, see :mod:`._inference_multinomial`).
    """
    if mask is None:
        summary = sites.inference_summary(theta, loss.derivative, loss.curvature)
        mask = penalty_mask(theta.shape[0], settings.fit_intercept)
    else:  # the multinomial sites know their loss's derivatives
        summary = sites.inference_summary(theta)
    penalty = settings.ridge("newton") * mask
    return renewable_covariance(
        previous, starting=started & ~stream.started, continuing=started & stream.started,
        prior=stream.curvature, exact=summary.curvature, used=curvature,
        ridge=penalty * sites.weight_sum, score_cov=score_covariance(summary, theta, penalty),
        one_step=False,
    )
