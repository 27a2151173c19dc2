"""knowbase: local-first knowledge-base engine."""
