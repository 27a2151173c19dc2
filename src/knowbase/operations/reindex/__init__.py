"""``reindex``: the workflow and the reindex-subtree handler."""
