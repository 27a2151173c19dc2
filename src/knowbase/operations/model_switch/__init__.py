"""Model switch: the workflow and the switch-model handler."""
