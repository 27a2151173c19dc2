"""Who asked for a change: the API key's name and the surface it came through.

A surface says who is acting once, at its edge (``Knowledge.acting_as``); every job enqueued
while that holds carries it (``job.by_key``, ``job.by_surface``), and a job's handler acts as
the job did, so the jobs a job enqueues (a folder's files) name the same key. A context
variable rather than an argument through every workflow: "who asked" is a property of the
request, like a trace id, and no workflow decides anything by it.

    with acting(Actor("ci-bot", "http")):
        kb.add(base.id, inputs)        # its jobs record by_key="ci-bot", by_surface="http"
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

SURFACES = ("http", "mcp", "cli", "console")


@dataclass(frozen=True)
class Actor:
    """``key``: the API key's name (``admin`` for ``KNOWBASE_API_TOKEN``; None where no key was
    needed: the CLI, a server without keys). ``surface``: one of :data:`SURFACES`."""

    key: str | None
    surface: str | None


NOBODY = Actor(None, None)
_current: ContextVar[Actor] = ContextVar("knowbase_actor", default=NOBODY)


def current() -> Actor:
    """The actor of the running request or job (:data:`NOBODY` outside any)."""
    return _current.get()


@contextmanager
def acting(actor: Actor) -> Iterator[Actor]:
    """Act as ``actor`` inside the block (this thread or task, and what it copies the context
    into: FastAPI's and anyio's thread pools do)."""
    token = _current.set(actor)
    try:
        yield actor
    finally:
        _current.reset(token)


def act_as(actor: Actor) -> None:
    """Act as ``actor`` from now on in this context, with no block to end it: for a request
    whose task (and context) ends with it, where the check runs before the route."""
    _current.set(actor)


__all__ = ["NOBODY", "SURFACES", "Actor", "act_as", "acting", "current"]
