"""What a user key is: the one rule every way of naming a user shares.

Agents name their owner by key (`Agent.spec.owner`), so a key the CRD would refuse must
be refused everywhere else too, or a user could exist whom no Agent can ever name: the
CLI (`achilles users upsert`, `--owner`, `--as`), the Knowledge Store bundle and the
database (a CHECK on `users.key`) all use this pattern.
"""

from __future__ import annotations

import re

from achilles.errors import InvalidInputError

# "alice", "alice@example.org", "a.b+c_d-e". The CRD's pattern and the database's CHECK.
USER_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$"
USER_KEY_MAX_LENGTH = 253
USER_KEY_RULE = (
    f"a user key starts with a letter or digit and has only letters, digits and . _ @ + -"
    f" (at most {USER_KEY_MAX_LENGTH} characters)"
)
# fullmatch: Python's `$` also matches before a trailing newline; the CRD's and
# PostgreSQL's do not.
_USER_KEY = re.compile(USER_KEY_PATTERN.removeprefix("^").removesuffix("$"))


def is_valid_user_key(key: str) -> bool:
    return len(key) <= USER_KEY_MAX_LENGTH and _USER_KEY.fullmatch(key) is not None


def check_user_key(key: str) -> str:
    """`key` if it is a valid user key; else `InvalidInputError` saying what one is."""
    if not is_valid_user_key(key):
        shown = key if len(key) <= 60 else key[:57] + "..."
        raise InvalidInputError(f"{USER_KEY_RULE} (got {shown!r})")
    return key
