"""A privacy budget that composes its ledger exactly and nothing can bypass.

:class:`PrivacyBudget` admits a spend if and only if the *composed* total of
its ledger after the spend (:meth:`PrivacyLedger.total`) is within the
budget. It lives either in memory (shared by clones and threads of one
process) or in an SQLite file (shared by every process and every run that
opens the file). An in-memory budget that reaches another process, or is
restored from a pickle after the original is gone, refuses every operation
instead of becoming a silent independent copy.
"""

import contextlib
import os
import sqlite3
import threading
import time
import urllib.parse
import uuid
import weakref

from ._calibration import check_privacy_params
from ._ledger import LedgerEntry, PrivacyBudgetError, PrivacyLedger

__all__ = ["PrivacyBudget", "write_transaction"]

# Relative tolerance when comparing composed spends with a budget, so that
# e.g. ten spends of 0.1 fit into a budget of 1.0.
_BUDGET_RTOL = 1e-9

# Seconds a charge waits for another process's transaction on the same file.
_BUSY_TIMEOUT = 60.0

# In-memory budgets alive in this process, by token: a pickle restored in the
# same process returns the original object.
_LIVE = weakref.WeakValueDictionary()

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS skfedpriv_budget ("
    " id INTEGER PRIMARY KEY CHECK (id = 1),"
    " epsilon REAL NOT NULL, delta REAL NOT NULL, created REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS skfedpriv_ledger ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " note TEXT NOT NULL, mechanism TEXT NOT NULL,"
    " epsilon REAL NOT NULL, delta REAL NOT NULL,"
    " rho REAL, sigma REAL, sensitivity REAL,"
    " pid INTEGER NOT NULL, time REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS skfedpriv_streams ("
    " stream TEXT PRIMARY KEY, next_position INTEGER NOT NULL, time REAL NOT NULL)",
)
_FIELDS = ("note", "mechanism", "epsilon", "delta", "rho", "sigma", "sensitivity")


