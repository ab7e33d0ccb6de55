"""Prototype (issue #24): is the overshoot of the second-order option's
delta-method covariance its missing direct terms?

``DWDClassifier(shift_correction='second-order')`` publishes
``γ = θ_B - C⁻¹ b``, ``b = ½ r S : V``, with the covariance ``A V Aᵀ``
(:func:`skfedpriv.linear_model._second_order.delta_covariance`): ``b``'s
dependence on the data through the estimate ``θ`` only. ``C`` and ``B``
also vary with the rows at a fixed ``θ``, and that variation co-varies with
the estimate's error ``e ≈ C⁻¹ Σ ψ_i`` (``ψ_i`` minus the row's gradient):
``Σ_i E[H_i ⊗ ψ_i] = -½ ∂B`` (the option's second summary) and
``Σ_i E[g_i g_iᵀ ⊗ ψ_i] = -K``, ``K = Σ_i w_i³ ℓ'³ y_i x̄_i^{⊗3}`` (one
more ``p1³`` sum, here summed per batch at the batch's estimate, as a
built version would). With ``L(X, Y)`` the change of ``γ`` for changes
``X`` of ``C`` and ``Y`` of ``B`` (``A = I + [L(S_a, ∂_a B)]_a``), the
cross term is ``Cov(d, e) = D C⁻¹``, ``D[:, c] = L(-½ ∂B_c, -K_c)``, and
the covariance ``A V Aᵀ + A (D C⁻¹)ᵀ + D C⁻¹ Aᵀ`` (the direct part's own
variance, which needs fourth moments, and ``S``'s direct variation left
out).

Rows: "built A V Aᵀ" without ``S``'s own derivative (the option's first
build, commit 7fda2a2); "+ direct cross C, B" and "+ ... S" (``S``'s direct
term ``C⁻¹ ½ r M C⁻¹`` with ``M = Σ_i w² ℓ‴_h ℓ′ (x̄ᵀ V x̄) x̄ x̄ᵀ``, an
oracle with the final ``V``); "built with dS/dθ (final V)": ``A`` with
``-C⁻¹ ½ r (∂S/∂θ_a) : V`` (``∂S`` on every batch's rows at its estimate,
the final ``V``: what the option publishes now, checked against its
``coef_cov_``); "(streamed)": each batch's term contracted with its own
``V_j N_j / N_B`` (a ``p1²`` state). Results:
``results/inference_second_order_direct.md``.

    python benchmarks/prototype_second_order_direct.py RATIO REPS [N] [P] [SCHEDULE]

``SCHEDULE``: ``"b"`` equal batches of b rows (default 100), ``"f+b"`` a
first batch of f rows then batches of b.
"""
import sys
import warnings

import numpy as np
from scipy.stats import norm

import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv import DWDClassifier
from skfedpriv._losses import gendwd_curvature, gendwd_derivative
from skfedpriv.datasets import gaussian_gendwd_target, make_federated_gaussians

MU, SIGMA, SITES, Q = 0.2, 1.0, 5, 1.0


def score_cube(Xb, y, theta):
    """``K = Σ_i ℓ'³ y_i x̄_i^{⊗3}`` (unit weights)."""
    d1 = gendwd_derivative(y * (Xb @ theta), Q)
    return np.einsum("i,ia,ib,ic->abc", d1 ** 3 * y, Xb, Xb, Xb, optimize=True)


def change(X, Y, C, V, S, r, b):
    """``L(X, Y)``: the first-order change of ``θ - C⁻¹ ½ r S : C⁻¹ B C⁻¹``
    for changes ``X`` of ``C`` and ``Y`` of ``B`` at a fixed ``θ``."""
    Ci = np.linalg.inv(C)
    dV = -Ci @ X @ V - V @ X @ Ci + Ci @ Y @ Ci
    return -Ci @ (0.5 * r * np.einsum("abc,bc->a", S, dV)) + Ci @ X @ Ci @ b


def covariances(C, V, S, r, dB, K, M=None):
    """The built ``A V Aᵀ``, that plus the direct cross terms of ``C`` and
    ``B``, and (``M`` given) plus ``S``'s too: ``C⁻¹ ½ r M C⁻¹`` with
    ``M = Σ_i w² ℓ‴_h ℓ′ (x̄ᵀ V x̄) x̄ x̄ᵀ``."""
    b = 0.5 * r * np.einsum("abc,bc->a", S, V)
    p1 = len(V)
    A = np.eye(p1) + np.column_stack([change(S[..., a], dB[..., a], C, V, S, r, b)
                                      for a in range(p1)])
    D = np.column_stack([change(-0.5 * dB[..., c], -K[..., c], C, V, S, r, b)
                         for c in range(p1)])
    Ci = np.linalg.inv(C)
    cross = A @ (D @ Ci).T
    out = [A @ V @ A.T, A @ V @ A.T + cross + cross.T]
    if M is not None:
        cross = A @ (D @ Ci + 0.5 * r * Ci @ M @ Ci).T
        out.append(A @ V @ A.T + cross + cross.T)
    return out


