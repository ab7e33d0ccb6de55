"""Prototype (issue #24): second-order renewable aggregations against the
first-order stream, on the batch-size study's data (n = 2 000, p = 20,
q = 1 by default), outside the package (plain numpy).

Variants (``--c ORDER:C``):

* ``2:C``, the realized quadratic renewable equation: each batch's score
  expanded to second order around its own estimate,
  ``g_j(θ_j) + H_j (θ - θ_j) + ½ T_j[θ - θ_j, θ - θ_j]``, aggregated into
  ``Q(θ) = r + C (θ - θ_c) + ½ S[θ - θ_c, θ - θ_c]`` around the current
  estimate (``S = Σ_j T_j``: p1³ numbers), the batch's estimate solving
  ``Q(θ) + g_b(θ) = 0`` by damped Newton; ``T_j`` the third derivative
  smoothed by a uniform kernel of half-width ``h = C N_j^(-1/5)``.
* ``3:C``, the first-order chain and, at the end, the expected remainder
  ``½ S : (Σ_j W_j V_j / N - V_B)`` subtracted in one step (``V_j`` each
  batch's propagated covariance, ``h_j = C`` times the root mean square of
  the margin's standard deviation under ``V_j``).

* ``4:C``, variant 3 with ``V_j`` replaced by ``(N / N_j) V_B`` (the
  estimator option's correction ``½ r S : V_B``) and a delta-method
  covariance from central differences of the all-rows sandwich.

The estimator option ``shift_correction='second-order'`` is built on
variant 3 with ``V_j`` replaced by ``(N / N_j) V_B`` (benchmarks/README.md,
"A second-order correction with a delta-method covariance"); it now
publishes a delta-method covariance (with ``∂S``). Rows "pkg 2nd": that
option's estimate with the chain's covariance ``V_B`` (run with this
worktree on ``PYTHONPATH``); "+delta": with :func:`delta_corrected`'s covariance;
"+dB": with the analytic delta-method covariance of
:func:`analytic_delta_cov` (``∂C/∂θ`` the stream's ``S``, ``∂B/∂θ`` one
more ``p1³`` sum, here on all rows at the chain's final estimate: an
oracle); "+dB batch": the same with ``∂B/∂θ`` summed over the batches,
each at the estimate the stream had after it (the summary a built
version would accumulate); "+dB+C": that, with the step's own
dependence ``-C⁻¹ S_a C⁻¹ b`` in ``A``. "failed": streams whose
second-order equation was not solved (no root near the estimate).

    python benchmarks/prototype_second_order.py [--reps R] [--c 2:2 3:1 ...]
"""
import argparse
import os
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from scipy.stats import norm  # noqa: E402

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv import DWDClassifier  # noqa: E402
from skfedpriv._losses import gendwd_curvature, gendwd_derivative  # noqa: E402
from skfedpriv.datasets import gaussian_gendwd_target, make_federated_gaussians  # noqa: E402

MU, SIGMA, SITES, BATCHES, ALPHA = 0.2, 1.0, 5, 20, 1e-3


def pieces(Xb, y, theta, q, h, third=True):
    u = y * (Xb @ theta)
    d1, d2 = gendwd_derivative(u, q), gendwd_curvature(u, q)
    g = Xb.T @ (y * d1)
    H = (Xb * d2[:, None]).T @ Xb
    T = None
    if third:
        d3 = (gendwd_curvature(u + h, q) - gendwd_curvature(u - h, q)) / (2 * h)
        T = np.einsum("i,ia,ib,ic->abc", y * d3, Xb, Xb, Xb, optimize=True)
    scores = Xb * (y * d1)[:, None]
    return g, H, T, scores


