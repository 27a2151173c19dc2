"""The tools' argument types, declared once: what each argument accepts and how the schema
describes it to the model (``Annotated`` aliases the tool signatures use)."""

# No `from __future__ import annotations`: the SDK evaluates tool annotations.
from typing import Annotated, Any, Literal

from pydantic import Field

from knowbase.interfaces.mcp import budget
from knowbase.interfaces.mcp.outline import CURSOR, MAX_TOKENS, SECTION
from knowbase.interfaces.mcp.tools import (
    KB_SEARCH_CONTEXT,
    LIST_MAX_LIMIT,
    MANAGE_MAX_IDS,
    NOTE_MAX_CHARS,
    QUERY_MAX_CHARS,
    QUERY_MIN_CHARS,
    SEARCH_MAX_BASES,
)

BaseId = Annotated[str, Field(min_length=1, max_length=200)]
ConceptId = Annotated[str, Field(min_length=1, max_length=1000)]
MaxDepth = Annotated[int | None, Field(ge=0, le=64, description="Outline depth")]
MaxMatches = Annotated[int | None, Field(ge=1, le=200)]
Pattern = Annotated[str, Field(min_length=1, max_length=200, description="A regex")]
CharStart = Annotated[int | None, Field(ge=0)]
CharEnd = Annotated[int | None, Field(gt=0)]
ReadSection = Annotated[str | None, SECTION]
ReadCursor = Annotated[str | None, CURSOR]
MaxTokens = Annotated[int | None, MAX_TOKENS]
GrepPattern = Annotated[
    str | None, Field(min_length=1, max_length=200, description="Regex: grep mode")
]

# kb_list
ListQuery = Annotated[
    str | None, Field(min_length=1, max_length=200, description="Filter bases by name or content")
]
ListLimit = Annotated[int, Field(ge=1, le=LIST_MAX_LIMIT)]
ListCursor = Annotated[str | None, Field(max_length=200, description="nextCursor")]
OutlineBase = Annotated[
    str | None, Field(min_length=1, max_length=200, description="Outline this base")
]

# kb_search. The schema states the query's lengths but the tool checks them: a schema refusal
# would reach the model as pydantic's raw error text with a URL.
Query = Annotated[
    str,
    Field(
        description="What to find (2 to 200 characters)",
        json_schema_extra={"minLength": QUERY_MIN_CHARS, "maxLength": QUERY_MAX_CHARS},
    ),
]
BaseIds = Annotated[
    list[BaseId], Field(min_length=1, max_length=SEARCH_MAX_BASES, description="Bases to search")
]
Under = Annotated[
    str | None,
    Field(
        max_length=1000,
        description="Only documents in this folder: a conceptId prefix such as 'papers'",
    ),
]
Types = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=20)]] | None,
    Field(
        max_length=32,
        description="Only these source types: file extensions (pdf, md, docx…), url, note",
    ),
]
Since = Annotated[
    str | None,
    Field(
        max_length=64, description="Only items updated at or after this ISO date, e.g. 2024-05-01"
    ),
]
Surroundings = Annotated[
    int | None,
    Field(
        ge=1,
        le=8000,
        description="Tokens of surroundings per passage (neighbouring chunks, merged);"
        f" default {KB_SEARCH_CONTEXT}",
    ),
]
Tags = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=100)]] | None,
    Field(max_length=32, description="Only documents carrying every one of these tags"),
]
Where = Annotated[
    dict[str, Any] | None,
    Field(
        description='Metadata conditions, all required, e.g. {"year": {"gte": 2023}, '
        '"lang": {"in": ["en", "de"]}, "team": "infra"}'
    ),
]
TopK = Annotated[
    int | None, Field(ge=1, le=50, description="At most this many passages (default: 10 a base)")
]
SearchMaxChars = Annotated[
    int,
    Field(
        ge=budget.MIN_MAX_CHARS,
        le=budget.MAX_MAX_CHARS,
        description="The reply's size in characters; passages past it are cut or left "
        "out (each hit first, then context)",
    ),
]
AlsoQueries = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=QUERY_MAX_CHARS)]] | None,
    Field(
        max_length=4,
        description="Up to 4 more phrasings of the same intent (synonyms, a question "
        "form); each is searched and the lists fuse, passages several find first",
    ),
]
Group = Annotated[
    Literal["passage", "document"] | None,
    Field(
        description="document: one entry per document (scored by its best passage), "
        "its best passages' places listed as citations; default passage"
    ),
]

# kb_outline
Depth = Annotated[int | None, Field(ge=1, le=64, description="Levels shown")]
Section = Annotated[
    str | None,
    Field(min_length=1, max_length=1000, description="A section id or heading path"),
]
OutlineMaxChars = Annotated[
    int,
    Field(
        ge=budget.MIN_MAX_CHARS,
        le=budget.MAX_MAX_CHARS,
        description="The reply's size in characters (fewer levels shown past it)",
    ),
]

# kb_manage
LocalPath = Annotated[str | None, Field(min_length=1, max_length=4096)]
Url = Annotated[str | None, Field(min_length=1, max_length=8192)]
NoteContent = Annotated[str | None, Field(max_length=NOTE_MAX_CHARS)]
NoteTitle = Annotated[str | None, Field(max_length=200)]
ConceptIds = Annotated[
    list[ConceptId] | None,
    Field(min_length=1, max_length=MANAGE_MAX_IDS),
]
NewTags = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=100)]] | None,
    Field(max_length=64, description="add: tags for the new item"),
]
NewMetadata = Annotated[
    dict[str, Any] | None,
    Field(description="add: metadata for the new item (text, numbers, lists of them)"),
]
