"""``python -m knowbase.interfaces.cli``: the same as ``kb``."""

from knowbase.interfaces.cli import main

main()
