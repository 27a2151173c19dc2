"""The PostgreSQL index backend (tsvector + pgvector)."""
