"""Federated sites: rows -> sites from ``sample_group``, and a map over sites.

A *site* (hospital, phone, learner) is named by the ``sample_group`` label of
its rows. Estimators ask each site for a summary of its rows and only ever
combine summaries; :func:`map_sites` runs that per-site work through joblib,
so a Dask or Ray joblib backend (``joblib.parallel_config(backend="dask")``)
spreads sites over a cluster with no change to estimator code.

Under Dask's joblib backend an estimator can send each site's rows to the
cluster once per batch (:func:`dask_client`, :func:`scatter_sites`) and pass
the resulting futures to :func:`map_sites`, which then submits the per-site
tasks to the cluster itself: the rows stay on the workers for every round
of the batch instead of travelling with each round's tasks.
"""

import numbers
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs
from joblib.parallel import get_active_backend

# joblib's local backends: with one job they run in-process anyway, so a plain
# loop does the same work without joblib's per-call dispatch cost.
_LOCAL_BACKENDS = {"SequentialBackend", "LokyBackend", "ThreadingBackend", "MultiprocessingBackend"}


def _refuse_mixed_label_types(groups):
    """Raise if site labels mix strings with numbers (3 and '3')."""
    values = groups.ravel().tolist()
    is_text = np.fromiter((isinstance(v, (str, bytes)) for v in values), dtype=bool,
                          count=len(values))
    is_number = np.fromiter((isinstance(v, numbers.Number) for v in values), dtype=bool,
                            count=len(values))
    if is_text.any() and is_number.any():
        text = values[int(np.argmax(is_text))]
        other = values[int(np.argmax(is_number))]
        raise ValueError(
            "sample_group mixes string and number site labels (for example "
            f"{other!r} and {text!r}): numpy would silently merge 3 and '3' into "
            "one site, or keep them as two; give every site label the same type."
        )


def check_sample_group(sample_group, n_samples):
    """Validate ``sample_group`` and encode it.

    Parameters
    ----------
    sample_group : array-like of shape (n_samples,) or None
        Site label of each row; any hashable values. ``None`` puts every row
        in one site.
    n_samples : int
        Number of rows the labels must match.

    Returns
    -------
    labels : ndarray of shape (n_sites,)
        The distinct site labels (sorted when sortable, else in order of
        first appearance).
    codes : ndarray of int of shape (n_samples,)
        ``labels[codes[i]]`` is the site of row ``i``.
    """
    if sample_group is None:
        return np.array([0]), np.zeros(n_samples, dtype=np.intp)
    if hasattr(sample_group, "to_numpy"):
        sample_group = sample_group.to_numpy()
    if not isinstance(sample_group, np.ndarray) or sample_group.dtype == object:
        _refuse_mixed_label_types(np.asarray(sample_group, dtype=object))
    groups = np.asarray(sample_group)
    if groups.ndim == 2 and groups.shape[1] == 1:
        groups = groups.ravel()
    if groups.ndim != 1:
        raise ValueError(
            "sample_group must be one-dimensional (one site label per row), "
            f"got an array of shape {groups.shape}."
        )
    if groups.shape[0] != n_samples:
        raise ValueError(
            f"sample_group has {groups.shape[0]} labels but X has {n_samples} "
            "rows; give one site label per row."
        )
    if groups.dtype.kind == "f" and not np.all(np.isfinite(groups)):
        raise ValueError("sample_group contains NaN or infinite labels.")
    if groups.dtype.kind in "iu" and n_samples:
        encoded = _encode_small_range(groups)
        if encoded is not None:
            return encoded
    try:
        labels, codes = np.unique(groups, return_inverse=True)
    except TypeError:  # mixed, unorderable labels: keep first-appearance order
        index = {}
        codes = np.fromiter(
            (index.setdefault(g, len(index)) for g in groups.tolist()),
            dtype=np.intp,
            count=n_samples,
        )
        labels = np.empty(len(index), dtype=object)
        labels[:] = list(index)
    return labels, codes.astype(np.intp, copy=False).ravel()


def _encode_small_range(groups):
    """``np.unique(groups, return_inverse=True)`` for integer labels spanning
    a range of at most a few times their count, by counting (O(n), no sort);
    None for a wider range."""
    low, high = int(groups.min()), int(groups.max())
    if high - low > 4 * len(groups) + 1024:
        return None
    wide = np.uint64 if groups.dtype.kind == "u" else np.int64
    # in [0, high - low]: no overflow, and small (numpy < 2 bincounts no uint64)
    offsets = (groups.astype(wide) - wide(low)).astype(np.intp)
    present = np.flatnonzero(np.bincount(offsets, minlength=high - low + 1))
    lookup = np.empty(high - low + 1, dtype=np.intp)
    lookup[present] = np.arange(len(present))
    return (present.astype(wide) + wide(low)).astype(groups.dtype), lookup[offsets]


