"""Vector lanes: the exact matrix and the quantized (IVF) lane for big bases."""
