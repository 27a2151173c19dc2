"""A search unit, as the pipeline hands it to the index and the index keeps it: the chunk
(``chunk``: a verbatim slice of the material text, with its locator), its content-addressed ids
(``hashing``) and the contextual text it is searched and embedded by (``context``).

Pure and small, below both ``pipeline`` (which splits and embeds) and ``index`` (which checks,
names and stores): the two must agree on every one of these, so each is declared once here.
"""
