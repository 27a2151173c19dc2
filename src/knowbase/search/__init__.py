"""Search (was ``query/``): one base's hybrid search, fusion (RRF / convex), scope and label
filters, visibility, small-to-big context, the merge of several bases, and Concept ID reads.

Reads only: writes go through ``operations/``; judged-set evaluation is ``eval/``.
"""
