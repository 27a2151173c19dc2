"""The base page's settings form: one field per mutable setting of the declaration
(:data:`knowbase.BASE_SETTINGS`), as ``kb base set`` derives its options and the HTTP models
their fields. The template (``templates/base.html``) loops over :func:`form_fields`;
``static/base_settings.js`` reads and writes whatever the form holds."""

from __future__ import annotations

from typing import Any

from knowbase import BASE_SETTINGS as SETTINGS


def _number(x: float | None) -> str | None:
    return None if x is None else str(int(x)) if float(x).is_integer() else str(x)


def form_fields() -> list[dict[str, Any]]:
    """The console's settings form, one field per mutable setting, in declaration order."""
    out = []
    for s in SETTINGS:
        if not s.mutable:
            continue
        if s.type is bool:
            kind = "checkbox"
        elif s.choices:
            kind = "select"
        elif s.type in (int, float):
            kind = "number"
        else:
            kind = "text"
        top = s.maximum if s.maximum is not None else s.input_max
        out.append(
            {
                "name": s.name,
                "id": "set-" + s.cli_flag.removeprefix("--"),
                "label": s.label,
                "help": s.help,
                "kind": kind,
                "nullable": s.nullable,
                "null_label": s.null_label,
                "choices": list(s.choices or ()),
                "min": _number(s.minimum),
                "max": _number(top),
                "step": "any" if s.type is float else None,
                "maxlength": s.input_max_length,
                "suggestions": list(s.suggestions),
                "advanced": s.advanced,
                "needs_model": s.needs_model,
            }
        )
    return out


__all__ = ["form_fields"]
