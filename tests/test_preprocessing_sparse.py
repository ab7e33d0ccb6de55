"""Sparse input to the data-independent transformers: the dense results, kept sparse."""

import numpy as np
import pytest
import scipy.sparse as sp

from skfedpriv.preprocessing import BoundedScaler, RowNormClipper


@pytest.fixture(scope="module")
def X():
    # wide rows of very different norms, an empty row and huge entries
    rng = np.random.default_rng(0)
    X = sp.random(40, 300, density=0.05, format="csr", random_state=1)
    X.data = rng.normal(size=X.nnz) * rng.choice([1e-3, 1.0, 1e3, 1e200], size=X.nnz)
    X = X.tolil()
    X[3, :] = 0
    return X.tocsr()


@pytest.mark.parametrize("norm", ["l2", "l1", "max"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_row_norm_clipper_on_sparse_rows_is_the_dense_map(X, norm, fmt):
    clipper = RowNormClipper(max_norm=2.0, norm=norm)
    before = X.copy()
    out = clipper.fit_transform(X.asformat(fmt))
    assert sp.issparse(out) and out.format == "csr"
    np.testing.assert_allclose(out.toarray(), clipper.fit_transform(X.toarray()), rtol=1e-12)
    assert (X != before).nnz == 0  # the input is not modified
    # and the bound holds, by the dense norm of the result
    norms = {"l2": np.linalg.norm(out.toarray(), axis=1),
             "l1": np.abs(out.toarray()).sum(axis=1),
             "max": np.abs(out.toarray()).max(axis=1)}[norm]
    assert norms.max() <= 2.0 * (1 + 1e-12)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("clip", [True, False])
def test_bounded_scaler_with_symmetric_bounds_keeps_zeros(X, fmt, clip):
    upper = np.linspace(0.5, 5.0, X.shape[1])
    scaler = BoundedScaler(lower=-upper, upper=upper, clip=clip)
    out = scaler.fit_transform(X.asformat(fmt))
    assert sp.issparse(out) and out.format == fmt and out.nnz <= X.nnz
    # the dense formula 2 (x - lower) / width - 1 loses ~1e-16 absolute to cancellation
    np.testing.assert_allclose(out.toarray(), scaler.fit_transform(X.toarray()),
                               rtol=1e-12, atol=1e-15)


def test_bounded_scaler_refuses_sparse_input_it_would_densify(X):
    scaler = BoundedScaler(lower=0.0, upper=16.0)
    with pytest.raises(ValueError, match="symmetric about 0"):
        scaler.fit(X)
    assert not hasattr(scaler, "n_features_in_")  # nothing recorded
    scaler.fit(X.toarray())
    with pytest.raises(ValueError, match="symmetric about 0"):
        scaler.transform(X)
