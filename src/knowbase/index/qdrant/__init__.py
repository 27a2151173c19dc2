"""The Qdrant index backend."""
