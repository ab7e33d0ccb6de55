"""The typed state of a :class:`~skfedpriv.linear_model.DecentralizedLogisticRegression` stream.

:class:`StreamDesign` and :class:`NoiseCalibration` are fixed when a stream
starts, from declared quantities only (public: they are released as
``n_rounds_``, ``radius_``, ``block_size_``, ..., ``noise_scale_``);
:class:`DecentralizedTrainingState` is the one secret object the estimator
holds as ``_training_state``. Shapes: ``n`` learners, ``q`` classes, ``p``
parameters per class (``n_features + fit_intercept``). Symbols: Wang et al.
(2025), Algorithms 1 and 3 (PD-FTGL, PD-OCG).
"""

from dataclasses import dataclass, field

from ._base import TrainingState
from ._decentralized_settings import DecentralizedSettings


@dataclass(frozen=True)
class StreamDesign:
    """What a stream is sized for (public, data-independent)."""

    #: the rounds the noise is calibrated for; None: unlimited (non-private)
    horizon: object
    #: ``T`` the defaults are sized by (the horizon, or the first batch's rounds)
    sizing_rounds: int
    #: ``R`` (``τ`` for the trace-norm ball) of the constraint set ``K``
    radius: float
    #: the paper's block size ``L₀`` (eq. 7; Corollaries 3.10, 3.11)
    base_block_size: int
    #: ``L``, the rounds of one block (1 for ogd)
    block_size: int
    #: gossip steps per block (``L``; ``L'`` of eq. 10 for ocg; 1 for ogd)
    gossip_steps: int


@dataclass(frozen=True)
class NoiseCalibration:
    """The noise of a run (line 1's ``D``), fixed before any data is read."""

    #: L1 sensitivity of one leaf position of all learners' trees (nan for ogd)
    sensitivity: float
    #: Laplace scale per coordinate, released as ``noise_scale_`` (0 non-private)
    scale: float
    #: the binary trees ``B_i`` of all learners (a TreeAggregator, secret), or
    #: None (ogd; a non-private stream without horizon)
    tree: object


@dataclass(eq=False, repr=False)
class DecentralizedTrainingState(TrainingState):
    """Everything a decentralized stream continues from and must not publish.

    Arrays of decisions and sums have shape ``(n, q, p)``. Public here means
    it is also released (or is a hyperparameter); every other field is
    secret. The repr names the fields, never their values.
    """

    #: the stream's settings (public)
    settings: DecentralizedSettings
    #: what the stream is sized for (public)
    design: StreamDesign
    #: ``P`` of Assumption 3.4, shape (n, n) (public, ``mixing_matrix_``)
    mixing_matrix: object
    #: ``θ``, the gossip momentum of eq. 7 (public, ``theta_``)
    gossip_momentum: float
    #: ``h`` of eqs. 6 and 9 (public, ``h_``; nan for ogd)
    regularization: float
    #: ``D = q p``, parameters of one learner's decision (public)
    n_parameters: int
    #: the noise generator (secret; shared, not copied, by a continuation)
    rng: object
    #: the binary trees ``B_i`` with their noise (secret), or None
    tree: object
    #: ``x_i(z)``, the decision each learner plays (secret for ogd, whose
    #: release is the noised messages)
    decisions: object
    #: ``ẑ_i(z)``, the last (noised) prefix sum of the trees (secret)
    prefix_sum: object
    #: ``d_i(z)``, the current block's sum of clipped gradients (secret)
    block_gradient_sum: object
    #: ``(d_i^k(z-1), d_i^{k-1}(z-1))`` of eq. 5, the previous block's sums
    #: under gossip; None during the first block (secret)
    gossip: object
    #: ogd: the messages of the next round, decision plus noise (released)
    messages: object
    #: ``z``, the current block (1-based)
    block: int = 1
    #: ``k``, rounds of the current block already played
    round_in_block: int = 0
    #: leaves added to the trees
    n_leaves: int = 0
    #: rounds processed since the stream started (``n_rounds_seen_``)
    rounds_seen: int = 0
    #: test instrumentation: ``(leaf, released prefix sum)`` per leaf, or None
    leaf_trace: object = None
    #: benchmark instrumentation: the learner whose loss is traced, or None
    trace_learner: object = None
    #: benchmark instrumentation: ``(per-round loss, rows)`` per run, or None
    loss_trace: object = None
    #: set by the estimator's commit under a mechanism (its stream position)
    stream_id: object = field(default=None)
    position: int = 0
