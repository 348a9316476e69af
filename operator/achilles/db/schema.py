"""The whole schema's metadata: every model module imported, so nothing is missed.

Migrations are written by hand; this metadata is what they are compared with
(`tests/db/test_schema.py`) and what Alembic's autogenerate would diff against.
"""

from __future__ import annotations

from sqlalchemy import MetaData

from achilles.db.api import models as api_models
from achilles.db.inbox import models as inbox_models
from achilles.db.journal import models
from achilles.db.knowledge import models as knowledge_models
from achilles.db.outbox import models as outbox_models
from achilles.db.tools import models as tool_models

MODEL_MODULES = (
    models,
    knowledge_models,
    inbox_models,
    api_models,
    outbox_models,
    tool_models,
)
metadata: MetaData = models.Base.metadata