def solve(Xb, y, q, center, r, C, S, ridge, theta0, tol=1e-10, max_iter=50):
    """Newton on Q(θ) + g_b(θ) + ridge θ = 0 (S None: first order)."""
    theta = theta0.copy()
    for _ in range(max_iter):
        g, H, _, _ = pieces(Xb, y, theta, q, 1.0, third=False)
        d = theta - center
        F = r + C @ d + g + ridge * theta
        J = C + H + np.diag(ridge)
        if S is not None:
            F = F + 0.5 * np.einsum("abc,b,c->a", S, d, d)
            J = J + np.einsum("abc,c->ab", S, d)
        step = np.linalg.solve(J, F)
        t = 1.0
        while True:  # halve on growth of |F| (the kink)
            new = theta - t * step
            gn, _, _, _ = pieces(Xb, y, new, q, 1.0, third=False)
            dn = new - center
            Fn = r + C @ dn + gn + ridge * new
            if S is not None:
                Fn = Fn + 0.5 * np.einsum("abc,b,c->a", S, dn, dn)
            if np.linalg.norm(Fn) <= np.linalg.norm(F) or t < 1e-4:
                break
            t /= 2
        theta = new
        if np.linalg.norm(Fn) < tol * (1 + len(y)):
            break
    stream.ok &= bool(np.linalg.norm(Fn) < 1e-6 * (1 + len(y)))
    return theta


def stream(X, y, bounds, q, order, c, rate):
    """Estimate and propagated covariance of a stream (order 1 or 2)."""
    stream.ok = True
    p1 = X.shape[1] + 1
    Xb_all = np.column_stack([np.ones(len(X)), X])
    mask = np.r_[0.0, np.ones(p1 - 1)]
    theta, C, S, r, cov, seen = np.zeros(p1), None, None, np.zeros(p1), None, 0.0
    rsum = 0.0  # Σ_{j≥2} W_j / N_j
    tv = None  # order 3: Σ_j W_j V_j over the batches seen
    for start, stop in bounds:
        Xb, yb = Xb_all[start:stop], y[start:stop]
        seen += stop - start
        ridge = ALPHA * (stop - start) * mask
        h = c * (seen if rate == "seen" else stop - start) ** -0.2
        if C is None:
            first = DWDClassifier(q=q, alpha=ALPHA).fit(X[start:stop], y[start:stop])
            new = np.r_[first.intercept_, first.coef_[0]]
            carried = None
        else:
            new = solve(Xb, yb, q, theta, r, C, S if order == 2 else None, ridge, theta)
            d = new - theta
            carried = C + (np.einsum("abc,c->ab", S, d) if order == 2 else 0.0)
            g_old = C @ d + (0.5 * np.einsum("abc,b,c->a", S, d, d) if order == 2 else 0.0)
            r = r + g_old
        g, H, T, sc = pieces(Xb, yb, new, q, h, third=order == 2)
        H = H + np.diag(ridge)
        gr = g + ridge * new
        r = (r + gr) if C is not None else gr
        B = (sc + (ALPHA * mask * new)[None]).T @ (sc + (ALPHA * mask * new)[None])
        L = H if carried is None else carried + H
        mid = B if cov is None else B + carried @ cov @ carried.T
        Li = np.linalg.inv(L)
        cov = Li @ mid @ Li.T
        C = L
        rsum += (stop - start) / seen if carried is not None else 0.0
        if order in (3, 4):  # first-order chain, expected-remainder correction at the end
            s = np.sqrt(np.mean(np.einsum("ia,ab,ib->i", Xb, cov, Xb)))
            _, _, T, _ = pieces(Xb, yb, new, q, c * s)
            tv = (stop - start) * cov + (0 if S is None else tv)
            S = T if S is None else S + T
        else:
            S = (T if S is None else S + T) if order == 2 else None
        theta = new
    if order == 3:
        bias = 0.5 * np.einsum("abc,bc->a", S, tv / seen - cov)
        theta = theta - np.linalg.solve(C, bias)
    if order == 4:
        theta, cov = delta_corrected(Xb_all, y, q, theta, cov, C, S, rsum, c, mask)
    return theta, cov, stream.ok


def offline_sandwich(Xb, y, q, theta, mask):
    """C(θ)⁻¹ B(θ) C(θ)⁻¹ and the smoothed third derivative on all rows at θ."""
    g, H, _, sc = pieces(Xb, y, theta, q, 1.0, third=False)
    ridge = ALPHA * len(y) * mask
    H = H + np.diag(ridge)
    sc = sc + (ALPHA * mask * theta)[None]
    Hi = np.linalg.inv(H)
    return Hi @ (sc.T @ sc) @ Hi.T


