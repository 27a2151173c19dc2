"""Catalog tables (SQLAlchemy Core). Portable SQL only: the same schema runs on PostgreSQL.

Timestamps are integer milliseconds since the epoch. JSON columns hold text (portable).
"""

from __future__ import annotations

import sqlalchemy as sa

from knowbase.catalog import base_settings

metadata = sa.MetaData()

BASE_STATUSES = ("completed", "failed")
BASE_ERRORS = ("missing_embedding_model", "missing_vector_store")
ITEM_TYPES = ("file", "url", "note", "directory", "sitemap")
CONTAINER_TYPES = ("directory", "sitemap")
ITEM_STATUSES = (
    "idle",
    "preparing",
    "processing",
    "reading",
    "embedding",
    "completed",
    "failed",
    "deleting",
)
ACTIVE_STATUSES = ("preparing", "processing", "reading", "embedding")
#: Items whose index units a search shows: completed ones, and leaves being re-indexed in place
#: (a sync or reindex of a changed file). Those keep their previous version's units until the
#: rebuild swaps them for the new ones in one transaction, so a search finds the old version or
#: the new one, never nothing (docs/sync.md; issue 26). A leaf indexed for the first time has
#: no units yet; failed and deleting items are never shown.
SEARCHABLE_STATUSES = ("completed", "processing", "reading", "embedding")
TERMINAL_ITEM_STATUSES = ("completed", "failed")
JOB_STATUSES = ("pending", "running", "completed", "failed", "cancelled")
TERMINAL_JOB_STATUSES = ("completed", "failed", "cancelled")


def is_container(item_type: str) -> bool:
    """Directories and sitemaps hold children; every other type is a leaf."""
    return item_type in CONTAINER_TYPES


def _in(col: str, values: tuple[str, ...]) -> str:
    return f"{col} IN ({', '.join(repr(v) for v in values)})"


def _setting_columns() -> list[sa.Column]:
    """One column per declared setting (0001 builds a fresh catalog from these; the migration
    named by each entry's ``since`` adds it to an older one)."""
    kinds = {int: sa.Integer, float: sa.Float, bool: sa.Boolean}
    out = []
    for s in base_settings.SETTINGS:
        kind = kinds.get(s.type) or sa.String(s.column_length)
        if s.nullable or s.default is None:
            default = None
        elif s.type is bool:
            default = sa.true() if s.default else sa.false()
        else:
            default = str(s.default)
        out.append(sa.Column(s.name, kind, nullable=s.nullable, server_default=default))
    return out


def _setting_checks() -> list[sa.CheckConstraint]:
    """The CHECKs of the settings that have one, and those tying settings together."""
    named = [(s.check, s.check_sql()) for s in base_settings.SETTINGS if s.check]
    return [
        sa.CheckConstraint(sql, name=name)
        for name, sql in (*named, *base_settings.pair_checks())
        if sql
    ]


knowledge_base = sa.Table(
    "knowledge_base",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("name_key", sa.String(255), nullable=False, unique=True),  # trimmed, casefolded
    sa.Column("dimensions", sa.Integer, nullable=True),
    sa.Column("embedding_model_id", sa.String(255), nullable=True),
    sa.Column("status", sa.String(16), nullable=False, server_default="completed"),
    sa.Column("error", sa.String(64), nullable=True),
    # which IndexStore holds the base's index (migration 0002s; existing bases keep sqlite)
    sa.Column("index_backend", sa.String(16), nullable=False, server_default="sqlite"),
    # the settings, one column each, as catalog/base_settings.py declares them
    *_setting_columns(),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.CheckConstraint(_in("status", BASE_STATUSES), name="knowledge_base_status_check"),
    sa.CheckConstraint(
        "(status = 'completed' AND error IS NULL AND ("
        "(embedding_model_id IS NOT NULL AND dimensions IS NOT NULL AND dimensions > 0) OR "
        "(embedding_model_id IS NULL AND dimensions IS NULL))) OR "
        "(status = 'failed' AND error IS NOT NULL AND TRIM(error) <> '')",
        name="knowledge_base_status_error_check",
    ),
    sa.CheckConstraint("length(trim(name)) >= 1", name="knowledge_base_name_check"),
    *_setting_checks(),
)