def fourth_contraction(batches, V, streamed=False):
    """``F[:, a] = ∂S/∂θ_a : V``: ``Σ_i ℓ⁗_h (x̄ᵀ V x̄) x̄ x̄ᵀ`` over the
    batches' rows at their estimates (``ℓ⁗_h`` the second difference of
    ``ℓ''`` over ``h``; an oracle with the final ``V``)."""
    F, seen = 0.0, 0
    for Xb, y, theta, h, V_j in batches:
        seen += len(Xb)
        if streamed:  # V ≈ (N_j / N_B) V_j: the sum Σ_j N_j F_j / N_B a stream can keep
            V = V_j * seen / sum(len(b[0]) for b in batches)
        u = y * (Xb @ theta)
        d4 = (gendwd_curvature(u + h, Q) - 2 * gendwd_curvature(u, Q)
              + gendwd_curvature(u - h, Q)) / h ** 2
        coef = d4 * np.einsum("ia,ab,ib->i", Xb, V, Xb)
        F = F + (Xb * coef[:, None]).T @ Xb
    return F


def third_cross(batches, V):
    """``M`` of :func:`covariances` over the batches' rows, each at its
    estimate and smoothing width, with the final ``V`` (an oracle)."""
    M = 0.0
    for Xb, y, theta, h, _ in batches:
        u = y * (Xb @ theta)
        d3 = (gendwd_curvature(u + h, Q) - gendwd_curvature(u - h, Q)) / (2 * h)
        coef = d3 * gendwd_derivative(u, Q) * np.einsum("ia,ab,ib->i", Xb, V, Xb)
        M = M + (Xb * coef[:, None]).T @ Xb
    return M


def batch_bounds(schedule, n):
    first, _, rest = schedule.partition("+")
    first, rest = int(first), int(rest or first)
    starts = [0] + list(range(first, n, rest))
    return list(zip(starts, starts[1:] + [n]))


def replication(seed, n, p, ratio, rows):
    X, y, g, _ = make_federated_gaussians(n_sites=SITES, n_batches=20, n_per_batch=n // 100,
                                          n_features=p, mu=MU, sigma=SIGMA, ratio=ratio,
                                          random_state=seed)
    clf = DWDClassifier(q=Q, inference=True, shift_correction="second-order")
    K, batches = 0.0, []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for start, stop in batch_bounds(rows, n):
            part = slice(start, stop)
            clf.partial_fit(X[part], y[part], sample_group=g[part], classes=[-1, 1])
            Xb = np.column_stack([np.ones(len(X[part])), X[part]])
            ts = clf._training_state
            K = K + score_cube(Xb, y[part], ts.theta[:, 0])
            h = np.sqrt(np.sum(ts.coef_cov[0] * (Xb.T @ Xb)) / len(Xb))
            batches.append((Xb, y[part], ts.theta[:, 0], h, ts.coef_cov[0]))
    sc = ts.shift_correction
    M = third_cross(batches, ts.coef_cov[0])
    built, direct, direct_s = covariances(ts.curvature[0], ts.coef_cov[0], sc.third[0],
                                          sc.ratio_sum, sc.outer_derivative[0], K, M)
    V, C, S, r = ts.coef_cov[0], ts.curvature[0], sc.third[0], sc.ratio_sum
    bias = 0.5 * r * np.einsum("abc,bc->a", S, V)
    A = np.eye(len(V)) + np.column_stack([
        change(S[..., a], sc.outer_derivative[0][..., a], C, V, S, r, bias)
        for a in range(len(V))])
    A_oracle = A - np.linalg.solve(C, 0.5 * r * fourth_contraction(batches, V))
    A = A - np.linalg.solve(C, 0.5 * r * fourth_contraction(batches, V, streamed=True))
    with_ds = A_oracle @ V @ A_oracle.T  # what the package publishes (its ∂S summed per batch)
    assert np.allclose(with_ds, clf.coef_cov_[0], rtol=1e-6, atol=1e-12), np.abs(
        with_ds - clf.coef_cov_[0]).max() / np.abs(with_ds).max()
    return (np.r_[clf.intercept_, clf.coef_[0]], built, direct, V, direct_s,
            A_oracle @ V @ A_oracle.T, A @ V @ A.T)


def main():
    ratio, reps = float(sys.argv[1]), int(sys.argv[2])
    n, p, rows = (sys.argv[3:6] + ["2000", "20", "100"][len(sys.argv) - 3:])
    n, p = int(n), int(p)
    b0, b = gaussian_gendwd_target(p, MU, SIGMA, ratio, q=Q)
    target = np.r_[b0, b]
    res = [replication(s, n, p, ratio, rows) for s in range(reps)]
    est = np.array([r[0] for r in res])
    sd = est.std(axis=0, ddof=1)
    z = norm.ppf(0.975)
    for k, name in [(3, "chain V_B"), (1, "built A V Aᵀ"), (2, "+ direct cross C, B"),
                    (4, "+ direct cross C, B, S"), (5, "built with dS/dθ (final V)"),
                    (6, "built with dS/dθ (streamed)")]:
        var = np.array([np.diag(r[k]) for r in res])
        bad = (var <= 0).any(axis=1)
        se = np.sqrt(np.clip(var, 0, None))
        cov = (np.abs(est - target) <= z * se)[~bad].mean(axis=0)
        ratio_sd = se[~bad].mean(axis=0) / sd
        print(f"ratio={ratio:g} n={n} p={p} rows={rows} {name:22s} pooled {100 * cov.mean():.1f} %"
              f" min {100 * cov.min():.1f} SE/SD {ratio_sd.min():.2f}-{ratio_sd.max():.2f}"
              f" negative variance {bad.mean():.3f}", flush=True)


if __name__ == "__main__":
    main()