def delta_corrected(Xb, y, q, theta, cov, C, S, r, c, mask, step=1e-4):
    """Variant 4: the shipped correction ``θ_B - C_B⁻¹ ½ r S : V_B`` and
    the delta-method covariance ``A V_B Aᵀ``, ``A = I - C_B⁻¹ ∂b/∂θ``,
    ``b(θ) = ½ r S(θ) : V(θ)`` re-evaluated on all rows at ``θ`` (an
    oracle of what the summaries would have to carry: ``S`` fixed, ``V``
    the offline sandwich; central differences)."""
    p1 = len(theta)
    bias = 0.5 * r * np.einsum("abc,bc->a", S, cov)

    def b(t):
        return 0.5 * r * np.einsum("abc,bc->a", S, offline_sandwich(Xb, y, q, t, mask))

    J = np.column_stack([(b(theta + step * e) - b(theta - step * e)) / (2 * step)
                         for e in np.eye(p1)])
    A = np.eye(p1) - np.linalg.solve(C, J)
    return theta - np.linalg.solve(C, bias), A @ cov @ A.T


def batch_bounds(schedule, n):
    first, _, rest = schedule.partition("+")
    first, rest = int(first), int(rest or first)
    starts = [0] + list(range(first, n, rest))
    return list(zip(starts, starts[1:] + [n]))


