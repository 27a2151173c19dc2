"""See DESIGN.md, architecture table."""
