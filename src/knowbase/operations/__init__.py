"""Operations: one room per thing a user asks of a base, its workflow and its job handlers.

A workflow (``<operation>/workflow.py``) is what the facade calls: guards, rows and the job it
enqueues, in one transaction. Its handler (``<operation>/handler.py``) is what a worker runs for
that job kind. ``add/`` (conflicts, inputs, re-adds, prepare-root), ``indexing/`` (the
index-documents and process-file handlers every operation schedules), ``delete/``, ``reindex/``,
``sync/``, ``model_switch/``; single modules for ``bases``, ``labels``, ``restore``, ``purge``,
``recovery`` (the sweep), ``scheduling`` (which job moves an item forward), ``workers``.
``kinds`` names the job kinds, ``handlers.register_all`` wires each to its handler.
"""