def replication(seed, n, p, q, ratio, schedule, cs, rate):
    X, y, g, _ = make_federated_gaussians(
        n_sites=SITES, n_batches=BATCHES, n_per_batch=n // (SITES * BATCHES), n_features=p,
        mu=MU, sigma=SIGMA, ratio=ratio, random_state=seed)
    bounds = batch_bounds(schedule, n)
    off = DWDClassifier(q=q, inference=True).fit(X, y, sample_group=g)
    out = [(np.r_[off.intercept_, off.coef_[0]], np.r_[off.intercept_se_, off.coef_se_[0]], True)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pk = DWDClassifier(q=q, inference=True)
        for start, stop in bounds:
            pk.partial_fit(X[start:stop], y[start:stop], sample_group=g[start:stop],
                           classes=[-1, 1])
    out.append((np.r_[pk.intercept_, pk.coef_[0]], np.r_[pk.intercept_se_, pk.coef_se_[0]], True))
    out.extend(package_second_order(X, y, g, bounds, q))
    out.append(stream(X, y, bounds, q, 1, 1.0, rate))
    for spec in cs:
        order, c = spec.split(":")
        out.append(stream(X, y, bounds, q, int(order), float(c), rate))
    return out


def package_second_order(X, y, g, bounds, q):
    """The package's ``shift_correction='second-order'`` stream: its
    published estimate with the chain's covariance ``V_B`` and with the oracle
    delta-method covariance ``A V_B Aᵀ`` (``∂b/∂θ`` on all rows at the
    chain's estimate, :func:`delta_corrected`'s ``A``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pk = DWDClassifier(q=q, inference=True, shift_correction="second-order")
        dB_stream = 0.0
        for start, stop in bounds:
            pk.partial_fit(X[start:stop], y[start:stop], sample_group=g[start:stop],
                           classes=[-1, 1])
            Xj = np.column_stack([np.ones(stop - start), X[start:stop]])
            dB_stream = dB_stream + score_outer_derivative(
                Xj, y[start:stop], q, pk._training_state.theta[:, 0])
    ts = pk._training_state
    S, r = ts.shift_correction.third[0], ts.shift_correction.ratio_sum
    C, V, chain = ts.curvature[0], ts.coef_cov[0], ts.theta[:, 0]
    Xb = np.column_stack([np.ones(len(X)), X])
    mask = np.r_[0.0, np.ones(Xb.shape[1] - 1)]
    published = np.r_[pk.intercept_, pk.coef_[0]]
    _, delta_cov = delta_corrected(Xb, y, q, chain, V, C, S, r, 1.0, mask)
    return [(published, V, True), (published, delta_cov, True),
            (published, analytic_delta_cov(Xb, y, q, chain, V, C, S, r), True),
            (published, analytic_delta_cov(Xb, y, q, chain, V, C, S, r, dB_stream), True),
            (published, analytic_delta_cov(Xb, y, q, chain, V, C, S, r, dB_stream, True), True)]


def score_outer_derivative(Xb, y, q, theta):
    """``Σ_i 2 ℓ' ℓ'' y_i x̄_i ⊗ x̄_i ⊗ x̄_i`` at ``theta`` (``∂B/∂θ``)."""
    u = y * (Xb @ theta)
    w = 2 * gendwd_derivative(u, q) * gendwd_curvature(u, q) * y
    return np.einsum("i,ia,ib,ic->abc", w, Xb, Xb, Xb, optimize=True)


def analytic_delta_cov(Xb, y, q, theta, V, C, S, r, dB=None, step_term=False):
    """``A V Aᵀ``, ``A = I - C⁻¹ ½ r S : ∂V/∂θ`` with ``V = C⁻¹ B C⁻¹``:
    ``∂_a C = S[..., a]`` (the stream's smoothed third derivative) and
    ``∂_a B = Σ_i 2 ℓ' ℓ'' y_i x_i x_iᵀ x_ia`` (one more ``p1³`` summary,
    on all rows at the chain's final estimate unless given: the stream's
    sum of each batch's at its own estimate)."""
    dB = score_outer_derivative(Xb, y, q, theta) if dB is None else dB
    A = delta_matrix(V, C, S, r, dB, step_term)
    return A @ V @ A.T


def delta_matrix(V, C, S, r, dB, step_term):
    """``A`` of :func:`analytic_delta_cov`."""
    Ci = np.linalg.inv(C)
    dV = (-np.einsum("xb,bca,cy->xya", Ci, S, V) - np.einsum("xb,bca,cy->xya", V, S, Ci)
          + np.einsum("xb,bca,cy->xya", Ci, dB, Ci))
    J = 0.5 * r * np.einsum("abc,bcd->ad", S, dV)
    A = np.eye(len(V)) - Ci @ J
    if step_term:  # ∂(C⁻¹ b)/∂θ_a also holds -C⁻¹ S_a C⁻¹ b
        b = 0.5 * r * np.einsum("abc,bc->a", S, V)
        A = A + np.einsum("xb,bca,c->xa", Ci, S, Ci @ b)
    return A


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--p", type=int, default=20)
    ap.add_argument("--q", type=float, default=1.0)
    ap.add_argument("--ratios", type=float, nargs="+", default=[4.0, 1.0])
    ap.add_argument("--schedules", nargs="+", default=["100", "1000+100"])
    ap.add_argument("--c", nargs="+", default=["2:1", "3:1"],
                    help="ORDER:C (2: realized quadratic, h = C N^-1/5; 3: expected remainder; "
                         "4: the shipped correction with a delta-method covariance)")
    ap.add_argument("--rate", choices=("seen", "batch"), default="seen")
    a = ap.parse_args()
    z = norm.ppf(0.975)
    for ratio in a.ratios:
        b0, b = gaussian_gendwd_target(a.p, MU, SIGMA, ratio, q=a.q)
        target = np.r_[b0, b]
        for schedule in a.schedules:
            res = [replication(s, a.n, a.p, a.q, ratio, schedule, a.c, a.rate)
                   for s in range(a.seed0, a.seed0 + a.reps)]
            names = ["offline", "package 1st", "pkg 2nd", "pkg 2nd+delta", "pkg 2nd+dB", "pkg 2nd+dB batch", "pkg 2nd+dB+C", "proto 1st"] + [f"v{c}" for c in a.c]
            est0 = np.array([r[0][0] for r in res])
            for k, name in enumerate(names):
                ok = np.array([r[k][2] for r in res])
                est = np.array([r[k][0] for r in res])
                se = np.array([r[k][1] if r[k][1].ndim == 1 else np.sqrt(np.diag(r[k][1]))
                               for r in res])
                est, se, e0 = est[ok], se[ok], est0[ok]
                sd = est.std(axis=0, ddof=1)
                shift = np.abs((est - e0).mean(axis=0)) / sd
                cov = (np.abs(est - target) <= z * se).mean(axis=0)
                print(f"ratio={ratio:g} sched={schedule:9s} {name:12s} shift/SD max {shift.max():.2f}"
                      f" cov pooled {100*cov.mean():.1f} min {100*cov.min():.1f} max {100*cov.max():.1f}"
                      f" SE/SD {np.min(se.mean(0)/sd):.2f}-{np.max(se.mean(0)/sd):.2f} failed {np.mean(~ok):.3f}", flush=True)


if __name__ == "__main__":
    main()
