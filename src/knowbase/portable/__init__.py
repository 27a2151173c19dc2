"""A base or a home as one file elsewhere: export, import, copy-home, the archive."""
