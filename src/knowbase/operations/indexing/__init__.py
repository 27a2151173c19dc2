"""Indexing one item: the index-documents and process-file handlers."""
