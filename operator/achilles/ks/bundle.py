"""The file format `achilles ks load` imports: documents with their access lists, for demos.

```yaml
users:                      # optional: created if missing; existing users are left alone
  - key: alice
    timezone: Europe/Berlin
groups:                     # optional: a listed group's members are replaced by these
  - name: engineering
    members: [alice, bob]
documents:                  # upserted by key; a listed document's grants are replaced
  - key: onboarding
    title: Onboarding checklist
    body: |
      Day one: ...
    readers: [alice]        # users who may read it
    groups: [engineering]   # groups whose members may read it
links:                      # the listed documents' outgoing links are replaced by these
  - from: onboarding
    to: security-policy
    relation: references    # optional, default "related"
```

JSON with the same shape works too. A document with no readers and no groups is
stored but visible to nobody.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from achilles.domain.timezones import load_timezone
from achilles.domain.users import USER_KEY_RULE, is_valid_user_key
from achilles.errors import UnknownTimezoneError

_Key = Field(min_length=1, max_length=200, pattern=r"^\S(.*\S)?$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class UserEntry(_Strict):
    key: str
    timezone: str | None = None

    @field_validator("key")
    @classmethod
    def _nameable_key(cls, value: str) -> str:
        # The key Agents name their owner by: the domain's one rule (the CRD's pattern).
        if not is_valid_user_key(value):
            raise PydanticCustomError("user_key", USER_KEY_RULE)
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                load_timezone(value)
            except UnknownTimezoneError as exc:
                raise ValueError(f"unknown IANA timezone {value!r}") from exc
        return value


class GroupEntry(_Strict):
    name: str = _Key
    members: list[str] = []


class DocumentEntry(_Strict):
    key: str = _Key
    title: str = Field(min_length=1)
    body: str
    readers: list[str] = []
    groups: list[str] = []


class LinkEntry(_Strict):
    from_key: str = Field(alias="from", min_length=1)
    to_key: str = Field(alias="to", min_length=1)
    relation: str = Field(default="related", min_length=1)

    @model_validator(mode="after")
    def _not_self(self) -> LinkEntry:
        if self.from_key == self.to_key:
            raise ValueError(f"a document cannot link to itself ({self.from_key!r})")
        return self


class KnowledgeBundle(_Strict):
    users: list[UserEntry] = []
    groups: list[GroupEntry] = []
    documents: list[DocumentEntry] = []
    links: list[LinkEntry] = []

    @model_validator(mode="after")
    def _unique_keys(self) -> KnowledgeBundle:
        for section, keys in (
            ("users", [u.key for u in self.users]),
            ("groups", [g.name for g in self.groups]),
            ("documents", [d.key for d in self.documents]),
        ):
            seen: set[str] = set()
            for key in keys:
                if key in seen:
                    raise ValueError(f"{section}: {key!r} appears twice")
                seen.add(key)
        return self

    def referenced_users(self) -> set[str]:
        names = {member for group in self.groups for member in group.members}
        return names | {reader for doc in self.documents for reader in doc.readers}

    def referenced_groups(self) -> set[str]:
        return {group for doc in self.documents for group in doc.groups}
