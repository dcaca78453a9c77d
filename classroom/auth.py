"""How learners log in to the classroom's hub (classroom/jupyterhub_config.py picks one, `python -m classroom
up --auth` chooses):

- "pam" (the default): JupyterHub's PAMAuthenticator over the classroom's own Unix users, each with a random
  password of its own that `up` sets (chpasswd) and writes to ROOT/credentials.csv (root only, 0600). The hub
  checks it against /etc/shadow through PAM's `login` service (its 3 s delay after a wrong password included);
  only the classroom's users are allowed in, never root or another account of the machine.
- "shared": SharedPasswordAuthenticator, one password for everyone; anyone who knows it can log in as any
  learner, so it is for a closed room only.

Both refuse a user name for `lockout_seconds` after `failed_logins_allowed` wrong passwords in a row
(LoginLockout): the hub answers 429 and says for how long. Attempts still in flight count as failures, so
parallel guesses cannot overrun the limit. The count lives in the hub's memory: a hub restart clears it.
"""

import time

from jupyterhub.auth import Authenticator, PAMAuthenticator
from jupyterhub.authenticators.shared import SharedPasswordAuthenticator
from jupyterhub.utils import maybe_future
from tornado import web
from traitlets import Integer

FAILED_LOGINS_ALLOWED = 5
LOCKOUT_SECONDS = 300


class _Record:
    __slots__ = ("failures", "pending", "locked_until")

    def __init__(self):
        self.failures, self.pending, self.locked_until = 0, 0, 0.0


class LoginLockout(Authenticator):
    """A lockout in front of another authenticator (a base of LockoutPAMAuthenticator and
    LockoutSharedPasswordAuthenticator): after `failed_logins_allowed` failed logins of one user name in a
    row, every login of that name is refused for `lockout_seconds`, the right password too."""

    failed_logins_allowed = Integer(
        FAILED_LOGINS_ALLOWED, config=True, help="failed logins in a row before a user name is locked"
    )
    lockout_seconds = Integer(LOCKOUT_SECONDS, config=True, help="how long a locked user name stays locked")
    clock = time.monotonic

    def _records(self):
        if not hasattr(self, "_lockout"):
            self._lockout = {}
        return self._lockout

    def _locked(self, name, rec):
        now = self.clock()
        if rec.locked_until > now:
            left = rec.locked_until - now
            self.log.warning("login lockout: %r is locked for another %.0f s", name, left)
            wait = f"{left:.0f} s" if left < 120 else f"{left / 60:.0f} min"
            raise web.HTTPError(429, f"Too many failed logins for {name}: try again in {wait}, or ask the instructor.")
        if rec.locked_until:  # the lock has run out: a fresh count
            rec.failures, rec.locked_until = 0, 0.0
        if rec.failures + rec.pending >= self.failed_logins_allowed:
            self.log.warning("login lockout: %r has %d login attempts in flight", name, rec.pending)
            raise web.HTTPError(429, f"Too many login attempts for {name} at once: try again in a minute.")

    async def authenticate(self, handler, data):
        name = self.normalize_username(str((data or {}).get("username", "")))[:64]
        records = self._records()
        rec = records.setdefault(name, _Record())
        self._locked(name, rec)
        rec.pending += 1
        try:
            result = await maybe_future(super().authenticate(handler, data))  # PAM's runs in a thread
        finally:
            rec.pending -= 1
        if result:
            records.pop(name, None)
            return result
        rec.failures += 1
        if rec.failures >= self.failed_logins_allowed:
            rec.locked_until = self.clock() + self.lockout_seconds
            self.log.warning(
                "login lockout: %r locked for %d s after %d failed logins", name, self.lockout_seconds, rec.failures
            )
        if len(records) > 10_000:  # names tried once and never again: forget the oldest
            for stale in [n for n, r in records.items() if not r.pending and not r.locked_until][:5_000]:
                records.pop(stale, None)
        return None


class LockoutPAMAuthenticator(LoginLockout, PAMAuthenticator):
    """PAM over the classroom's Unix users, each with its own password, with the lockout."""


class LockoutSharedPasswordAuthenticator(LoginLockout, SharedPasswordAuthenticator):
    """One shared password (a closed room only), with the lockout."""
