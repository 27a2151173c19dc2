"""``delete``: mark subtrees deleting (workflow), purge them (handler)."""
