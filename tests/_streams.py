"""Noise streams on chosen draws, for tests (production streams draw from a generator only)."""

from skfedpriv.privacy._horizon import _as_shape
from skfedpriv.privacy._noise_stream import _ScaledSource


def stream_from_source(factorization, source, sigma=1.0, shape=()):
    """``factorization.noise_stream(rng, sigma, shape)`` with ``source(size)``
    in place of ``rng.standard_normal(size)`` as the draws ``z / sigma``
    (e.g. one-hot draws, to read ``B`` off the stream); ``size`` is
    ``(k,) + shape``, ``k`` the new columns of ``B`` a round uses."""
    return factorization._make_stream(_ScaledSource(source, sigma), _as_shape(shape))


def audit_summary_pair(before, after, sensitivities, epsilon, delta, noise_factor):
    """Audit a learner's 2-step Honaker stream of ``(a, J)`` summaries whose
    first step is ``before`` or ``after`` (one row replaced), noise std from
    the package's :class:`SiteNoiseStreams` at ``noise_factor`` times the
    calibrated σ (:func:`~._reference.audit_first_step_change`).

    Returns ``(mu_pair / mu_claim, lower)``: the pair's distinguishability
    over the claim's at this noise, and the ε lower bound."""
    import numpy as np

    from _reference import audit_first_step_change
    from skfedpriv.privacy import make_factorization
    from skfedpriv.privacy._continual_summaries import SiteNoiseStreams, continual_sigma

    (a, J), (an, Jn) = before, after
    factorization = make_factorization("honaker", 2)
    sigma = continual_sigma(epsilon, delta, factorization) * noise_factor
    noise = SiteNoiseStreams(factorization, 1, a.shape[0], 1, sigma, sensitivities,
                             np.random.default_rng(0))
    upper = np.triu_indices(a.shape[0])
    # the change in units of each entry's noise std
    shift = np.concatenate([(a - an).ravel() / noise.std[0], (J - Jn)[0][upper] / noise.std[1]])
    mu_pair, lower = audit_first_step_change(shift, factorization.B, delta)
    mu_claim = factorization.sensitivity / sigma
    return mu_pair / mu_claim, lower


def stream_resumed_from_a_pickle(clf, reference, X, y, g, b, resume_at=2):
    """Stream batches ``b == 0, 1, ...`` through ``clf`` and ``reference``
    (the same seed), continuing ``clf`` from a pickle at batch
    ``resume_at``: their models must stay equal, and the pickled original
    may not continue too (:class:`~skfedpriv.StreamReplayError`).
    Returns the continued copy."""
    import pickle

    import numpy as np
    import pytest

    from skfedpriv import StreamReplayError

    for k in range(int(b.max()) + 1):
        m = b == k
        if k == resume_at:
            original, clf = clf, pickle.loads(pickle.dumps(clf))
        clf.partial_fit(X[m], y[m], sample_group=g[m])
        reference.partial_fit(X[m], y[m], sample_group=g[m])
        np.testing.assert_array_equal(clf.coef_, reference.coef_)
    m = b == resume_at
    with pytest.raises(StreamReplayError):
        original.partial_fit(X[m], y[m], sample_group=g[m])
    return clf


def resumed_stream(params, budget, X, y, g, b, estimator=None):
    """A private stream of ``estimator(**params)`` (DWD by default) run with
    ``budget`` and resumed from a pickle at batch 2 beside a never-pickled
    twin (:func:`stream_resumed_from_a_pickle`); one more batch past the
    horizon then raises and changes nothing. Returns the fitted estimator."""
    import pickle

    import pytest

    from skfedpriv import DWDClassifier
    from skfedpriv.privacy import HorizonExceededError

    estimator = DWDClassifier if estimator is None else estimator
    clf = stream_resumed_from_a_pickle(estimator(**params, budget=budget), estimator(**params),
                                       X, y, g, b)
    before = pickle.dumps(clf.__dict__)
    with pytest.raises(HorizonExceededError):
        clf.partial_fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
    assert pickle.dumps(clf.__dict__) == before
    return clf


def small_stream_warns_before_spending(mechanism, X, y, g, b):
    """20 rows of batch 0 at ε = 0.1 under a budget of 0.05: the
    ``NoiseDominatesWarning`` comes before the charge refuses the call, and
    nothing is fitted."""
    import pytest

    from skfedpriv import DWDClassifier
    from skfedpriv.privacy import NoiseDominatesWarning, PrivacyBudget, PrivacyBudgetError

    m = b == 0
    budget = PrivacyBudget(epsilon=0.05, delta=1e-4)
    clf = DWDClassifier(mechanism=mechanism, epsilon=0.1, clip_norm=4.0, n_batches=4,
                        classes=[-1, 1], budget=budget)
    with pytest.warns(NoiseDominatesWarning, match="mostly noise"):
        with pytest.raises(PrivacyBudgetError):  # the charge comes after the warning
            clf.partial_fit(X[m][:20], y[m][:20], sample_group=g[m][:20])
    assert not hasattr(clf, "coef_")
