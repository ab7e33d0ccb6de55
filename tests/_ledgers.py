"""Site ledger files for tests: made once per path (a site's setup step)."""

from skfedpriv.federated import SiteLedgerFile


def new_ledger(path):
    """``path``, with a site ledger file made there if there is none yet."""
    if not path.exists():
        SiteLedgerFile.create(path)
    return path
