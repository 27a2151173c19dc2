"""Search (was the ``query`` package): one base's hybrid search, fusion (RRF / convex), scope
and label filters, visibility, small-to-big context, the merge of several bases, Concept IDs.

Reads: the Concept ID batch writes (delete / refresh) call the workflows of ``operations/``
that the facade hands in. Judged-set evaluation is ``eval/``.
"""
