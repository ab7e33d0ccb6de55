"""DWD's 'secagg-tree' mechanism: distributed DP under secure aggregation.

The same release as 'local-tree' (:mod:`skfedpriv.privacy._continual_summaries`:
each site's second-order model ``(a_b, J_b)`` of its batch's loss at the
released ``θ_{b-1}``, rows clipped jointly over the ``K`` one-vs-rest
models, prefix sums through a Honaker tree), but each site adds only a
*share* of the noise, in integers, and the server sees only the sum over
sites modulo ``2^32`` (:mod:`skfedpriv.privacy._secure_aggregation`).

**Neighbouring relation.** One row of one site's batch replaced (the
package's relation: batch sizes, the site of each row and the number of
batches are public). The bound used also covers one row added or removed
(it moves the summary by at most half as much), but the row counts are
published.

**Adversary.** The server and any coalition of sites that, together, see
no more than the modular sum of the honest sites' messages: secure
aggregation (Bonawitz et al. 2017; Flower's SecAgg+) masks every site's
message, and the coalition may subtract its own members' messages and
noise. Each site ``s`` sends, per completed tree node, ``node sum + share``
with ``share ~ N_Z(0, σ_s²)`` per coordinate. The noise that protects a
row is the sum of the shares of the sites the adversary does not know:

* ``honest_sites = H`` (default: every site of the stream's first batch,
  ``M``) is the assumption. Each site adds ``σ_s`` calibrated so that the
  sum of ``H`` shares is ``(epsilon, delta)``-DP (the distributed discrete
  Gaussian of Kairouz, Liu & Steinke 2021, Prop. 14, through zCDP). With
  ``H < M`` every site adds more (``σ_s ∝ 1/sqrt(H)``) and the claim
  survives any ``M - H`` sites colluding with the server or dropping out.
* A site's own share alone (``σ_s``, about ``σ / sqrt(H)``) does **not**
  protect it against a server that can unmask its message (a failed or
  subverted secure aggregation, or more than ``M - H`` colluders): then
  its guarantee is only that of a ``1/H`` share of the noise.

**Accounting.** A site rounds each step's unit-sensitivity input
``rint(γ u)``: replacing a row moves it by at most ``γ + sqrt(d)`` (L2,
``d`` its length), so the vector of a site's node sums moves by at most
``Δ = sqrt(levels) (γ + sqrt(d))``, a Honaker tree's largest column norm of
``C`` times that. The sum over honest sites is then ``ρ``-zCDP with
``ρ = Δ² / (2 H σ_s²) + τ D`` (``D`` = all node coordinates, ``τ`` of KLS
Prop. 14, below 1e-30 at the σ used here), converted to ``(ε, δ)`` by
Canonne, Kamath & Steinke (2020, Prop. 12); the budget is charged once per
stream as one ``ρ``-zCDP release. The inputs are chosen adaptively (each
batch's summary is taken at the model released before it): given the
earlier node sums, a node's sum moves only through the replaced row's own
step, so the per-node Rényi bounds (KLS Prop. 14 on each node) compose
adaptively to the same ``ρ``: ``levels`` nodes hold that step. Everything the server does after the
modular sum (lift, unscale, Honaker estimate, the same solve as
'local-tree') is post-processing, and so is a wrap-around of the modulus,
which :func:`~skfedpriv.privacy._secure_aggregation.choose_scale` makes
negligible (probability bounded from public quantities before any charge;
a :class:`~skfedpriv.privacy._secure_aggregation.WrapAroundWarning` if not,
and when a lifted sum leaves its public range).
"""

import math
import warnings

import numpy as np

from ..privacy import make_factorization
from ..privacy._calibration import zcdp_to_dp
from ..privacy._continual_summaries import (
    continual_sensitivities,
    pack_summary,
    row_coordinate_bound,
    summary_size,
    unit_scales,
    unpack_summary,
)
from ..privacy._discrete_gaussian import distributed_rho, distributed_sigma
from ..privacy._secure_aggregation import (
    MODULUS_BITS,
    TAIL,
    SecAggSiteStream,
    SecAggTreeAggregate,
    WrapAroundWarning,
    choose_scale,
    node_ends,
    wrap_probability,
)
from ._dwd_private import rows_summary, summed_model_minimizer
from ._dwd_settings import SECAGG

