"""The private refinement's step plan (issue #24): each stage takes its own
number of gradient steps (``GRADIENT_STEPS``), the charge counts every
gradient the plan draws, and the bootstrap replays the fit's plan."""

import warnings

import numpy as np
import pytest
from test_inference_private import CLIP, _private

from skfedpriv.linear_model import _dwd_solver, _inference_bootstrap, _inference_private
from skfedpriv.privacy import PrivacyBudget

#: A plan unlike the shipped one in every stage (and in its total).
PLAN = (1, 2, 5)


def _rows(n_sites=2):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(1200, 2)) + np.repeat([[1.0, 0.5], [-1.0, -0.5]], 600, axis=0)
    y, g = np.repeat([1, -1], 600), np.tile(np.arange(n_sites), 600)
    return X, y, g


def _runs(events):
    """Consecutive equal events collapsed to ``[(event, count), ...]``."""
    out = []
    for event in events:
        if out and out[-1][0] == event:
            out[-1][1] += 1
        else:
            out.append([event, 1])
    return [tuple(run) for run in out]


def test_each_stage_draws_its_planned_gradients_and_the_charge_counts_them(monkeypatch):
    """With a plan of (1, 2, 5) steps, the sites' draws after the pilot are,
    per stage, its curvature (and, last, the score outer products) then
    exactly the plan's gradients; the ledger's sensitivity² is the unit
    releases counted from the draws themselves, with the plan's total in
    place of the shipped 30, and the fit records one damping per step."""
    from _site_draws import SiteDraws

    monkeypatch.setattr(_inference_private, "GRADIENT_STEPS", PLAN)
    draws = SiteDraws(monkeypatch, 1.0, CLIP)
    events = []
    site_noise, symmetric = _dwd_solver.site_noise, _inference_private.symmetric_gaussian_noise
    monkeypatch.setattr(_dwd_solver, "site_noise",
                        lambda kind, *a, **k: events.append(kind) or site_noise(kind, *a, **k))
    monkeypatch.setattr(_inference_private, "symmetric_gaussian_noise",
                        lambda *a, **k: events.append("matrix") or symmetric(*a, **k))
    X, y, g = _rows()
    budget, n_sites = PrivacyBudget(10.0, 1e-3), 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = _private(epsilon=1.0, budget=budget, q=1.0, online_steps=2).fit(X, y,
                                                                            sample_group=g)
    first = events.index("matrix")
    refinement = _runs(events[first:])
    assert [count for event, count in refinement if event == "gradient"] == [
        n_sites * s for s in PLAN]
    assert [event for event, _ in refinement] == ["matrix", "gradient"] * len(PLAN)
    assert [d.shape[0] for d in clf.private_refinement_.damping] == list(PLAN)
    units = draws.unit_releases(clf.noise_scale_, n_sites)
    # pilot: 2 gradients + 1 curvature + the Gram; refinement: 8 + 2.25 · 2 + 25 + 9
    assert units == pytest.approx(3 + 1 + sum(PLAN) + 2.25 * 2 + 25 + 9)
    (entry,) = budget.ledger.entries
    assert entry.sensitivity**2 == pytest.approx(units)


def test_the_shipped_plan_spends_the_charged_gradients():
    """The shipped plan has one entry per curvature stage and ``ROUNDS``
    steps in all, the number ``n_iter_`` and the charge count."""
    plan = _inference_private.GRADIENT_STEPS
    assert len(plan) == _inference_private.CURVATURE_RELEASES
    assert sum(plan) == _inference_private.ROUNDS
    assert all(isinstance(s, int) and s >= 1 for s in plan)


def test_the_bootstrap_replays_the_fits_plan(monkeypatch):
    """A fit made with the (1, 2, 5) plan is replayed stage by stage with
    1, 2 and 5 safeguarded steps after each stage's curvature draw, even
    once the module's plan is back to the shipped one."""
    monkeypatch.setattr(_inference_private, "GRADIENT_STEPS", PLAN)
    X, y, g = _rows()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        refinement = _private(epsilon=8.0, q=1.0).fit(X, y, sample_group=g).private_refinement_
    monkeypatch.undo()
    assert _inference_private.GRADIENT_STEPS != PLAN
    events = []
    draws, step = _inference_bootstrap.symmetric_draws, _inference_bootstrap.safeguarded_step
    monkeypatch.setattr(_inference_bootstrap, "symmetric_draws",
                        lambda *a: events.append("curvature") or draws(*a))
    monkeypatch.setattr(_inference_bootstrap, "safeguarded_step",
                        lambda *a: events.append("step") or step(*a))
    errors = _inference_bootstrap.bootstrap_errors(refinement, n_resamples=7, random_state=0)
    assert _runs(events) == [run for s in PLAN for run in (("curvature", 1), ("step", s))]
    assert np.isfinite(errors).all() and errors.shape == (7, 1, 3)


def test_covariance_and_transfer_follow_an_uneven_plan(monkeypatch):
    """For a fit made with the (1, 2, 5) plan: ``privacy_error_covariance``
    against the empirical covariance of 20 000 simulated runs of the linear
    recursion ``e ← e - (dA_s)⁻¹ (Ĥ e + ξ)`` over the fit's own stages,
    steps and damping (``ξ`` the summed gradient noise), and
    ``pilot_transfer`` against the same recursion without noise from each
    unit vector."""
    from skfedpriv.linear_model._inference_residual import pilot_transfer

    monkeypatch.setattr(_inference_private, "GRADIENT_STEPS", PLAN)
    X, y, g = _rows()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = _private(epsilon=1.0, q=1.0).fit(X, y, sample_group=g).private_refinement_
    hessian = out.hessian()[0]
    p1, draws = hessian.shape[0], 20_000
    rng = np.random.default_rng(0)
    error, carried = np.zeros((draws, p1)), np.eye(p1)
    noise_std = np.sqrt(out.n_sites) * out.grad_std
    for stage in range(len(PLAN)):
        system = out.system(stage)[0]
        for damping in out.damping[stage][:, 0]:
            noise = rng.normal(scale=noise_std, size=(draws, p1))
            error = error - np.linalg.solve(damping * system, (error @ hessian + noise).T).T
            carried = carried - np.linalg.solve(damping * system, hessian @ carried)
    expected = _inference_private.privacy_error_covariance(out)[0]
    scale = np.sqrt(np.outer(np.diag(expected), np.diag(expected)))
    # Monte Carlo error of a covariance entry: about sqrt(2 / draws) = 1 % of the scale
    np.testing.assert_allclose(np.cov(error.T) / scale, expected / scale, atol=0.05)
    np.testing.assert_allclose(pilot_transfer(out, hessian[None])[0], carried, atol=1e-10)
