"""``add``: conflicts, inputs, re-adds, the workflow and the prepare-root handler."""