__all__ = ["SecAggDWDServer", "SecAggDWDStream", "SecAggPlan", "secagg_plan", "site_messages",
           "warn_if_wraps"]

#: Largest acceptable bound on the probability that a modular sum wraps.
WRAP_TOLERANCE = 1e-9


class SecAggPlan:
    """The public parameters of one stream (all data-independent):
    factorization, scale ``γ``, per-site σ, sensitivity, ρ and the bound on
    the wrap-around probability, for sums that must stay within the
    centered range of ``2^bits``."""

    def __init__(self, factorization, n_sites, honest_sites, p1, n_models, q, clip_norm,
                 n_rows, epsilon, delta, bits=MODULUS_BITS):
        self.factorization = factorization
        self.n_sites, self.honest_sites = n_sites, honest_sites
        self.layout = (p1, n_models)
        self.dim = summary_size(p1, n_models)
        self.scales = unit_scales(continual_sensitivities(q, clip_norm))
        self.row_bound = row_coordinate_bound(q, clip_norm, continual_sensitivities(q, clip_norm))
        levels = factorization.sensitivity
        n_coordinates = factorization.n_noise * self.dim
        # σ per unit of Δ when τ is negligible (a large Δ), then γ, then the exact σ
        per_delta = distributed_sigma(epsilon, delta, 1e6, honest_sites, n_coordinates) / 1e6
        noise_per_gamma = math.sqrt(n_sites) * per_delta * levels * (1 + 1e-6)
        self.gamma = choose_scale(self.row_bound, n_rows, factorization.n_rounds, n_sites,
                                  noise_per_gamma, self.dim, bits)
        if self.gamma <= 0:
            raise ValueError(
                f"a {bits}-bit secure-aggregation field cannot hold this stream's "
                f"sums ({n_rows:.0f} rows over {n_sites} sites); use fewer rows per stream.")
        self.sensitivity = levels * (self.gamma + math.sqrt(self.dim))
        self.sigma = distributed_sigma(epsilon, delta, self.sensitivity, honest_sites,
                                       n_coordinates)
        self.unit_sigma = self.sigma / self.gamma
        self.rho = distributed_rho(self.sigma, self.sensitivity, honest_sites, n_coordinates)
        self.epsilon = zcdp_to_dp(self.rho, delta)
        self.total_sigma = math.sqrt(n_sites) * self.sigma
        self.wrap_probability = wrap_probability(
            self.gamma * n_rows * self.row_bound + 0.5 * factorization.n_rounds * n_sites,
            self.total_sigma, n_coordinates, bits)

    def node_bound(self, n_rows, n_steps):
        """Public bound on a lifted node sum of ``n_rows`` rows over
        ``n_steps`` steps: signal, rounding and ``TAIL`` noise std."""
        return (self.gamma * n_rows * self.row_bound + 0.5 * n_steps * self.n_sites
                + TAIL * self.total_sigma)

    def prefix_variance(self, step):
        """Variance per entry of the curvature noise in prefix ``step``'s
        estimate (all ``n_sites`` shares; a discrete Gaussian's variance is
        at most σ²)."""
        row = np.asarray(self.factorization.B)[step]
        return float(row @ row) * (self.total_sigma / self.gamma * self.scales[1]) ** 2


def secagg_plan(mechanism, horizon, n_sites, honest_sites, p1, n_models, settings, n_rows):
    """The :class:`SecAggPlan` of a new stream; refuses ``honest_sites``
    beyond the sites (before any charge)."""
    honest = n_sites if honest_sites is None else int(honest_sites)
    if honest > n_sites:
        raise ValueError(
            f"honest_sites={honest} is more than the stream's {n_sites} sites.")
    factorization = make_factorization(SECAGG[mechanism], horizon)
    return SecAggPlan(factorization, n_sites, honest, p1, n_models, settings.q,
                      settings.clip_norm, n_rows, settings.epsilon, settings.delta)


