"""Online federated logistic regression with local steps and correlated-noise LDP.

Implements Algorithm 1 of Zhang, Zhu, Fay and Johansson, "Locally
differentially private online federated learning with correlated noise"
(``shared/papers/ldp-online-federated-correlated-noise.txt``): each call to
``partial_fit`` is one communication round.
"""

import math
import numbers

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator

from ..privacy import (
    PrivacyBudget,
    PrivacyBudgetError,
    as_generator,
    check_privacy_params,
    clip_rows,
    gaussian_sigma,
    warn_if_seeded,
)
from ..privacy import make_factorization
from ._base import FederatedClassifierMixin, TrainingState, _restore_feature_attributes_on_error
from ._local_steps import chunk_layout, local_round

MECHANISMS = (None, "independent", "tree", "honaker", "toeplitz", "optimal", "blt")

#: Keys of the round state that are training state, not release: the model
#: buffer, the learner index, the noise streams (generators and their past
#: draws), the noise increments not yet sent, the factorization.
_TRAINING_KEYS = ("_theta", "_learner_index", "_cohorts", "_pending", "_rng",
                  "_factorization", "_noise_at_sites")


def _check_number(value, name, *, low=None, low_open=True, integer=False,
                  allow_none=False):
    if value is None and allow_none:
        return None
    kinds = numbers.Integral if integer else numbers.Real
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, kinds):
        kind = "an integer" if integer else "a real number"
        raise ValueError(f"{name} must be {kind}, got {value!r}.")
    if not integer and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    if low is not None and (value <= low if low_open else value < low):
        op = ">" if low_open else ">="
        raise ValueError(f"{name} must be {op} {low}, got {value!r}.")
    return int(value) if integer else float(value)


