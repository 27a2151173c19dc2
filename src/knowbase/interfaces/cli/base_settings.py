"""The options of ``kb base create`` and ``kb base set``, one per declared base setting.

:func:`setting_options` adds an option per entry of :data:`~knowbase.catalog.base_settings.
SETTINGS` to a command (``set`` takes the mutable ones) and hands the command the given ones
as ``settings``: a dict of catalog names to values, a flag's "clear" word (``--rerank none``,
``--url-max-age -1``) already turned into None.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from knowbase import BASE_SETTINGS as SETTINGS
from knowbase import BaseSetting


def _help(s: BaseSetting) -> str:
    text = s.help.rstrip(".")
    if s.choices:
        text += ": " + " or ".join(repr(c) for c in s.choices)
        if s.cli_null is not None:
            text += f" or {s.cli_null!r}"
    elif isinstance(s.cli_null, str):
        text += f"; {s.cli_null!r} clears"
    elif s.cli_null is not None:
        text += f"; {s.cli_null}: {s.null_label}"
    return text + "."


def _parameter(s: BaseSetting) -> inspect.Parameter:
    if s.type is bool:
        flag = s.cli_flag
        option = typer.Option(f"{flag}/--no-{flag.removeprefix('--')}", help=_help(s))
    else:
        option = typer.Option(s.cli_flag, help=_help(s))
    kind = str if s.choices else s.type  # a choice's 'none' is a word too
    return inspect.Parameter(
        s.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[kind | None, option],
    )


def _value(s: BaseSetting, value: Any) -> Any:
    """The catalog value of a flag: its clear word (or, for -1, any negative number) is None."""
    if s.cli_null is None:
        return value
    if isinstance(s.cli_null, str):
        return None if value == s.cli_null else value
    return None if value < 0 else value


_LAST = ("home", "as_json")


def setting_options(*, mutable_only: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command one option per setting; it receives the given ones as ``settings``."""
    chosen = [s for s in SETTINGS if s.mutable or not mutable_only]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(command, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "settings"]
        # the settings follow the command's own options; --home and --json close the list
        cut = next((i for i, p in enumerate(own) if p.name in _LAST), len(own))
        tail = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own[cut:]]
        params = [*own[:cut], *(_parameter(s) for s in chosen), *tail]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            given = {s.name: (s, kwargs.pop(s.name, None)) for s in chosen}
            settings = {k: _value(s, v) for k, (s, v) in given.items() if v is not None}
            return command(*args, settings=settings, **kwargs)

        run.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        return run

    return decorate
