"""A site's persistent release ledger (an SQLite file at the site)."""

import os
import pathlib
import sqlite3

from ..privacy import write_transaction
from ._refusal import EXHAUSTED, MISMATCH, REFUSED, Refused

__all__ = ["SiteLedgerFile"]


class SiteLedgerFile:
    """A site's release ledger in an SQLite file, shared by every process and run.

    A Flower ClientApp process lives for one message, and a Flower run's
    ``context.state`` for one run; a private site's ledger must hold across
    runs and concurrent processes, so every private site keeps it in a file
    (``ledger_path=`` of :class:`SitePrivacy` / :class:`LearnerPrivacy`,
    required). Every check-and-charge
    is one ``BEGIN IMMEDIATE`` transaction, so concurrent processes are
    serialized. The file records each site's calibration (the privacy
    parameters that fix its noise and its release caps) and refuses a site
    that opens it with another one: counts made under one calibration do not
    bound releases under another.

    The file is made once, when the site is set up
    (:meth:`create`); it is never created implicitly, so a mistyped or
    deleted path is refused instead of starting the counts from zero.

    Parameters
    ----------
    path : str or path-like
        An existing ledger file. Keep it at the site (it may hold the site's
        noise-stream state).
    """

    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS skfedpriv_site ("
        " site TEXT PRIMARY KEY, calibration TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS skfedpriv_site_ledger ("
        " site TEXT NOT NULL, key TEXT NOT NULL, used INTEGER, state BLOB,"
        " PRIMARY KEY (site, key))",
    )

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))

    @classmethod
    def create(cls, path):
        """Make a new, empty ledger file at ``path`` (once, when the site is set up).

        Raises
        ------
        FileExistsError
            If ``path`` exists: a ledger is never replaced.
        """
        ledger = cls(path)
        with open(ledger.path, "xb"):  # exclusive: never over an existing file
            pass
        conn = sqlite3.connect(ledger.path, isolation_level=None)
        try:
            with write_transaction(conn):
                for statement in cls._SCHEMA:
                    conn.execute(statement)
        finally:
            conn.close()
        return ledger

    def _connect(self):
        """A connection to the existing file (never creates it)."""
        try:
            return sqlite3.connect(f"{pathlib.Path(self.path).as_uri()}?mode=rw", uri=True,
                                   timeout=60.0, isolation_level=None)
        except sqlite3.OperationalError:
            raise Refused(REFUSED, (
                f"no site ledger file at {self.path!r}: create it once with "
                "SiteLedgerFile.create(path); a missing ledger is never recreated.")) from None

    def _transaction(self, site, calibration, body):
        """Run ``body(conn)`` in one write transaction, after checking the calibration."""
        conn = self._connect()
        try:
            with write_transaction(conn):
                row = conn.execute("SELECT calibration FROM skfedpriv_site WHERE site = ?",
                                   (site,)).fetchone()
                if row is None:
                    conn.execute("INSERT INTO skfedpriv_site VALUES (?, ?)", (site, calibration))
                elif row[0] != calibration:
                    raise Refused(MISMATCH, (
                        f"site {site}: the ledger file {self.path!r} was kept under the "
                        f"calibration {row[0]}, not {calibration}."))
                return body(conn)
        finally:
            conn.close()

    def charge(self, site, calibration, key, cost, cap):
        """Count ``cost`` releases under ``key`` if they stay within ``cap``.

        Returns
        -------
        used : int
            The count before this charge.

        Raises
        ------
        PermissionError
            (:class:`~skfedpriv.federated._refusal.Refused`) if ``used + cost >
            cap`` (nothing is counted) or the calibration differs.
        """
        def body(conn):
            row = conn.execute("SELECT used FROM skfedpriv_site_ledger WHERE site = ? AND key = ?",
                               (site, key)).fetchone()
            used = 0 if row is None else int(row[0])
            if used + cost > cap:
                raise Refused(EXHAUSTED, (
                    f"site {site}: {key} has used {used} of its {cap} calibrated releases "
                    f"(ledger file {self.path!r}, kept across runs)."))
            conn.execute("INSERT OR REPLACE INTO skfedpriv_site_ledger (site, key, used) "
                         "VALUES (?, ?, ?)", (site, key, used + cost))
            return used
        return self._transaction(site, calibration, body)

    def update_state(self, site, calibration, key, update):
        """Atomically replace the state under ``key`` by ``update(old)`` (bytes or None).

        ``update`` returns ``(new_state, result)``; ``new_state=None`` keeps
        the old state. Returns ``result``.
        """
        def body(conn):
            row = conn.execute("SELECT state FROM skfedpriv_site_ledger WHERE site = ? AND key = ?",
                               (site, key)).fetchone()
            new, result = update(None if row is None else bytes(row[0]))
            if new is not None:
                conn.execute("INSERT OR REPLACE INTO skfedpriv_site_ledger (site, key, state) "
                             "VALUES (?, ?, ?)", (site, key, sqlite3.Binary(new)))
            return result
        return self._transaction(site, calibration, body)

    def counts(self, site):
        """``{key: used}`` of one site (empty if the file or the site is new)."""
        if not os.path.exists(self.path):
            return {}
        conn = self._connect()
        try:
            rows = conn.execute("SELECT key, used FROM skfedpriv_site_ledger "
                                "WHERE site = ? AND used IS NOT NULL", (site,)).fetchall()
        except sqlite3.OperationalError:  # no tables yet
            return {}
        finally:
            conn.close()
        return {k: int(v) for k, v in rows}

    def __repr__(self):
        return f"SiteLedgerFile({self.path!r})"