class LogisticRegression(FederatedClassifierMixin, BaseEstimator):
    """Online federated logistic regression with local steps and local DP.

    Algorithm 1 of Zhang, Zhu, Fay and Johansson [1]_. Rows live at
    *learners* named by ``sample_group``. One call to :meth:`partial_fit` is
    one communication round ``r``:

    1. every learner present in the call takes its rows of the call, in
       order, as its clients of the round and splits them into
       ``local_steps`` (τ) consecutive chunks (sizes as equal as possible);
    2. starting from the global model ``x^r`` it takes τ local steps
       ``z <- z - η (mean of clipped per-example gradients of the chunk
       + alpha z)`` (eq. 2, first line; the intercept is not penalized);
    3. it forms ``g_i^r = (x^r - z_i^{r,τ}) / (η τ)`` (Algorithm 1, line 10),
       adds its correlated-noise increment ``(B ξ_i)_{r+1} - (B ξ_i)_r``
       (lines 11-12) and sends the result ``ĝ_i^r``;
    4. the server averages the messages it received and steps,
       ``x^{r+1} = x^r - η_g η τ mean_i ĝ_i^r`` (line 15).

    A learner absent from a round sends nothing and the server averages over
    the learners present. Its noise increments of the rounds it missed are
    added to its next message, so what the server accumulates from every
    learner is always a noisy prefix sum ``(A G_i + B ξ_i)_r`` (eq. 4).
    :meth:`fit` resets the model and streams the rows once through the same
    round function over ``n_rounds`` rounds: each learner's rows, in order,
    are split into ``n_rounds`` consecutive blocks, block ``r`` forms its
    clients of round ``r``.

    Two classes are fitted with one logistic model; more classes
    one-vs-rest (one logistic model per class, all trained in the same
    rounds on the same clients), with the budget shared as described below.

    Parameters
    ----------
    local_steps : int, default=5
        τ, local steps per round.
    learning_rate : float, default=0.5
        Local step size η.
    server_learning_rate : float, default=1.0
        Server step size η_g (the server moves by ``η_g η τ`` times the mean
        message).
    n_rounds : int, default=100
        Horizon R: the number of rounds the noise is planned for, and the
        number of rounds :meth:`fit` splits the rows into. With a mechanism,
        :meth:`partial_fit` past ``n_rounds`` rounds raises
        :class:`~skfedpriv.privacy.PrivacyBudgetError`.
    mechanism : {None, 'independent', 'tree', 'honaker', 'toeplitz', \
'optimal', 'blt'}, default=None
        Noise of each learner's messages, from the factorization ``A = B C``
        of the R×R prefix-sum matrix (section III-B): independent noise
        (``C = I``), binary tree (eq. 5) with the plain or Honaker estimator,
        Toeplitz square root (eq. 8), optimal (eq. 7), or buffered linear
        Toeplitz. ``None`` adds no noise (not private).
    epsilon : float, default=1.0
        ε of the local DP guarantee (ignored when ``mechanism=None``).
    delta : float, default=1e-5
        δ of the local DP guarantee, ``0 < delta < 1``.
    clip_norm : float, default=1.0
        B_g: every per-example gradient (of all class models together) is
        clipped to this L2 norm; with K one-vs-rest models, each model's
        per-example gradient is clipped to ``clip_norm / sqrt(K)``.
        Applied with and without a mechanism, so ``mechanism=None`` is the
        same algorithm without noise.
    feature_clip_norm : float or None, default=None
        C_x: if set, every row is clipped to L2 norm ``C_x`` (in
        ``fit``, ``partial_fit`` and at prediction) and the local steps are
        kept non-expansive, which allows the smaller sensitivity
        ``2 B_g / τ`` (see Notes). ``None`` leaves rows as they are and, with
        a mechanism, calibrates for ``2 B_g``.
    alpha : float, default=0.0
        L2 penalty strength (weight decay in the local steps, not clipped).
    fit_intercept : bool, default=True
        Fit an unpenalized intercept.
    random_state : None, int, numpy.random.Generator or RandomState, \
default=None
        Source of the noise. ``None`` uses fresh OS entropy, as private
        releases should. With a mechanism, an integer seed makes ``fit``
        and the first ``partial_fit`` of a stream emit a
        :class:`~skfedpriv.privacy.SeededNoiseWarning`: whoever knows the
        seed can regenerate the noise and remove it.
    budget : PrivacyBudget or None, default=None
        A budget shared with other estimators (it survives ``clone``):
        ``fit`` and the first ``partial_fit`` of a stream spend
        ``(epsilon, delta)`` from it (the guarantee of all ``n_rounds``
        rounds) before any state changes, and raise
        :class:`~skfedpriv.PrivacyBudgetError` if it would overspend. The
        spend is recorded as one Gaussian mechanism (``sigma=noise_std_``,
        ``sensitivity=sensitivity_``, see Notes), so the budget's ledger can
        compose several streams exactly.
    classes : array-like of shape (n_classes,) or None, default=None
        The label set, declared. With a mechanism it is required (here or
        as ``classes`` of the first :meth:`partial_fit`): a label set read
        from the data would reveal a row's label (a row with a new label
        changes ``classes_`` and the shape of ``coef_``). Rows with a label
        outside it are refused with a ``ValueError`` before anything
        changes. ``None`` without a mechanism: ``fit`` takes the labels of
        ``y``, as scikit-learn does.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The declared label set (with a mechanism: the ``classes``
        hyperparameter or the first ``partial_fit``'s ``classes``, never
        read from the data).
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        The global model ``x^r`` after the last round: post-processing of
        the learners' noisy messages, covered by the statement.
    intercept_ : ndarray of shape (1,) or (n_classes,)
        Part of the global model, covered likewise.
    n_features_in_ : int
        Data-independent (the schema).
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Defined when X has string feature names. Data-independent.
    learners_ : ndarray of shape (n_learners,)
        Labels of the learners seen, in order of first appearance (learners
        new in the same call in the order of :func:`numpy.unique`). It
        depends on ``sample_group`` only, which the neighbouring relation
        keeps (a replaced row stays at its learner and round), and tells no
        more than the server sees: which learners sent messages. There are
        no per-learner models.
    n_rounds_seen_ : int
        Communication rounds run so far (data-independent).
    gradient_sensitivity_ : float
        L2 bound on the change of one learner's ``g_i^r`` when one client of
        the round is replaced: ``2 B_g / τ`` when ``feature_clip_norm`` is
        set, else ``2 B_g``.
    factorization_sensitivity_ : float
        Largest column norm of ``C`` (exact, computed from the factors; 1
        for independent noise; ``nan`` without a mechanism).
    sensitivity_ : float
        L2 sensitivity of ``C G_i``: ``factorization_sensitivity_ *
        gradient_sensitivity_`` (Appendix B, eq. 15); ``nan`` without a
        mechanism.
    noise_std_ : float
        Standard deviation σ of each entry of ξ_i, from the exact analytic
        Gaussian calibration of (ε, δ) for ``sensitivity_``; 0 without a
        mechanism.
    privacy_spent_ : tuple of float
        ``(epsilon, delta)`` of the guarantee, which covers all
        ``n_rounds`` rounds (so it is the full budget once the first round
        ran); ``(inf, 0.0)`` without a mechanism.

    Notes
    -----
    **Privacy statement.** With a mechanism, every learner's sequence of
    messages ``ĝ_i^0, ..., ĝ_i^{R-1}`` over all ``n_rounds`` rounds is
    (ε, δ)-differentially private with respect to replacing the row of one
    of its clients (any one row of any one round) by any other row, against
    the server and anyone else who sees the learner's messages or the
    released global models ``x^1, ..., x^R`` (post-processing). It holds
    under adaptive continual release (Denisov et al. 2022, Thm. 2.1, as used
    in Appendix B). Each message is post-processing of ``C G_i + ξ_i`` with
    ``ξ_i`` iid ``N(0, σ²)``; σ is the exact analytic Gaussian calibration
    (Balle & Wang 2018) for the L2 sensitivity ``sensitivity_``, not the
    paper's zCDP conversion (Lemma IV.8), which adds more noise. Learners
    joining after round 0 use the first rounds of a stream of the same
    factorization (a leading block of ``C``: sensitivity no larger).

    **Sensitivity.** Lemma IV.8 uses ``Δ = 2 B_g / τ`` for ``g_i^r``. The
    replaced client changes one local step; the other τ - 1 gradients are
    taken at iterates that move with it, so the bound needs every later
    local step to be non-expansive. This holds here when rows are clipped
    to ``C_x`` (``feature_clip_norm``): per model, the clipped gradient of
    the logistic loss on row ``x̃ = (x, 1)`` is ``ψ(θ·x̃) x̃`` with ``ψ`` the
    logistic derivative clipped in magnitude, a monotone function with
    Lipschitz constant at most 1/4, so the clipped loss is convex and
    ``L``-smooth with ``L = (C_x² + fit_intercept) / 4``; adding the
    penalty gives ``L + alpha``, and a gradient step of a convex
    ``L'``-smooth function with ``η <= 2 / L'`` is non-expansive
    (Baillon-Haddad). The code therefore raises a ``ValueError`` if a
    mechanism is set with ``learning_rate > 2 / (L + alpha)``. Then the
    replaced step moves the local iterate by at most ``η 2 B_g / m`` (m the
    chunk size), later steps do not enlarge it and ``‖g_i - g_i'‖ <=
    2 B_g / (τ m) <= 2 B_g / τ``. Softmax would not keep this structure
    (clipping a vector-valued gradient need not stay co-coercive), which is
    why multiclass is one-vs-rest, each model clipped to ``B_g/√K``, so one
    client's gradient of all models has norm at most ``B_g`` and the same
    ``2 B_g / τ`` bounds all models together.
    Without ``feature_clip_norm`` the code calibrates for ``2 B_g``: every
    local step moves by η times a mean of vectors of norm at most ``B_g``
    plus the penalty step ``(1 - η alpha)`` (a contraction; ``η alpha <= 2``
    is enforced), so ``‖z_τ - z_τ'‖ <= 2 η τ B_g``. Both bounds are checked
    by brute force in the tests.

    **Release and training state.** Every public attribute is part of the
    release; with a mechanism each is covered by the privacy statement
    (``coef_``, ``intercept_``) or does not depend on the rows' values (the
    declared ``classes_``, ``learners_``, ``n_rounds_seen_``, the schema,
    and the calibration attributes, which depend on the hyperparameters
    only). The fitted estimator also holds the secret state that
    continues the stream, in one private ``TrainingState`` object: the
    noise generator, every learner's noise stream (its past draws or
    buffers) and the increments of missed rounds not yet sent. Whoever
    holds it can subtract the noise from the model (with
    ``random_state=None`` too) and read clipped gradients, hence labels. Pickle the training estimator only to continue a stream
    on a trusted machine; publish :meth:`release`, a fitted copy that
    predicts identically and holds only the attributes listed above (and
    the validated hyperparameters). ``partial_fit`` on a release raises
    :class:`~skfedpriv.linear_model._base.ReleasedModelError`.

    **Budget.** The learners' noise is independent, so the whole stream,
    all learners and all rounds, is one Gaussian mechanism on the stacked
    ``C G_i`` with L2 sensitivity ``sensitivity_`` (one row is at one
    learner) and noise std ``noise_std_``: a ``budget`` is charged once per
    stream with ``mechanism="gaussian"``, ``mu = sensitivity_ /
    noise_std_``, whose exact ε at ``delta`` is ``epsilon``.

    **Noise state.** Tree: ``O(log R)`` arrays of the model's size per
    learner; BLT: ``n_buffers`` arrays; Toeplitz and optimal keep every past
    draw (``O(r)`` arrays per learner at round r; see
    :mod:`skfedpriv.privacy`). The optimal and BLT factors are
    computed once per R and cached on disk.

    References
    ----------
    .. [1] Zhang, Zhu, Fay, Johansson, "Locally differentially private
       online federated learning with correlated noise", Algorithm 1,
       eqs. 2-5, 7-8, Lemma IV.8, Appendix B (eq. 15-16).
    .. [2] Denisov, McMahan, Rush, Smith, Thakurta, "Improved differential
       privacy for SGD via optimal private linear operators on adaptive
       streams", NeurIPS 2022.
    .. [3] Balle and Wang, "Improving the Gaussian mechanism for
       differential privacy", ICML 2018.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skfedpriv.linear_model._logistic import LogisticRegression
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> learners = [i % 5 for i in range(len(y))]
    >>> clf = LogisticRegression(n_rounds=20, local_steps=5, learning_rate=0.5)
    >>> round(clf.fit(X, y, sample_group=learners).score(X, y), 2)
    0.98
    >>> private = LogisticRegression(n_rounds=20, mechanism="toeplitz",
    ...                              epsilon=2.0, delta=1e-3,
    ...                              feature_clip_norm=6.0, classes=[0, 1],
    ...                              learning_rate=0.2)
    >>> private.fit(X, y, sample_group=learners).privacy_spent_
    (2.0, 0.001)
    >>> published = private.release()  # no noise state: safe to share
    >>> bool((published.predict(X) == private.predict(X)).all())
    True
    """

    # the hyperparameters as validated at the start of the stream (data-
    # independent); prediction reads feature_clip_norm from them
    _release_private_attributes = ("_params",)

    def __init__(
        self,
        local_steps=5,
        learning_rate=0.5,
        server_learning_rate=1.0,
        n_rounds=100,
        mechanism=None,
        epsilon=1.0,
        delta=1e-5,
        clip_norm=1.0,
        feature_clip_norm=None,
        alpha=0.0,
        fit_intercept=True,
        random_state=None,
        budget=None,
        classes=None,
    ):
        self.local_steps = local_steps
        self.learning_rate = learning_rate
        self.server_learning_rate = server_learning_rate
        self.n_rounds = n_rounds
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.feature_clip_norm = feature_clip_norm
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.random_state = random_state
        self.budget = budget
        self.classes = classes

    # ------------------------------------------------------------------
    # parameters
    # ------------------------------------------------------------------

    def _check_params(self):
        """Validate hyperparameters; return them as a dict (nothing stored)."""
        p = {
            "tau": _check_number(self.local_steps, "local_steps", low=1,
                                 low_open=False, integer=True),
            "eta": _check_number(self.learning_rate, "learning_rate", low=0),
            "eta_g": _check_number(self.server_learning_rate,
                                   "server_learning_rate", low=0),
            "R": _check_number(self.n_rounds, "n_rounds", low=1, low_open=False,
                               integer=True),
            "B": _check_number(self.clip_norm, "clip_norm", low=0),
            "Cx": _check_number(self.feature_clip_norm, "feature_clip_norm",
                                low=0, allow_none=True),
            "alpha": _check_number(self.alpha, "alpha", low=0, low_open=False),
        }
        if not isinstance(self.fit_intercept, (bool, np.bool_)):
            raise ValueError(
                f"fit_intercept must be a bool, got {self.fit_intercept!r}."
            )
        if self.mechanism not in MECHANISMS:
            raise ValueError(
                f"mechanism must be one of {MECHANISMS}, got {self.mechanism!r}."
            )
        if self.mechanism is not None:
            try:
                check_privacy_params(self.epsilon, self.delta, require_delta=True)
            except TypeError as exc:
                raise ValueError(str(exc)) from None
            eta, alpha = p["eta"], p["alpha"]
            if p["Cx"] is not None:
                smooth = (p["Cx"] ** 2 + float(self.fit_intercept)) / 4.0
                limit = 2.0 / (smooth + alpha)
                if eta > limit * (1 + 1e-12):
                    raise ValueError(
                        f"learning_rate={eta!r} is too large for the "
                        "sensitivity 2*clip_norm/local_steps: local steps are "
                        "non-expansive only for learning_rate <= 2 / (L + alpha) "
                        f"= {limit:.6g}, with L = (feature_clip_norm**2 + "
                        "fit_intercept) / 4. Lower learning_rate or "
                        "feature_clip_norm, or set feature_clip_norm=None to "
                        "calibrate for 2*clip_norm."
                    )
            elif eta * alpha > 2.0:
                raise ValueError(
                    f"learning_rate * alpha = {eta * alpha:.6g} > 2: the penalty "
                    "step would expand distances; lower learning_rate or alpha."
                )
        if self.budget is not None and not isinstance(self.budget, PrivacyBudget):
            raise ValueError(f"budget must be a PrivacyBudget or None, got {self.budget!r}.")
        p["fit_intercept"] = bool(self.fit_intercept)
        p["mechanism"] = self.mechanism
        if self.mechanism is not None:
            p["epsilon"], p["delta"] = float(self.epsilon), float(self.delta)
        return p

    def _gradient_sensitivity(self, params):
        # Lemma IV.8 / eq. 15: 2 B_g / τ in the non-expansive regime, else 2 B_g.
        if params["Cx"] is not None:
            return 2.0 * params["B"] / params["tau"]
        return 2.0 * params["B"]

    # ------------------------------------------------------------------
    # data
    # ------------------------------------------------------------------

    def _features(self, X, params):
        """Clip rows to C_x (if set) and append the intercept column."""
        if params["Cx"] is not None:
            X = clip_rows(X, params["Cx"])
        if params["fit_intercept"]:
            X = np.hstack([X, np.ones((X.shape[0], 1))])
        return X

    def _targets(self, y, classes):
        return self._one_vs_rest_targets(y, classes)

    # ------------------------------------------------------------------
    # state
    # ------------------------------------------------------------------

    def _initial_state(self, params, classes, n_features, *, noise_here=True):
        """The state of a new stream; spends the budget (the only side effect).

        ``noise_here=False``: the learners hold the noise streams
        (:mod:`skfedpriv.flower`); this estimator draws nothing.
        """
        n_models = 1 if len(classes) == 2 else len(classes)
        p = n_features + params["fit_intercept"]
        state = {
            "classes_": classes,
            "_theta": np.zeros((n_models, p)),
            "learners_": np.empty(0, dtype=object),
            "_learner_index": {},
            "_cohorts": [],
            "_pending": np.zeros((0, n_models * p)),
            "n_rounds_seen_": 0,
            "_params": params,
        }
        state.update(self._noise_calibration(params))
        private = self.mechanism is not None
        state["_rng"] = as_generator(self.random_state) if private and noise_here else None
        state["_noise_at_sites"] = private and not noise_here
        if private and self.budget is not None:
            # One spend per stream: the whole stream (every learner's messages
            # over all n_rounds rounds) is one Gaussian mechanism on C G_i
            # with noise std noise_std_ and L2 sensitivity sensitivity_, so
            # the ledger can compose it exactly (mu = sensitivity_ / noise_std_).
            eps, delta = state["privacy_spent_"]
            self.budget.spend(
                eps, delta,
                note=f"LogisticRegression(mechanism={self.mechanism!r}) on a new stream",
                mechanism="gaussian", sigma=state["noise_std_"],
                sensitivity=state["sensitivity_"],
            )
        return state

    def _noise_calibration(self, params):
        """The factorization and the noise std of each entry of ξ_i.

        Depends only on the hyperparameters (``params`` from
        :meth:`_check_params`), never on data: a learner holding its own
        noise stream (:mod:`skfedpriv.flower`) computes it from its own
        parameters.
        """
        gsens = self._gradient_sensitivity(params)
        if self.mechanism is None:
            return dict(
                gradient_sensitivity_=gsens, factorization_sensitivity_=math.nan,
                sensitivity_=math.nan, noise_std_=0.0,
                privacy_spent_=(math.inf, 0.0), _factorization=None,
            )
        fact = make_factorization(self.mechanism, params["R"])
        sens = float(fact.sensitivity) * gsens
        eps, delta = check_privacy_params(self.epsilon, self.delta,
                                          require_delta=True)
        return dict(
            gradient_sensitivity_=gsens,
            factorization_sensitivity_=float(fact.sensitivity),
            sensitivity_=sens,
            noise_std_=gaussian_sigma(eps, delta, sens),
            privacy_spent_=(eps, delta),
            _factorization=fact,
        )

    def _commit(self, state):
        """Split a round state into the release and the training state.

        Public attributes (``coef_``, ``intercept_``, ``classes_``, ...) are
        the release; everything else a stream needs to continue goes into
        one :class:`~skfedpriv.linear_model._base.TrainingState`.
        """
        for key, value in state.items():
            if key not in _TRAINING_KEYS:
                setattr(self, key, value)
        self._training_state = TrainingState(
            **{key.lstrip("_"): state[key] for key in _TRAINING_KEYS}
        )
        theta = state["_theta"]
        d = self.n_features_in_
        self.coef_ = theta[:, :d].copy()
        self.intercept_ = (theta[:, d].copy() if self._params["fit_intercept"]
                           else np.zeros(theta.shape[0]))

    def _state(self):
        """The round state of the stream (release plus training state)."""
        keys = ("classes_", "learners_", "n_rounds_seen_", "_params",
                "gradient_sensitivity_", "factorization_sensitivity_",
                "sensitivity_", "noise_std_", "privacy_spent_")
        state = {k: getattr(self, k) for k in keys}
        training = self._training_state
        state.update({key: getattr(training, key.lstrip("_")) for key in _TRAINING_KEYS})
        return state

    # ------------------------------------------------------------------
    # the round
    # ------------------------------------------------------------------

    def _learner_codes(self, state, site_labels, site_codes):
        """Map the batch's learner labels to global learner indices.

        New learners are appended (to a copy of the state's containers).
        Returns the global code of each row and the number of new learners.
        """
        index = dict(state["_learner_index"])
        new = [lab for lab in site_labels.tolist() if lab not in index]
        for lab in new:
            index[lab] = len(index)
        if new:
            labels = np.empty(len(index), dtype=object)
            labels[: len(state["learners_"])] = state["learners_"]
            labels[len(state["learners_"]):] = new
            state["learners_"] = labels
            state["_learner_index"] = index
        mapping = np.array([index[lab] for lab in site_labels.tolist()], dtype=np.intp)
        return mapping[site_codes], len(new)

    def _run_round(self, state, Xa, targets, codes, n_new):
        """One communication round r (Algorithm 1, lines 4-15) on ``state``.

        ``state`` is a fresh dict whose arrays may be replaced, never
        mutated in place (so a caller's old state stays valid).
        """
        params = state["_params"]
        theta = state["_theta"]
        n_models, p = theta.shape
        if n_new:  # learners joining this round: their own noise stream
            first = state["_pending"].shape[0]
            state["_pending"] = np.vstack(
                [state["_pending"], np.zeros((n_new, n_models * p))]
            )
            if state["_factorization"] is not None:
                stream = state["_factorization"].noise_stream(
                    state["_rng"], state["noise_std_"], (n_new, n_models * p)
                )
                state["_cohorts"] = state["_cohorts"] + [(first, first + n_new, stream)]
        learners, g = self._local_gradients(theta, Xa, targets, codes, params)
        messages = g.reshape(learners.size, n_models * p)
        if state["_factorization"] is not None:
            # Lines 11-12: each learner adds (B ξ_i)_{r+1} - (B ξ_i)_r; the
            # increments of rounds it missed were kept and are sent now.
            pending = state["_pending"].copy()
            for lo, hi, stream in state["_cohorts"]:
                pending[lo:hi] += stream.next()
            messages = messages + pending[learners]
            pending[learners] = 0.0
            state["_pending"] = pending
        return self._server_step(state, messages)

    def _local_gradients(self, theta, Xa, targets, codes, params):
        """Lines 4-10: ``(learners present, g_i^r of each)`` at the model ``theta``.

        ``g`` has shape ``(n_present, n_models, p)``; no noise is added.
        """
        n_models, p = theta.shape
        if not Xa.shape[0]:
            return np.empty(0, dtype=np.intp), np.zeros((0, n_models, p))
        return local_round(
            theta, Xa, targets, codes, local_steps=params["tau"],
            learning_rate=params["eta"], clip_norm=params["B"],
            alpha=params["alpha"], penalize=self._penalty_mask(p, params),
        )

    @staticmethod
    def _server_step(state, messages):
        """Line 15 on ``state``: ``x^{r+1} = x^r - η_g η τ mean_i ĝ_i^r``.

        ``messages`` has one flattened message per present learner, in
        increasing learner index (no learner present: the model stays).
        """
        params = state["_params"]
        theta = state["_theta"]
        if messages.shape[0]:
            step = params["eta_g"] * params["eta"] * params["tau"]
            theta = theta - step * messages.mean(axis=0).reshape(theta.shape)
        state["_theta"] = theta
        state["n_rounds_seen_"] = state["n_rounds_seen_"] + 1
        return state

    @staticmethod
    def _penalty_mask(p, params):
        mask = np.ones(p)
        if params["fit_intercept"]:
            mask[-1] = 0.0
        return mask

    # ------------------------------------------------------------------
    # public API
    # ------------------------------------------------------------------

    def fit(self, X, y, sample_group=None):
        """Reset and stream the rows once over ``n_rounds`` rounds.

        Each learner's rows, in order, are split into ``n_rounds``
        consecutive blocks (as :func:`numpy.array_split`); block ``r`` of
        every learner is round ``r``, run by the same code as
        :meth:`partial_fit`. A learner with fewer rows than ``n_rounds`` is
        absent from the later rounds.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_group : array-like of shape (n_samples,), default=None
            Learner of each row (any hashable labels); None is one learner.

        Returns
        -------
        self : LogisticRegression
        """
        params = self._check_params()
        with _restore_feature_attributes_on_error(self):
            batch, classes = self._validate_batch(
                X, y, sample_group, None, reset=True, infer_classes=True
            )
            state = self._initial_state(params, classes, batch.X.shape[1])
        if self.mechanism is not None:
            warn_if_seeded(self.random_state, "LogisticRegression")
        Xa = self._features(batch.X, params)
        targets = self._targets(batch.y, classes)
        codes, n_new = self._learner_codes(state, batch.site_labels, batch.site_codes)
        # round of each row: block of its learner's rows (stream order kept)
        order, _, _, block, _ = chunk_layout(codes, params["R"])
        perm = np.argsort(block, kind="stable")
        by_round = order[perm]
        bounds = np.searchsorted(block[perm], np.arange(params["R"] + 1))
        for r in range(params["R"]):
            rows = by_round[bounds[r]:bounds[r + 1]]
            state = self._run_round(state, Xa[rows], targets[rows], codes[rows],
                                    n_new if r == 0 else 0)
        self._commit(state)
        return self

    def partial_fit(self, X, y, sample_group=None, classes=None):
        """Run one communication round on the clients of this call.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The round's clients (rows), in arrival order per learner.
        y : array-like of shape (n_samples,)
        sample_group : array-like of shape (n_samples,), default=None
            Learner of each row; None is one learner. Learners not in the
            call are absent from the round.
        classes : array-like of shape (n_classes,), default=None
            All classes of the stream; required on the first call.

        Returns
        -------
        self : LogisticRegression

        Raises
        ------
        PrivacyBudgetError
            With a mechanism, when ``n_rounds`` rounds have already run; the
            estimator is left unchanged.
        ValueError
            On invalid input or hyperparameters; the estimator is left
            unchanged.
        """
        first, params = self._round_params(noise_at_sites=False)
        with _restore_feature_attributes_on_error(self):
            batch, classes = self._validate_batch(
                X, y, sample_group, None, reset=first, classes=classes
            )
            if first:
                state = self._initial_state(params, classes, batch.X.shape[1])
            else:
                state = self._state()
        if first and self.mechanism is not None:
            warn_if_seeded(self.random_state, "LogisticRegression")
        Xa = self._features(batch.X, params)
        targets = self._targets(batch.y, classes)
        codes, n_new = self._learner_codes(state, batch.site_labels, batch.site_codes)
        state = self._run_round(state, Xa, targets, codes, n_new)
        self._commit(state)
        return self

    def _round_params(self, noise_at_sites):
        """``(first, params)`` of the next round, or raise before any change.

        ``noise_at_sites``: whether the caller leaves the noise to the
        learners (:mod:`skfedpriv.flower`); a private stream must continue
        where its noise streams are.
        """
        self._check_can_continue()  # a release cannot continue a stream
        first = not hasattr(self, "_training_state")
        if not first and self.mechanism is not None:
            if self.n_rounds_seen_ >= self._params["R"]:
                raise PrivacyBudgetError(
                    f"all n_rounds={self._params['R']} rounds the noise was "
                    "planned for have run; the (epsilon, delta) guarantee "
                    "covers no more releases. Start a new stream with fit or "
                    "a fresh estimator."
                )
            at_sites = bool(self._training_state.noise_at_sites)
            if at_sites != bool(noise_at_sites):
                where = "the learners (Flower)" if at_sites else "this estimator"
                raise ValueError(
                    f"the noise streams of this private stream are held by {where}; "
                    "continue it there (skfedpriv.flower.federated_partial_fit for "
                    "learners, partial_fit in process), or start a new stream."
                )
        params = self._check_params() if first else self._params
        if not first and self._check_params() != self._params:
            raise ValueError(
                "hyperparameters changed since the first call to partial_fit; "
                "the noise and the guarantee were planned for the old ones. "
                "Call fit or use a fresh estimator."
            )
        return first, params

    def _prediction_rows(self, X):
        # rows are clipped to ``feature_clip_norm`` (if set), as in training
        if self._params["Cx"] is not None:
            return clip_rows(X, self._params["Cx"])
        return X

    def predict_proba(self, X):
        """Class probabilities.

        Two classes: ``[1 - σ(s), σ(s)]`` with ``s`` the decision function.
        More classes: one-vs-rest, the sigmoids of the class models
        normalized to sum to one (as scikit-learn's one-vs-rest logistic
        regression).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        scores = self.decision_function(X)
        if scores.ndim == 1:
            pos = expit(scores)
            return np.column_stack([1.0 - pos, pos])
        prob = expit(scores)
        total = prob.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            prob = np.where(total > 0, prob / total, 1.0 / prob.shape[1])
        return prob

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.mechanism is not None and self.random_state is None
        return tags


__all__ = ["LogisticRegression"]
