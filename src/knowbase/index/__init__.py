"""The search index (was ``pipeline/store``): what a base's chunks and vectors are kept in.

``base`` is the protocol every backend implements, ``backends`` the registry that opens one by
name, ``fts_query`` and ``keyword_scale`` the keyword lane's query and scale, ``plan`` the
checks before a rebuild writes (units named by content), ``lease`` a store's holders. The
backends are ``sqlite/`` (embedded, the default), ``postgres/`` and ``qdrant/``; ``vector/``
holds the exact matrix and the quantized lane for big bases.
"""
