"""What a decentralized stream is sized for, fixed before any data is read.

The mixing matrix, the horizon, the radius, the block size and the gossip
steps (:class:`StreamDesign`), the regularization ``h`` and the warning
that the noise will drown the model: given, or the defaults of
:mod:`._decentralized_defaults`, from declared quantities only (Wang et al.
2025, eqs. 6-10, Corollaries 3.7-3.11).
"""

import warnings

from .._gossip import check_mixing_matrix, mixing_matrix
from ..privacy import NoiseDominatesWarning
from ._decentralized_defaults import (
    NOISE_DOMINATED,
    ZERO_DECISION_BLOCKS,
    default_block_size,
    default_h,
    default_radius,
    prefix_noise_norm,
    release_signal_to_noise,
)
from ._decentralized_state import StreamDesign


def mixing(topology, n_learners):
    """``(P, σ₂(P))`` of a named topology or a user's matrix (Assumption 3.4)."""
    if isinstance(topology, str):
        P = mixing_matrix(topology, n_learners)
        return P, check_mixing_matrix(P)[1]
    return check_mixing_matrix(topology, n_learners)


def stream_design(settings, solver, shape, spectral_gap, first_batch_rounds):
    """The :class:`StreamDesign`: horizon, radius, block size and gossip
    steps, given or defaults (:mod:`._decentralized_defaults`), from
    declared quantities only."""
    s = settings
    n, q, p1 = shape
    horizon = s.n_rounds
    if horizon is None and s.epsilon is not None:
        horizon = max(first_batch_rounds, 1)  # a private fit: the rounds of its data
    T = horizon if horizon is not None else max(first_batch_rounds, 1)
    radius = s.radius if s.radius is not None else default_radius(s.constraint, q, p1)
    L0 = solver.base_block_size(n, T, spectral_gap, s.alpha)
    L = _block_size(s, L0, T, q * p1)
    return StreamDesign(horizon=horizon, sizing_rounds=T, radius=radius, base_block_size=L0,
                        block_size=L, gossip_steps=solver.gossip_steps(n, T, spectral_gap, L))


def _block_size(settings, base_block_size, n_rounds, n_params_total):
    """``L``: the given block size or the default, with a warning when only
    blocks that play the zero decision fit in the run."""
    solver = settings.solver
    if solver not in ZERO_DECISION_BLOCKS:
        return 1
    delay = ZERO_DECISION_BLOCKS[solver]
    L = settings.block_size
    if L is None:  # the paper's, longer under privacy
        L = default_block_size(base_block_size, n_rounds, n_params_total,
                               settings.clip_norm, settings.epsilon, delay_blocks=delay)
    if n_rounds // L <= delay:
        warnings.warn(
            f"{n_rounds} rounds make {n_rounds // L} block(s) of {L} rounds, and "
            f"the first {delay} blocks of {solver!r} play the zero "
            "decision: the model will stay at zero. Use a smaller "
            "block_size, more rows per learner, or fewer learners.",
            UserWarning,
            stacklevel=7,
        )
    return L


def warn_if_noise_dominated(settings, design, calibration, shape, ogd_noise_scale):
    """Warn, before the budget is spent, when the noise is expected to drown
    the released model by more than ``NOISE_DOMINATED`` times
    (:func:`release_signal_to_noise`; public quantities only: T, L, n, D,
    G, R and the calibrated scale)."""
    s = settings
    n, q, p1 = shape
    T = design.sizing_rounds
    scale = calibration.scale
    if s.solver == "ogd":  # the released messages are those of round T
        scale = ogd_noise_scale(
            T, design.horizon, q * p1, s.clip_norm, design.radius, s.alpha, s.epsilon)
    ratio = release_signal_to_noise(s.solver, T, design.block_size, n, q * p1,
                                    s.clip_norm, design.radius, scale)
    if ratio < 1.0 / NOISE_DOMINATED:
        times = f"{1 / ratio:.3g} times" if ratio > 0 else "infinitely many times"
        warnings.warn(
            f"(epsilon={s.epsilon:g}, 0)-DP over all {T} rounds of "
            f"{n} learner(s) with {q} classes x {p1} parameters: the noise is "
            f"expected to be {times} the signal of the released "
            f"model (solver={s.solver!r}), which will score far below a "
            "non-private one, near chance when the noise is many times the signal. "
            "It needs more rounds per learner, fewer learners or parameters, "
            "or a larger epsilon (the signal grows with T and epsilon, the "
            "noise with the parameters; see the user guide, 'What a private "
            "run needs').",
            NoiseDominatesWarning,
            stacklevel=6,
        )


def regularization(settings, design, calibration, shape):
    """``h`` of eqs. 6 and 9: given, or the default (nan for ogd, unused)."""
    s = settings
    if s.h is not None:
        return s.h
    if s.solver == "ogd":
        return float("nan")
    L = design.block_size
    noise_norm = prefix_noise_norm(max(design.sizing_rounds // L - 1, 1), shape[1] * shape[2],
                                   calibration.sensitivity, s.epsilon)
    return default_h(min(design.base_block_size, L), s.clip_norm, design.radius, s.alpha,
                     noise_norm, block_size=L, n_params=shape[2])
