"""OKF frontmatter: layout of §4.1 and the exact inverse property."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from knowbase.pipeline.sources.okf import serialize_okf, strip_okf_frontmatter

TS = "2026-06-11T10:00:00.000Z"


def test_url_snapshot_layout_keys_in_order() -> None:
    text = serialize_okf(
        "# Body\n",
        type_="URL",
        title="Getting Started",
        resource="https://example.com/guide",
        timestamp=TS,
    )
    assert text == (
        "---\n"
        'type: "URL"\n'
        'title: "Getting Started"\n'
        'resource: "https://example.com/guide"\n'
        f'timestamp: "{TS}"\n'
        "---\n"
        "\n"
        "# Body\n"
    )


def test_note_omits_resource() -> None:
    text = serialize_okf("x", type_="Note", title="Meeting", timestamp=TS)
    assert text == f'---\ntype: "Note"\ntitle: "Meeting"\ntimestamp: "{TS}"\n---\n\nx'
    assert "resource" not in text


def test_values_are_json_strings_like_json_stringify() -> None:
    title = 'a "quoted" --- # title\nwith newline\tand é, 中文, \x01'
    text = serialize_okf("", type_="URL", title=title)
    line = text.splitlines()[2]
    assert line == 'title: "a \\"quoted\\" --- # title\\nwith newline\\tand é, 中文, \\u0001"'
    assert json.loads(line.removeprefix("title: ")) == title


def test_lone_surrogate_is_escaped_as_javascript_does() -> None:
    text = serialize_okf("", type_="URL", title="a\ud800b")
    assert 'title: "a\\ud800b"' in text
    text.encode("utf-8")  # must be writable to disk


def test_text_without_block_is_unchanged() -> None:
    assert strip_okf_frontmatter("# Just markdown\n") == "# Just markdown\n"
    assert strip_okf_frontmatter("--- not a block\n---\n") == "--- not a block\n---\n"


def test_unterminated_block_is_unchanged() -> None:
    text = '---\ntype: "URL"\nno closing delimiter\n'
    assert strip_okf_frontmatter(text) == text


def test_strips_only_the_leading_block() -> None:
    body = '---\ntags: [a, b]\n---\n# Doc\nintro\n---\ntype: "Note"\n---\nrest\n'
    assert strip_okf_frontmatter(serialize_okf(body, type_="URL", title="T")) == body


_optional = st.none() | st.text()
_bodies = (
    st.text()
    | st.builds(lambda s: "---\n" + s, st.text())
    | st.sampled_from(
        ["", "\n", "---", "---\n", "---\n---\n", "\n---\n\nx", "above\n\n---\n\nbelow\n"]
    )
)


@given(
    body=_bodies,
    type_=st.text(min_size=1),
    title=_optional,
    resource=_optional,
    timestamp=_optional,
)
def test_strip_is_exact_inverse_of_serialize(
    body: str, type_: str, title: str | None, resource: str | None, timestamp: str | None
) -> None:
    text = serialize_okf(body, type_=type_, title=title, resource=resource, timestamp=timestamp)
    assert strip_okf_frontmatter(text) == body


@given(st.text().filter(lambda t: not t.startswith("---\n")))
def test_strip_leaves_text_without_block_alone(text: str) -> None:
    assert strip_okf_frontmatter(text) == text