knowledge_item = sa.Table(
    "knowledge_item",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column(
        "base_id",
        sa.String(36),
        sa.ForeignKey("knowledge_base.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("group_id", sa.String(36), nullable=True),
    sa.Column("type", sa.String(16), nullable=False),
    sa.Column("data", sa.Text, nullable=False),  # JSON, shape per type (§1.2)
    sa.Column("origin", sa.Text, nullable=True),  # absolute path or URL, for re-acquisition
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("error_code", sa.String(64), nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("base_id", "id", name="knowledge_item_base_id_id_key"),
    sa.ForeignKeyConstraint(
        ["base_id", "group_id"],
        ["knowledge_item.base_id", "knowledge_item.id"],
        ondelete="CASCADE",
        name="knowledge_item_group_fk",
    ),
    sa.CheckConstraint(_in("type", ITEM_TYPES), name="knowledge_item_type_check"),
    sa.CheckConstraint(_in("status", ITEM_STATUSES), name="knowledge_item_status_check"),
    sa.CheckConstraint(
        "(type IN ('directory', 'sitemap') AND status NOT IN ('reading', 'embedding')) OR "
        "(type NOT IN ('directory', 'sitemap') AND status <> 'preparing')",
        name="knowledge_item_type_status_check",
    ),
    sa.CheckConstraint(
        "(status = 'failed' AND error_code IS NOT NULL AND TRIM(error_code) <> '' "
        "AND error_message IS NOT NULL AND TRIM(error_message) <> '') OR "
        "(status <> 'failed' AND error_code IS NULL AND error_message IS NULL)",
        name="knowledge_item_error_check",
    ),
    sa.Index("knowledge_item_base_type_created_idx", "base_id", "type", "created_at"),
    sa.Index("knowledge_item_base_group_created_idx", "base_id", "group_id", "created_at"),
    sa.Index("knowledge_item_status_idx", "status"),
    # The event stream reads what changed since it last looked (0002j).
    sa.Index("knowledge_item_base_updated_idx", "base_id", "updated_at"),
)

#: Rows ``items.delete_rows`` removed, so a live event stream can report them ``gone`` without
#: re-reading the base; the sweep drops them after a day (a reconnecting client gets a full
#: snapshot anyway). No foreign key: a base's deletion ends its streams.
item_tombstone = sa.Table(
    "item_tombstone",
    metadata,
    sa.Column("base_id", sa.String(36), nullable=False),
    sa.Column("item_id", sa.String(36), nullable=False),
    sa.Column("deleted_at", sa.BigInteger, nullable=False),
    sa.Index("item_tombstone_base_deleted_idx", "base_id", "deleted_at"),
    sa.Index("item_tombstone_deleted_idx", "deleted_at"),  # the sweep's cleanup
)

job = sa.Table(
    "job",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("queue", sa.String(64), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),  # JSON object
    sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
    sa.Column("idempotency_key", sa.String(512), nullable=True),
    # Non-null only while the job is non-terminal: a unique index on it dedupes active jobs.
    sa.Column("active_key", sa.String(512), nullable=True, unique=True),
    sa.Column("parent_id", sa.String(36), nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
    sa.Column("run_at", sa.BigInteger, nullable=False),
    sa.Column("locked_by", sa.String(255), nullable=True),
    sa.Column("lease_until", sa.BigInteger, nullable=True),
    sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("progress_stage", sa.String(64), nullable=True),
    sa.Column("progress_percent", sa.Float, nullable=True),
    sa.Column("progress_details", sa.Text, nullable=True),  # JSON
    sa.Column("error_code", sa.String(64), nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Column("finished_at", sa.BigInteger, nullable=True),
    # who asked for the change (0008k): the API key's name (null: the CLI or an open server)
    # and the surface it came through (http, mcp, cli); a job a job enqueued inherits them
    sa.Column("by_key", sa.String(64), nullable=True),
    sa.Column("by_surface", sa.String(16), nullable=True),
    sa.CheckConstraint(_in("status", JOB_STATUSES), name="job_status_check"),
    sa.Index("job_claim_idx", "queue", "status", "run_at"),
    sa.Index("job_status_idx", "status"),
    sa.Index("job_parent_idx", "parent_id"),
    sa.Index("job_queue_updated_idx", "queue", "updated_at"),  # event stream (0002j)
    sa.Index("job_finished_idx", "finished_at"),  # retention (0002j)
    # claims find the (queue, kind) pairs with pending jobs by seeks and read each pair's
    # jobs in claim order, stopping early (0007p; it replaced 0005k's status-first order)
    sa.Index("job_pending_pair_idx", "status", "queue", "kind", "run_at", "created_at", "id"),
    sa.Index("job_by_key_idx", "by_key", "created_at"),  # kb jobs --by KEY (0008k)
)

KEY_ACCESS = ("read", "write")

#: Scoped API keys (0008k). Only the token's SHA-256 is kept: the token is shown once, at
#: creation. ``base_ids`` is a JSON list of base ids (null: every base); a key never outlives
#: its name (revoked keys stay, so ``kb jobs --by`` still names who made a change).
api_key = sa.Table(
    "api_key",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
    sa.Column("access", sa.String(8), nullable=False),
    sa.Column("base_ids", sa.Text, nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=True),
    sa.Column("revoked_at", sa.BigInteger, nullable=True),
    sa.CheckConstraint(_in("access", KEY_ACCESS), name="api_key_access_check"),
)

#: Changes to a base that start no job (0009b): created, settings or an item's labels changed,
#: deleted, with who
#: asked (as ``job.by_key``/``by_surface``). No foreign key: a deleted base keeps its record.
BASE_CHANGE_ACTIONS = ("create", "settings", "labels", "delete")
base_change = sa.Table(
    "base_change",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("base_id", sa.String(36), nullable=False),
    sa.Column("base_name", sa.String(200), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("details", sa.Text, nullable=True),
    sa.Column("by_key", sa.String(64), nullable=True),
    sa.Column("by_surface", sa.String(16), nullable=True),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.CheckConstraint(_in("action", BASE_CHANGE_ACTIONS), name="base_change_action_check"),
    sa.Index("base_change_base_idx", "base_id", "at"),
)

worker = sa.Table(
    "worker",
    metadata,
    sa.Column("id", sa.String(255), primary_key=True),  # host:pid:start-time
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started_at", sa.BigInteger, nullable=False),
    sa.Column("heartbeat_at", sa.BigInteger, nullable=False),
)
