"""Index backends: ``knowledge_base.index_backend`` and, on PostgreSQL, the index tables.

Bases that exist before this revision keep their SQLite index files (``sqlite``); new bases get
the backend next to their catalog (``catalog/bases.py``). On PostgreSQL the per-base index
(§3: content, material, search units with their keyword text) lives in ``kb_*`` tables keyed by
base id. Every FK cascades, so deleting a base's row deletes its index in one statement (the
store's GC never deletes a row still referenced). The ``vector`` extension is created when the
server has it; without it the catalog and BM25-only bases work and a vector base's index is
``unavailable`` (``index/postgres/store.py``). The per-width vector tables (``kb_vec_<dims>``)
are made by the store when a base of that width first opens.

Revision ID: 0002s
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002s"
down_revision = "0002j"
branch_labels = None
depends_on = None

# PostgreSQL's english snowball stemmer with no stop words: the SQLite lane runs FTS5's
# ``porter`` tokenizer, which keeps every word; a stop-word list would drop query terms.
# '%%' is one '%': the driver formats this text (exec_driver_sql passes parameters).
PG_DDL = """
CREATE TABLE IF NOT EXISTS kb_index (
  base_id varchar(36) PRIMARY KEY REFERENCES knowledge_base(id) ON DELETE CASCADE,
  schema_version integer NOT NULL,
  vectors_version bigint NOT NULL DEFAULT 0,
  unit_count bigint NOT NULL DEFAULT 0,
  token_count bigint NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS kb_content (
  base_id varchar(36) NOT NULL REFERENCES kb_index(base_id) ON DELETE CASCADE,
  content_hash text NOT NULL,
  text text NOT NULL,
  PRIMARY KEY (base_id, content_hash)
);
CREATE TABLE IF NOT EXISTS kb_material (
  base_id varchar(36) NOT NULL REFERENCES kb_index(base_id) ON DELETE CASCADE,
  material_id text NOT NULL,
  relative_path text NOT NULL CHECK (
    relative_path <> '' AND relative_path NOT LIKE '/%%'
    AND relative_path <> '.kb' AND relative_path NOT LIKE '.kb/%%'),
  current_content_hash text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (base_id, material_id),
  UNIQUE (base_id, relative_path),
  FOREIGN KEY (base_id, current_content_hash) REFERENCES kb_content(base_id, content_hash)
    ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS kb_unit (
  base_id varchar(36) NOT NULL,
  unit_id text NOT NULL,
  material_id text NOT NULL,
  content_hash text NOT NULL,
  unit_index integer NOT NULL CHECK (unit_index >= 0),
  title text,
  char_start integer NOT NULL CHECK (char_start >= 0),
  char_end integer NOT NULL CHECK (char_end >= char_start),
  locator_json text,
  body text NOT NULL,
  embedding_text_hash text NOT NULL,
  keyword tsvector NOT NULL,
  keyword_len integer NOT NULL,
  PRIMARY KEY (base_id, unit_id),
  UNIQUE (base_id, material_id, unit_index),
  FOREIGN KEY (base_id, material_id) REFERENCES kb_material(base_id, material_id)
    ON DELETE CASCADE,
  FOREIGN KEY (base_id, content_hash) REFERENCES kb_content(base_id, content_hash)
    ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS kb_unit_keyword_idx ON kb_unit USING gin (keyword);
CREATE INDEX IF NOT EXISTS kb_unit_hash_idx ON kb_unit (base_id, embedding_text_hash);
CREATE INDEX IF NOT EXISTS kb_unit_content_idx ON kb_unit (base_id, content_hash);
CREATE INDEX IF NOT EXISTS kb_material_content_idx ON kb_material (base_id, current_content_hash);
"""

PG_TEXT_SEARCH = """
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_ts_dict WHERE dictname = 'kb_english_stem') THEN
    CREATE TEXT SEARCH DICTIONARY kb_english_stem (TEMPLATE = snowball, Language = english);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_ts_config WHERE cfgname = 'kb_keyword') THEN
    CREATE TEXT SEARCH CONFIGURATION kb_keyword (COPY = simple);
    ALTER TEXT SEARCH CONFIGURATION kb_keyword
      ALTER MAPPING FOR asciiword, word, asciihword, hword, hword_asciipart, hword_part
      WITH kb_english_stem;
  END IF;
END $$;
"""


def _has_column(table: str, column: str) -> bool:
    return column in {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    # 0001 builds the schema module as it is now, so a fresh database already has the column.
    if not _has_column("knowledge_base", "index_backend"):
        with op.batch_alter_table("knowledge_base") as batch:
            batch.add_column(
                sa.Column("index_backend", sa.String(16), nullable=False, server_default="sqlite")
            )
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    available = bind.exec_driver_sql(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
    ).first()
    if available is not None:
        bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS vector")
    bind.exec_driver_sql(PG_TEXT_SEARCH)
    bind.exec_driver_sql(PG_DDL)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        for name in ("kb_unit", "kb_material", "kb_content", "kb_index"):
            bind.exec_driver_sql(f"DROP TABLE IF EXISTS {name} CASCADE")
    with op.batch_alter_table("knowledge_base") as batch:
        batch.drop_column("index_backend")