def site_row_indices(codes, n_sites):
    """Row indices of each site, rows kept in their original (stream) order."""
    order = np.argsort(codes, kind="stable")
    bounds = np.cumsum(np.bincount(codes, minlength=n_sites))[:-1]
    return np.split(order, bounds)


#: Worker tasks per parallel job when sites are grouped: a few more tasks than
#: workers keep the workers busy when groups take unequal time.
_TASKS_PER_JOB = 2


def site_groups(site_sizes, n_jobs=None):
    """The group of each site when sites are gathered into worker tasks.

    Every request is a sum over the sites' rows, so a group of sites answers
    with the sum of its sites' answers: grouping changes the cost of a round
    (one task per group instead of one per site), not the numbers (up to
    summation order). Groups are runs of whole sites in order, with about
    equal numbers of rows.

    Parameters
    ----------
    site_sizes : array-like of int
        The number of rows of each site.
    n_jobs : int or None
        The estimator's ``n_jobs``, resolved under the active joblib backend.

    Returns
    -------
    group_of_site : ndarray of int
        ``group_of_site[s]`` in ``range(n_groups)``, non-decreasing.
    n_groups : int
        At most ``_TASKS_PER_JOB * effective_n_jobs(n_jobs)``, and no more
        than there are sites.
    """
    ends = np.cumsum(site_sizes)
    n_sites = len(ends)
    n_groups = min(n_sites, _TASKS_PER_JOB * max(1, effective_n_jobs(n_jobs)))
    if n_groups >= n_sites:
        return np.arange(n_sites), n_sites
    # a site's group is the share of all rows that ends before its end
    group_of_site = np.minimum((ends - 1) * n_groups // max(int(ends[-1]), 1), n_groups - 1)
    kept, group_of_site = np.unique(group_of_site, return_inverse=True)  # no empty group
    return group_of_site, len(kept)


def group_site_rows(site_rows, n_jobs=None):
    """Row indices of the sites gathered by :func:`site_groups`."""
    group_of_site, n_groups = site_groups([len(rows) for rows in site_rows], n_jobs)
    if n_groups == len(site_rows):
        return list(site_rows)
    bounds = np.flatnonzero(np.diff(group_of_site)) + 1
    return [np.concatenate(site_rows[a:b])
            for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(site_rows)])]


def grouped_row_indices(codes, n_sites, n_jobs=None):
    """:func:`group_site_rows` of :func:`site_row_indices`, from the codes
    directly (one sort of the rows by group, not by site)."""
    group_of_site, n_groups = site_groups(np.bincount(codes, minlength=n_sites), n_jobs)
    return site_row_indices(group_of_site[codes], n_groups)


#: Under a local joblib backend, rows per job below which the sites' work is
#: not split into threaded tasks: one vectorized pass over all rows (with the
#: pooled path's score cache and fused line searches) was faster than two
#: threads of grouped sites at 1e5 rows on this project's shared 2-core
#: machines (benchmarks/README.md, "Many sites").
_MIN_ROWS_PER_JOB = 100_000


def splits_sites(n_sites, n_rows, n_jobs=None):
    """True when the sites' summaries should be computed as separate tasks.

    False for one site, for one job in this process (:func:`runs_in_process`)
    and, under joblib's local backends, for fewer than ``_MIN_ROWS_PER_JOB``
    rows per job; then the sum over sites is one vectorized pass over all the
    rows, the same numbers up to summation order. A cluster backend (Dask,
    Ray) always gets the sites apart.
    """
    if n_sites == 1 or runs_in_process(n_jobs):
        return False
    if _local_backend():
        return n_rows >= _MIN_ROWS_PER_JOB * max(1, effective_n_jobs(n_jobs))
    return True


def runs_in_process(n_jobs=None):
    """True when joblib would run per-site work one after another in this process.

    That is the case for ``n_jobs`` in (None, 1) under joblib's local backends
    (no ``parallel_config`` asking for more jobs or for a cluster backend).
    """
    _, configured_n_jobs = get_active_backend()
    effective = n_jobs if n_jobs is not None else configured_n_jobs
    return effective in (None, 1) and _local_backend()


def _local_backend():
    """True when joblib's active backend runs in this machine's processes."""
    backend, _ = get_active_backend()
    return type(backend).__name__ in _LOCAL_BACKENDS