@contextlib.contextmanager
def write_transaction(conn):
    """One SQLite write transaction on ``conn`` (opened with
    ``isolation_level=None``): ``BEGIN IMMEDIATE`` takes the write lock
    before anything is read, so concurrent processes check and charge one at
    a time; ``COMMIT`` at the end, ``ROLLBACK`` if the body raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _connect(path, *, create):
    """An SQLite connection to ``path``; ``create=False`` opens an existing
    file only (SQLite's ``mode=rw``), so a missing budget file is an error
    rather than a new empty ledger."""
    if not create and not os.path.isfile(path):
        raise PrivacyBudgetError(
            f"no budget file at {path!r}: it was deleted or moved, or never "
            "created. A missing budget file is never recreated empty (that would "
            "forget every spend); create a new budget explicitly with "
            "PrivacyBudget(epsilon, delta, path=...).")
    target = path if create else "file:" + urllib.parse.quote(path) + "?mode=rw"
    return sqlite3.connect(target, timeout=_BUSY_TIMEOUT, isolation_level=None,
                           check_same_thread=False, uri=not create)


@contextlib.contextmanager
def _sqlite_errors(path):
    """Every SQLite failure as a :class:`PrivacyBudgetError` (the original
    is its ``__cause__``)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise PrivacyBudgetError(
            f"the privacy budget file {path!r} cannot be used ({type(exc).__name__}: "
            f"{exc}); nothing was charged.") from exc


def _compose(entries):
    ledger = PrivacyLedger()
    for entry in entries:
        ledger._append(entry)
    return ledger


def _restore_memory_budget(token, pid, epsilon, delta):
    """Unpickle an in-memory budget: the original if it lives here, else a detached one."""
    if pid == os.getpid():
        original = _LIVE.get(token)
        if original is not None:
            return original
    budget = PrivacyBudget.__new__(PrivacyBudget)
    budget._setup(epsilon, delta, None)
    budget._detached = True
    return budget


def _reopen_file_budget(path, epsilon, delta):
    """Unpickle a file budget: same file, same totals; connects on first use."""
    budget = PrivacyBudget.__new__(PrivacyBudget)
    budget._setup(epsilon, delta, path)
    return budget


class PrivacyBudget:
    """A privacy budget that several estimators, clones, processes and runs share.

    Estimators take a ``PrivacyBudget`` as a hyperparameter and call
    :meth:`spend` for each release before changing any state. The budget
    keeps a ledger of every accepted spend and admits a new spend if and
    only if the **composed total** of the ledger with the new spend,
    :meth:`PrivacyLedger.total`, is within ``(epsilon, delta)``:

    * pure-ε spends (``mechanism="laplace"`` / ``"pure"``) add their ε;
    * ``"approx"`` spends (any (ε, δ)-DP release, the default) add their
      (ε, δ) (basic composition);
    * ``"gaussian"`` spends recorded with ``sigma`` and ``sensitivity``
      compose exactly, as one Gaussian mechanism with
      ``μ = √(Σ (Δ_i/σ_i)²)``, at ``δ_G = Σ δ_i``, capped by the sum of
      their ε's (e.g. seven spends at (1, 1e-5) cost ε ≈ 2.61, not 7);
      ``"zcdp"`` spends join that group through zCDP.

    These totals hold for any adaptive sequence of such releases on the same
    data, e.g. all candidate fits of a grid search plus the refit, whatever
    each fit does internally.

    Parameters
    ----------
    epsilon : float
        Total ε allowed, finite and > 0.
    delta : float, default=0.0
        Total δ allowed, ``0 <= delta < 1``. With ``delta=0`` only pure-ε
        spends fit.
    path : str or path-like or None, default=None
        ``None``: the budget lives in memory, in this process. A path: the
        budget and its ledger live in an SQLite file at ``path`` (created if
        missing, by this constructor only: :meth:`from_file`, a pickled copy
        reconnecting in a worker, and this budget itself once the file is
        deleted or replaced raise :class:`PrivacyBudgetError` rather than
        charge an empty ledger; every SQLite failure is a
        :class:`PrivacyBudgetError` with the SQLite error as its
        ``__cause__``). The file records ``(epsilon, delta)``; opening an existing
        file with other totals raises ValueError (use
        :meth:`from_file` to open it with its own totals). Keep it on a
        local file system: SQLite's locks, which serialize the charges, are
        unreliable on some network file systems.

    Attributes
    ----------
    ledger : PrivacyLedger
        A snapshot of every accepted spend, in order (a copy: recording into
        it does not charge the budget).
    spent : tuple of float
        ``ledger.total()``: the composed (ε, δ) of the accepted spends.
    remaining : tuple of float
        ``(epsilon - spent[0], delta - spent[1])``, floored at 0.
    path : str or None
        The absolute path of the budget file, or None in memory.

    Notes
    -----
    **Who shares a budget.**

    * Clones and copies: ``copy.copy``, ``copy.deepcopy`` and
      :func:`sklearn.base.clone` return the budget itself, so
      ``clone(est).budget is est.budget``.
    * Threads (e.g. joblib's ``"threading"`` backend): every operation takes
      an internal lock.
    * Processes and later runs share a budget **only through** ``path=``.
      Every check-and-charge is one SQLite ``BEGIN IMMEDIATE`` transaction
      that reads the whole ledger, composes it with the new spend and
      inserts it or refuses, so concurrent processes are serialized (a
      charge waits up to 60 s for another's transaction). A file budget
      pickles as its path and totals and reconnects in the new process,
      so ``GridSearchCV(n_jobs=2)`` with joblib's default process backend
      charges every fit of every worker to the same file.
    * A budget file also records each private stream's position
      (:meth:`advance_stream`), so a copy of a training estimator continued
      from a point already continued is refused in any process or run.
    * An in-memory budget that lands in another process — pickled to a
      worker, inherited by ``fork``, or unpickled after the original is
      gone — is **detached**: ``spend``, ``check``, ``spent``,
      ``remaining`` and ``ledger`` raise :class:`PrivacyBudgetError` (use
      ``path=``) instead of charging a silent independent copy. A pickle
      round trip inside the process while the original lives returns the
      original.

    Composed totals are compared with the budget with a relative tolerance
    of 1e-9, so that e.g. ten spends of 0.1 fit into ε = 1.

    The composition rules, and the theorems they rest on, are those of
    :class:`PrivacyLedger`.

    Examples
    --------
    >>> from skfedpriv.privacy import PrivacyBudget, PrivacyBudgetError
    >>> budget = PrivacyBudget(1.0, 1e-5)
    >>> budget.spend(0.6, 5e-6, note="fit 1")
    >>> budget.spent
    (0.6, 5e-06)
    >>> try:
    ...     budget.spend(0.6, 0.0, note="fit 2")
    ... except PrivacyBudgetError:
    ...     print("refused; spent is still", budget.spent)
    refused; spent is still (0.6, 5e-06)

    Gaussian releases compose exactly:

    >>> from skfedpriv.privacy import gaussian_sigma
    >>> budget = PrivacyBudget(3.0, 1e-4)
    >>> sigma = gaussian_sigma(1.0, 1e-5, 1.0)
    >>> for fit in range(7):
    ...     budget.spend(1.0, 1e-5, f"fit {fit}", mechanism="gaussian",
    ...                  sigma=sigma, sensitivity=1.0)
    >>> round(budget.spent[0], 2)
    2.61
    """

    def __init__(self, epsilon, delta=0.0, *, path=None):
        epsilon, delta = check_privacy_params(epsilon, delta)
        if path is not None:
            path = os.path.abspath(os.fspath(path))
        self._setup(epsilon, delta, path)
        if path is not None:
            with self._lock:
                self._connection(create=True)  # create the file, or check its totals now

    @classmethod
    def from_file(cls, path):
        """Open an existing budget file with the totals it records.

        Parameters
        ----------
        path : str or path-like

        Returns
        -------
        budget : PrivacyBudget

        Raises
        ------
        PrivacyBudgetError
            If there is no file at ``path`` (a missing budget file is never
            created here: only ``PrivacyBudget(epsilon, delta, path=...)``
            creates one), it is not a budget file, or SQLite fails (the
            SQLite error is the ``__cause__``).
        """
        path = os.path.abspath(os.fspath(path))
        with _sqlite_errors(path):
            conn = _connect(path, create=False)
            try:
                row = conn.execute("SELECT epsilon, delta FROM skfedpriv_budget").fetchone()
            finally:
                conn.close()
        if row is None:
            raise PrivacyBudgetError(f"{path!r} is not a privacy budget file (no totals).")
        return cls(row[0], row[1], path=path)

    def _setup(self, epsilon, delta, path):
        self.epsilon, self.delta, self.path = epsilon, delta, path
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._detached = False
        self._conn = None
        self._conn_pid = None
        self._file_id = None
        if path is None:
            self._entries = []
            self._token = uuid.uuid4().hex
            _LIVE[self._token] = self

    # -- sharing semantics -------------------------------------------------
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        memo[id(self)] = self
        return self

    def __reduce__(self):
        if self.path is not None:
            return (_reopen_file_budget, (self.path, self.epsilon, self.delta))
        return (_restore_memory_budget, (self._token, self._pid, self.epsilon, self.delta))

    def __setstate__(self, state):
        # A pickle from before budgets reduced themselves: a detached copy.
        self._setup(state["epsilon"], state["delta"], None)
        self._detached = True

    def __repr__(self):
        where = "" if self.path is None else f", path={self.path!r}"
        detached = ", detached" if self._unusable() else ""
        return f"PrivacyBudget(epsilon={self.epsilon!r}, delta={self.delta!r}{where}){detached}"

    def _unusable(self):
        return self.path is None and (self._detached or self._pid != os.getpid())

    def _check_usable(self):
        if self._unusable():
            raise PrivacyBudgetError(
                f"{self!r} is an in-memory budget copied into another process "
                f"(or restored from a pickle): charging it would not charge the "
                f"original, so it refuses. To share a budget between processes "
                f"or runs, back it by a file: PrivacyBudget({self.epsilon!r}, "
                f"{self.delta!r}, path='budget.sqlite')."
            )

    # -- the file ----------------------------------------------------------
    def _connection(self, create=False):
        """This process's connection to the budget file (call with the lock
        held). Only the constructor creates a missing file (``create``); a
        later opener (a pickled copy in a worker, another process) finds it
        or raises :class:`PrivacyBudgetError`. Every use checks that the path
        still names the file first opened, so a budget never charges a
        deleted or replaced file's ledger."""
        if self._conn is not None and self._conn_pid == os.getpid():
            self._check_same_file()
            return self._conn
        with _sqlite_errors(self.path):
            conn = _connect(self.path, create=create)
            try:
                with write_transaction(conn):
                    self._check_totals(conn)
            except BaseException:
                conn.close()
                raise
        self._conn, self._conn_pid = conn, os.getpid()
        if self._file_id is None:
            self._file_id = self._stat_id()
        self._check_same_file()
        return conn

    def _check_totals(self, conn):
        for statement in _SCHEMA:
            conn.execute(statement)
        row = conn.execute("SELECT epsilon, delta FROM skfedpriv_budget").fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO skfedpriv_budget (id, epsilon, delta, created) "
                "VALUES (1, ?, ?, ?)", (self.epsilon, self.delta, time.time()))
        elif (float(row[0]), float(row[1])) != (self.epsilon, self.delta):
            raise ValueError(
                f"the budget file {self.path!r} records totals (epsilon="
                f"{row[0]!r}, delta={row[1]!r}), not (epsilon={self.epsilon!r}, "
                f"delta={self.delta!r}); open it with PrivacyBudget.from_file."
            )

    def _stat_id(self):
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _check_same_file(self):
        if self._stat_id() != self._file_id:
            raise PrivacyBudgetError(
                f"the budget file {self.path!r} was deleted or replaced since this "
                "budget opened it; its spends would be charged to a ledger no one "
                "reads, so it refuses. Restore the file, or create a new budget "
                "explicitly with PrivacyBudget(epsilon, delta, path=...).")

    @staticmethod
    def _read_entries(conn):
        rows = conn.execute(
            f"SELECT {', '.join(_FIELDS)} FROM skfedpriv_ledger ORDER BY seq").fetchall()
        return [LedgerEntry(*row) for row in rows]

    def _entries_now(self):
        """All accepted spends (call with the lock held)."""
        if self.path is None:
            return list(self._entries)
        conn = self._connection()
        with _sqlite_errors(self.path):
            conn.execute("BEGIN")
            try:
                return self._read_entries(conn)
            finally:
                conn.execute("COMMIT")

    # -- queries -----------------------------------------------------------
    @property
    def ledger(self):
        self._check_usable()
        with self._lock:
            return _compose(self._entries_now())

    @property
    def spent(self):
        return self.ledger.total()

    @property
    def remaining(self):
        eps, delta = self.spent
        return (max(0.0, self.epsilon - eps), max(0.0, self.delta - delta))

    def _refusal(self, entries, entry):
        """An error message if ``entry`` does not fit after ``entries``, else None."""
        new_eps, new_delta = _compose(entries + [entry]).total()
        if (new_eps <= self.epsilon * (1 + _BUDGET_RTOL)
                and new_delta <= self.delta * (1 + _BUDGET_RTOL)):
            return None
        old_eps, old_delta = _compose(entries).total()
        what = f" for {entry.note!r}" if entry.note else ""
        return (
            f"Privacy budget exceeded: spending (epsilon={entry.epsilon!r}, "
            f"delta={entry.delta!r}, mechanism={entry.mechanism!r}){what} would "
            f"bring the composed total to (epsilon={new_eps!r}, delta={new_delta!r}), "
            f"over the budget (epsilon={self.epsilon!r}, delta={self.delta!r}); "
            f"already spent (epsilon={old_eps!r}, delta={old_delta!r}) in "
            f"{len(entries)} spend(s)."
        )

    @staticmethod
    def _entry(epsilon, delta, note, mechanism, sigma, sensitivity, rho):
        return PrivacyLedger.make_entry(note, mechanism, epsilon, delta, sigma=sigma,
                                        sensitivity=sensitivity, rho=rho,
                                        require_epsilon=True)

    def check(self, epsilon, delta=0.0, note="", *, mechanism="approx", sigma=None,
              sensitivity=None, rho=None):
        """Raise if the spend would exceed the budget; change nothing.

        Parameters
        ----------
        epsilon, delta, note, mechanism, sigma, sensitivity, rho
            As in :meth:`spend`.

        Raises
        ------
        PrivacyBudgetError
            If the composed total after the spend would exceed ``(epsilon,
            delta)``, or the budget is a detached in-memory copy.
        """
        self._check_usable()
        entry = self._entry(epsilon, delta, note, mechanism, sigma, sensitivity, rho)
        with self._lock:
            msg = self._refusal(self._entries_now(), entry)
        if msg is not None:
            raise PrivacyBudgetError(msg)

    def spend(self, epsilon, delta=0.0, note="", *, mechanism="approx",
              sigma=None, sensitivity=None, rho=None):
        """Check, then record a spend atomically.

        Parameters
        ----------
        epsilon : float
            ε of the spend on its own, finite and > 0.
        delta : float, default=0.0
            δ of the spend on its own, ``0 <= delta < 1``.
        note : str, default=""
            What the spend is for; stored in the ledger.
        mechanism : {"approx", "laplace", "pure", "gaussian", "zcdp"}, default="approx"
            How the spend composes (see :meth:`PrivacyLedger.record`):
            ``"gaussian"`` with ``sigma`` and ``sensitivity`` composes
            exactly with the other Gaussian spends; ``"approx"`` adds
            ``(epsilon, delta)``.
        sigma, sensitivity, rho : float, optional
            Mechanism details (see :meth:`PrivacyLedger.record`).

        Raises
        ------
        PrivacyBudgetError
            If the composed total after the spend would exceed the budget
            (nothing is recorded then), or the budget is a detached
            in-memory copy.
        ValueError, TypeError
            If the spend is invalid (nothing is recorded).
        """
        self._check_usable()
        entry = self._entry(epsilon, delta, note, mechanism, sigma, sensitivity, rho)
        with self._lock:
            if self.path is None:
                msg = self._refusal(self._entries, entry)
                if msg is None:
                    self._entries.append(entry)
            else:
                msg = self._charge_file(entry)
        if msg is not None:
            raise PrivacyBudgetError(msg)

    def _charge_file(self, entry):
        """One transaction: read the ledger, compose, insert or refuse."""
        conn = self._connection()
        with _sqlite_errors(self.path), write_transaction(conn):
            msg = self._refusal(self._read_entries(conn), entry)
            if msg is None:
                conn.execute(
                    f"INSERT INTO skfedpriv_ledger ({', '.join(_FIELDS)}, pid, time) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    tuple(getattr(entry, f) for f in _FIELDS) + (os.getpid(), time.time()),
                )
        return msg

    def advance_stream(self, stream, position):
        """Move a private stream from ``position`` to ``position + 1``, once.

        A private estimator with a file budget calls this when it commits an
        update of its stream (named by 128 bits of OS entropy drawn when the
        stream started): the file records each stream's next position, so a
        copy of the training estimator continued from a position already
        continued, in any process or run, is refused. One ``BEGIN
        IMMEDIATE`` transaction checks and advances.

        Parameters
        ----------
        stream : str
            The stream's id.
        position : int
            The number of updates committed on the stream before this one.

        Returns
        -------
        advanced : bool
            False (and nothing recorded) if the file records the stream at
            another position.

        Raises
        ------
        PrivacyBudgetError
            If the budget has no file, or the file cannot be used.
        """
        with self._lock:
            conn = self._stream_connection()
            with _sqlite_errors(self.path), write_transaction(conn):
                if not self._at_position(conn, stream, position):
                    return False
                conn.execute("INSERT OR REPLACE INTO skfedpriv_streams "
                             "(stream, next_position, time) VALUES (?, ?, ?)",
                             (stream, int(position) + 1, time.time()))
        return True

    def stream_at(self, stream, position):
        """Whether the file would let ``stream`` advance from ``position``
        now (a read; :meth:`advance_stream` decides)."""
        with self._lock:
            conn = self._stream_connection()
            with _sqlite_errors(self.path):
                conn.execute("BEGIN")
                try:
                    return self._at_position(conn, stream, position)
                finally:
                    conn.execute("COMMIT")

    def _stream_connection(self):
        if self.path is None:
            raise PrivacyBudgetError("an in-memory budget records no streams.")
        return self._connection()

    @staticmethod
    def _at_position(conn, stream, position):
        row = conn.execute("SELECT next_position FROM skfedpriv_streams "
                           "WHERE stream = ?", (stream,)).fetchone()
        return row is None or row[0] == position
