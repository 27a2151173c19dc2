"""Retrievers for the Python frameworks people build assistants with.

- :mod:`knowbase.integrations.langchain`: ``KnowbaseRetriever``, a ``langchain_core`` retriever
  (``pip install 'knowbase[langchain]'``);
- :mod:`knowbase.integrations.llama_index`: ``KnowbaseRetriever``, a ``llama_index.core``
  retriever (``pip install 'knowbase[llama-index]'``).

Both search one base, either in an embedded home (a ``Knowledge`` opened here) or through a
running ``kb serve`` (its URL, and its token when it has one): :mod:`.hits` holds the part they
share.
"""
