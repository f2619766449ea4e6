"""The basic_auth_users a running server checks passwords against, replaceable while it serves.

exporter-toolkit applies a removed user or a changed password to the next request, so users
expect a re-read web config to revoke access at once, not at the next restart. One LiveUsers is
made with each web config; the one of the config the server started with is shared by the
BasicAuth middleware, which reads it on every request, and the reloader, which replaces its users
whenever the file is re-read (SIGHUP, or changed files seen on a new TLS connection).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class UserChanges:
    added: int = 0
    removed: int = 0
    # Same name, another hash: a new password, or the same one hashed again.
    changed: int = 0

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def __str__(self) -> str:
        parts = [(self.added, "added"), (self.removed, "removed"), (self.changed, "changed")]
        return ", ".join(f"{count} {what}" for count, what in parts if count)


class LiveUsers:
    """User name -> bcrypt hash. `generation` moves on with every change, so a reader can tell
    that what it derived from the users (a cache of checked passwords) is out of date."""

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self._users = dict(users)
        self.generation = 0

    @property
    def users(self) -> Mapping[str, bytes]:
        return MappingProxyType(self._users)

    def replace(self, users: Mapping[str, bytes]) -> UserChanges:
        new = dict(users)
        old = self._users
        changes = UserChanges(
            added=sum(1 for name in new if name not in old),
            removed=sum(1 for name in old if name not in new),
            changed=sum(1 for name, hashed in new.items() if old.get(name, hashed) != hashed),
        )
        if changes:
            self._users = new
            self.generation += 1
        return changes
