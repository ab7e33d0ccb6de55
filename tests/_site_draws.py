"""Every site noise draw of a 'local-gaussian' fit, recorded with the
sensitivity of what it perturbs, to count the unit releases it makes."""

from skfedpriv.linear_model import _dwd_solver, _inference_private
from skfedpriv.linear_model._inference_private import PRECISION, STAGE_PRECISION
from skfedpriv.privacy._objective_perturbation import summary_sensitivity
from skfedpriv.privacy._score_outer import exact_curvature_sensitivity, score_outer_sensitivity


class SiteDraws:
    """Patches the site noise of the summaries and of the inference
    matrices (``monkeypatch``); ``q`` and ``clip`` are the fit's."""

    def __init__(self, monkeypatch, q, clip):
        self.q, self.clip = q, clip
        self.draws = []  # (std, sensitivity or None, independent blocks)
        real_site_noise = _dwd_solver.site_noise
        real_symmetric = _inference_private.symmetric_gaussian_noise

        def site_noise(kind, std, p1, n_models, random_state):
            blocks = 1 if kind == "gram" else n_models
            self.draws.append((std, summary_sensitivity(kind, q, clip), blocks))
            return real_site_noise(kind, std, p1, n_models, random_state)

        def symmetric(p1, std, random_state=None):
            self.draws.append((std, None, 1))
            return real_symmetric(p1, std, random_state=random_state)

        monkeypatch.setattr(_dwd_solver, "site_noise", site_noise)
        monkeypatch.setattr(_inference_private, "symmetric_gaussian_noise", symmetric)

    def unit_releases(self, sigma, n_sites):
        """``Σ (σ Δ / std)²`` per site over the draws: an inference matrix
        drawn at ``σ / κ`` per unit of its sensitivity (``κ`` a refinement
        stage's precision, or ``PRECISION`` for the score outer products and
        a later batch's matrices) is told apart by its std."""
        curvature = exact_curvature_sensitivity(self.q, self.clip)
        outer = score_outer_sensitivity(self.q, self.clip)
        bounds = {round(sigma / kappa * curvature, 12): curvature
                  for kappa in (*STAGE_PRECISION, PRECISION)}
        bounds[round(sigma / PRECISION * outer, 12)] = outer
        return sum(blocks * (delta if delta is not None else bounds[round(std, 12)]) ** 2
                   / std**2 for std, delta, blocks in self.draws) * sigma**2 / n_sites