_DASK_BACKEND = "DaskDistributedBackend"


def _active_dask_backend():
    """joblib's active backend when it is Dask's, else None (no dask import)."""
    backend, _ = get_active_backend()
    return backend if type(backend).__name__ == _DASK_BACKEND else None


def dask_client():
    """The Dask client that per-site work should be sent to, or None.

    A client when joblib's active backend is Dask's
    (``joblib.parallel_config(backend="dask")``) and this code runs outside
    a Dask task. Inside a task (an estimator fitted on a worker, e.g. by a
    search under the Dask backend) it returns None and per-site work keeps
    joblib's path: a task that scatters and blocks on further tasks could
    hold the very worker thread those need. ``distributed`` is imported only
    when its backend is active, so it stays an optional dependency.
    """
    backend = _active_dask_backend()
    if backend is None:
        return None
    import distributed

    try:
        distributed.get_worker()
    except ValueError:  # not inside a Dask task
        pass
    else:
        return None
    client = getattr(backend, "client", None) or distributed.get_client()
    if getattr(client, "asynchronous", False):  # pragma: no cover - async clients
        return None
    return client


def scatter_sites(client, parts):
    """Send each site's data to the cluster once; one future per site.

    Parameters
    ----------
    client : distributed.Client
    parts : list of tuple
        One tuple of arrays per site, kept together on one worker.

    Returns
    -------
    futures : list of distributed.Future
        ``futures[s]`` holds ``tuple(parts[s])``. The sites are spread over
        the workers (no broadcast: each site's data lives on one worker and
        its tasks are scheduled there). The data is released from the
        cluster when the futures are garbage collected.
    """
    return client.scatter([tuple(part) for part in parts], broadcast=False, hash=False)


def _is_dask_future(obj):
    return type(obj).__name__ == "Future" and type(obj).__module__.partition(".")[0] == "distributed"


def _futures_client(site_args):
    """The client of the first Dask future among the arguments, or None."""
    for args in site_args:
        for arg in args:
            if _is_dask_future(arg):
                return arg.client
    return None


def map_sites(func, site_args, n_jobs=None):
    """Run ``func(*args)`` for each site's ``args`` through joblib.

    Under joblib's local backends the sites' work runs on a pool of
    ``effective_n_jobs(n_jobs)`` threads of this process (the per-site work
    is BLAS-bound and releases the GIL); a cluster backend set with
    ``joblib.parallel_config`` (Dask, Ray) gets the tasks through joblib.
    In process (one job), a plain loop does the same work.

    When the arguments hold Dask futures (site data sent once with
    :func:`scatter_sites`), each site's call is submitted to their cluster
    directly: the task refers to the data already on a worker, and only the
    small arguments (the current parameters) travel with it. ``func`` must be
    importable (a module-level function) so that it pickles. Submit options
    given to joblib's Dask backend (``parallel_config(backend="dask",
    workers=...)``) are passed on.
    """
    site_args = list(site_args)
    client = _futures_client(site_args)
    if client is not None:
        backend = _active_dask_backend()
        options = dict(getattr(backend, "submit_kwargs", None) or {})
        futures = [client.submit(func, *args, pure=False, **options) for args in site_args]
        return client.gather(futures)
    if len(site_args) == 1 or runs_in_process(n_jobs):
        return [func(*args) for args in site_args]
    if _local_backend():
        return list(_thread_pool(effective_n_jobs(n_jobs)).map(lambda args: func(*args), site_args))
    return Parallel(n_jobs=n_jobs, prefer="threads")(
        delayed(func)(*args) for args in site_args
    )


_POOLS = {}
_POOLS_LOCK = threading.Lock()


def _thread_pool(n_workers):
    """A thread pool of ``n_workers`` kept for the life of the process.

    Per-site work on a local backend runs on threads of this process (the
    sites' rows are here; a process backend would copy them every round).
    joblib's ``Parallel`` polls its workers every 10 ms, which a round of
    millisecond tasks pays many times over a fit, so a plain pool serves
    them; cluster backends (Dask, Ray) still go through joblib.
    """
    with _POOLS_LOCK:
        if _POOLS.get("pid") != os.getpid():  # a forked child has no pool threads
            _POOLS.clear()
            _POOLS["pid"] = os.getpid()
        pool = _POOLS.get(n_workers)
        if pool is None:
            pool = _POOLS[n_workers] = ThreadPoolExecutor(n_workers, thread_name_prefix="skfedpriv-site")
        return pool
