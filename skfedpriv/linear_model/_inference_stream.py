"""When the intervals of a renewable stream hold: its first batch, and the
shift that small batches give the estimate.

The renewable estimate ``θ_B`` after ``B`` batches solves
``Σ_j Ũ_j(θ) = 0``, where ``Ũ_j`` is batch ``j``'s score linearized at the
estimate ``θ_j`` the stream had when it saw that batch (exactly, by
induction over the renewable equation; see :mod:`._renewable`). The full
data's score at ``θ_B`` is therefore the sum of the linearization
remainders ``R_j = U_j(θ_B) - U_j(θ_j) - H_j (θ_B - θ_j)``, each of order
``W_j ‖θ_B - θ_j‖²``, and ``‖θ_B - θ_j‖² ≈ n_params / N_j`` (``N_j`` the
row weight up to batch ``j``). Solving with the total curvature (of order
``N_B``), the renewable estimate sits off the offline one by about

``κ · I`` standard errors,  ``I = n_params · Σ_{j≥2} (W_j / N_j) / √N_B``,

a deterministic shift the sandwich (the spread of the estimate) does not
see (``DWDClassifier``'s second-order correction, its default
``shift_correction='auto'`` where the correction's state fits, streams
started by ``fit`` included, subtracts its expectation:
:mod:`._second_order`). The constant ``κ`` depends on the
loss's third derivative and the
design; simulations measured ``κ ≈ 0.7`` for the logistic loss (4:1
classes), ``κ ≈ 1.1-1.6`` for genDWD (q = 1, 4:1 classes: the kink adds
to it) and ``0.4-0.5`` for genDWD with balanced classes
(benchmarks/README.md, "Stream batch size"). ``I`` is a function of public
quantities only (the parameter count and the sequence of
``n_samples_seen_``). For equal batches of ``n_b`` rows,
``Σ_{j≥2} W_j / N_j = H_B - 1`` (harmonic number) and ``I`` is largest near
``B = 10`` at ``0.61 n_params / √n_b``: batches of at least
``9.3 n_params²`` rows keep ``I ≤ 0.2`` (a shift of at most ~0.3 standard
errors, coverage of a nominal 95 % interval above ~93.5 %) at every stream
length; a large first batch (or ``fit`` on many rows) followed by small
batches keeps it small too, and ``I`` decays like ``log(N) / √N`` on a
long stream.

A stream whose first batch does not show every class (both sides of every
one-vs-rest model) cannot start a model there: that batch's rows enter the
renewable objective as its curvature at ``θ = 0`` while their score there is
dropped (the renewable equation assumes it vanishes at the previous
estimate), a shift the intervals cannot account for. With inference the
first batch must therefore show every class.
"""

import math
import warnings

import numpy as np

__all__ = ["SHIFT_INDEX_LIMIT", "StreamShiftWarning", "require_every_side", "track_stream_shift"]

#: The largest ``I`` (see the module doc) the stream's intervals are trusted at.
SHIFT_INDEX_LIMIT = 0.2


class StreamShiftWarning(UserWarning):
    """The batches of a ``partial_fit`` stream with ``inference=True`` are
    too small for its parameter count: the renewable estimate may sit off
    the offline one by a sizeable part of a standard error, and the
    intervals under-cover (see :doc:`/guide_inference`). Larger batches
    remove it; ``DWDClassifier``'s second-order correction (the default
    ``shift_correction='auto'`` where its state fits, in streams started
    by ``fit`` too, or ``'second-order'``) corrects the estimate and gives intervals that
    include the correction's own variance (measured to cover where the
    first-order ones under-cover, at some more width; where the shift is
    small it can over-correct and over-cover, see :doc:`/guide_inference`).
    A corrected stream still warns (the message says the correction is
    on); a first-order one says why it is not corrected."""


def require_every_side(started, two_sided, name):
    """Refuse, with ``inference=True``, a stream's first batch that cannot
    start every model.

    Parameters
    ----------
    started : ndarray of bool of shape (n_models,)
        Models started by earlier batches.
    two_sided : ndarray of bool of shape (n_models,)
        Models this batch shows both sides of (every class, multinomial).
    name : str
        The estimator, for the message.

    Raises
    ------
    ValueError
        If a model is neither started nor startable by this batch.
    """
    if np.any(~np.asarray(started) & ~np.asarray(two_sided)):
        raise ValueError(
            f"{name}(inference=True): the first batch of a stream must show every "
            "class (rows of each class; each one-vs-rest model both sides). This "
            "batch's rows would enter the renewable update as curvature at zero "
            "coefficients, a shift the intervals cannot account for. Start the "
            "stream with a batch showing every class, or use inference=False."
        )


def track_stream_shift(previous, batch_weight, seen, n_params, name, stacklevel=2,
                       remedy=""):
    """Advance ``Σ_{j≥2} W_j / N_j`` by one batch and warn when the shift
    index ``I`` exceeds :data:`SHIFT_INDEX_LIMIT`.

    Parameters
    ----------
    previous : float or None
        The sum after the earlier batches (None: this batch starts the
        stream, and adds nothing).
    batch_weight : float
        ``W_b``, the batch's row weight.
    seen : float
        ``N_b``, the row weight of the stream with this batch.
    n_params : int
        Identified parameters of one model (``p1``; multinomial
        ``(n_classes - 1) p1``).
    name : str
        The estimator, for the message.
    stacklevel : int, default=2
        Of the warning (the caller's frames up to the user's call).
    remedy : str, default=""
        What the estimator does or offers about the shift (a
        ``DWDClassifier``'s second-order correction, on or why not:
        :func:`~._second_order.shift_remedy`), inserted in the message.

    Returns
    -------
    ratio_sum : float
    """
    if previous is None:
        return 0.0
    ratio_sum = previous + batch_weight / seen
    index = n_params * ratio_sum / math.sqrt(seen)
    if index > SHIFT_INDEX_LIMIT:
        warnings.warn(
            f"{name}(inference=True): this stream's batches are small for its "
            f"{n_params} parameters (shift index {index:.2f} > {SHIFT_INDEX_LIMIT}): the "
            "renewable estimate may sit off its target by a sizeable part of a "
            f"standard error and the intervals under-cover. {remedy}Batches of at least "
            f"{math.ceil(9.3 * n_params ** 2)} rows (9.3 x parameters squared), a larger "
            "first batch, or an offline fit keep it below the limit.",
            StreamShiftWarning, stacklevel=stacklevel)
    return ratio_sum
