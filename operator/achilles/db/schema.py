"""The whole schema's metadata: every model module imported, so nothing is missed.

Migrations are written by hand; this metadata is what they are compared with
(`tests/db/test_schema.py`) and what Alembic's autogenerate would diff against.
"""

from __future__ import annotations

from sqlalchemy import MetaData

from achilles.db import inbox_models, knowledge_models, models

MODEL_MODULES = (models, knowledge_models, inbox_models)
metadata: MetaData = models.Base.metadata
