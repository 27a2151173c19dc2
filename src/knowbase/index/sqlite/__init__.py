"""The embedded index backend: one SQLite file per base (FTS5 + vectors)."""
