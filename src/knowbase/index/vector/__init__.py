"""Vector lanes: the exact matrix and the quantized (IVF) lane for big bases.

The lanes' modules load numpy; this package's own names do not (a store reads them at open).
"""

# From 100k rows the exact scan costs ~7.5 ms of a hybrid search's 30 ms budget and the index
# ~0.8 ms (bench/search_scale.py); below, exact is cheap and needs no build.
DEFAULT_MIN_ROWS = 100_000
