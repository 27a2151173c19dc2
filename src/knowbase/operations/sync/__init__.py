"""``sync``: plan and schedule (workflow), resume, apply (handler)."""
