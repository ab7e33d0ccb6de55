"""Check (issue #24): is the delta-method covariance's overshoot the
estimated ``A``'s own noise? Each data set's ``A V_B Aᵀ`` (the "+dB+C"
variant of prototype_second_order.py) against ``Ā V_B Āᵀ`` with ``Ā`` the
mean ``A`` over the data sets (an oracle, not available to a user), on
n = 2 000, p = 20, q = 1, 100-row batches.

    PYTHONPATH=. python benchmarks/prototype_second_order_mean_a.py RATIO REPS
"""
import sys
import warnings

import numpy as np
from scipy.stats import norm

import prototype_second_order as P
import _checkout  # noqa: E402,F401  (this checkout's skfedpriv first)
from skfedpriv import DWDClassifier
from skfedpriv.datasets import gaussian_gendwd_target, make_federated_gaussians


def one(seed, ratio, n, p, q):
    X, y, g, _ = make_federated_gaussians(
        n_sites=P.SITES, n_batches=P.BATCHES, n_per_batch=n // (P.SITES * P.BATCHES),
        n_features=p, mu=P.MU, sigma=P.SIGMA, ratio=ratio, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pk = DWDClassifier(q=q, inference=True, shift_correction="second-order")
        dB = 0.0
        for s0, s1 in P.batch_bounds("100", n):
            pk.partial_fit(X[s0:s1], y[s0:s1], sample_group=g[s0:s1], classes=[-1, 1])
            Xj = np.column_stack([np.ones(s1 - s0), X[s0:s1]])
            dB = dB + P.score_outer_derivative(Xj, y[s0:s1], q, pk._training_state.theta[:, 0])
    ts = pk._training_state
    V = ts.coef_cov[0]
    A = P.delta_matrix(V, ts.curvature[0], ts.shift_correction.third[0],
                       ts.shift_correction.ratio_sum, dB, True)
    return np.r_[pk.intercept_, pk.coef_[0]], V, A


def main():
    ratio, reps, n, p, q = float(sys.argv[1]), int(sys.argv[2]), 2000, 20, 1.0
    b0, b = gaussian_gendwd_target(p, P.MU, P.SIGMA, ratio, q=q)
    target = np.r_[b0, b]
    ests, Vs, As = map(np.array, zip(*[one(s, ratio, n, p, q) for s in range(reps)]))
    mean_a = As.mean(0)
    z, sd = norm.ppf(0.975), ests.std(0, ddof=1)
    for name, covs in [("own A", np.einsum("kab,kbc,kdc->kad", As, Vs, As)),
                       ("mean A", np.einsum("ab,kbc,dc->kad", mean_a, Vs, mean_a))]:
        se = np.sqrt(np.einsum("kaa->ka", covs))
        cov = (np.abs(ests - target) <= z * se).mean(0)
        ratio_sd = se.mean(0) / sd
        print(f"ratio={ratio:g} {name}: cov pooled {100 * cov.mean():.1f} min {100 * cov.min():.1f}"
              f" max {100 * cov.max():.1f} SE/SD {ratio_sd.min():.2f}-{ratio_sd.max():.2f}")


if __name__ == "__main__":
    main()