def warn_if_wraps(plan, mechanism):
    """:class:`WrapAroundWarning` when the bound on the probability that a
    modular sum wraps is not negligible (public quantities only)."""
    if plan.wrap_probability > WRAP_TOLERANCE:
        warnings.warn(WrapAroundWarning(
            f"mechanism={mechanism!r}: a modular sum may wrap around with probability up "
            f"to {plan.wrap_probability:.3g}; use fewer rows per stream."), stacklevel=5)


def site_messages(stream, part, theta, scales, *, q, fit_intercept):
    """One site's messages of a batch: its ``(a, J)`` at ``theta`` (no rows:
    zeros), packed to unit sensitivity, rounded, added to its tree nodes,
    each completed node with the site's share (:class:`SecAggSiteStream`)."""
    a, J = rows_summary([] if part is None else [part], theta, q, fit_intercept)
    return stream.send(pack_summary(a, J, scales))


class SecAggDWDServer:
    """The server's side of a 'secagg-tree' stream: the sums of the sites'
    messages, lifted and combined into prefix estimates, then the solve of
    'local-tree' (post-processing only).

    Parameters
    ----------
    plan : SecAggPlan
    """

    def __init__(self, plan):
        self.plan = plan
        self.C = np.asarray(plan.factorization.C)
        self.ends = node_ends(self.C)
        self.aggregate = SecAggTreeAggregate(plan.factorization, plan.gamma)
        self.rows = []  # rows per step (public)

    def node_bound(self, n_rows):
        """The public bound on the lifted node sums completing at the next
        step, whose batch has ``n_rows`` rows."""
        step = self.aggregate.step
        rows = np.asarray(self.rows + [n_rows], dtype=float)
        ending = np.flatnonzero(self.ends == step)
        return max(self.plan.node_bound(self.C[n, :step + 1] @ rows, self.C[n].sum())
                   for n in ending)

    def update(self, n_rows, n_seen, *, alpha, fit_intercept, messages=None, sums=None):
        """Sum the sites' ``messages`` mod ``2^bits`` (or take exact ``sums``
        of them), estimate the prefix sums and solve. Returns the new
        parameters and the prefix estimate of ``J``."""
        step = self.aggregate.step
        bound = self.node_bound(n_rows)
        self.rows.append(n_rows)
        estimate = (self.aggregate.add(messages, bound) if sums is None
                    else self.aggregate.add_sums(sums, bound))
        linear, summed = unpack_summary(estimate, *self.plan.layout, self.plan.scales)
        theta = summed_model_minimizer(linear, summed, self.plan.prefix_variance(step), n_seen,
                                       alpha=alpha, fit_intercept=fit_intercept)
        return theta, summed


class SecAggDWDStream:
    """The secret state of a 'secagg-tree' stream in this process: every
    site's integer stream (raw node sums, generator) and the server.

    Parameters
    ----------
    plan : SecAggPlan
    rng : numpy.random.Generator
        Spawns one child generator per site (no state is shared).
    """

    def __init__(self, plan, rng):
        self.plan = plan
        C = np.asarray(plan.factorization.C)
        self.sites = [SecAggSiteStream(C, plan.gamma, plan.sigma, plan.dim, child)
                      for child in rng.spawn(plan.n_sites)]
        self.server = SecAggDWDServer(plan)

    def step(self, site_parts, theta, n_seen, *, q, alpha, fit_intercept):
        """One batch: each site's messages, the server's modular sum, prefix
        estimate and solve. Returns the new parameters and the prefix
        estimate of ``J``."""
        parts = list(site_parts) + [None] * (len(self.sites) - len(site_parts))
        messages = [site_messages(stream, part, theta, self.plan.scales, q=q,
                                  fit_intercept=fit_intercept)
                    for stream, part in zip(self.sites, parts)]
        n_rows = sum(part[0].shape[0] for part in site_parts)
        return self.server.update(n_rows, n_seen, alpha=alpha, fit_intercept=fit_intercept,
                                  messages=messages)
