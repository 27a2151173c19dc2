"""PDF tables without ruling lines (pdf_stream) and the pdfium page reader (pdf_pdfium).

Drawn with reportlab at test time: a yearbook table with dot leaders and a wrapped label, a
key/value page, a typewritten table in a monospace font, a small table ruled across only
(pdf_rules), and the look-alikes that must stay text (a table of contents, an index in two
columns, code in a monospace font). Each runs through both page parsers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.pipeline.readers import pdf as pdf_reader
from knowbase.pipeline.readers import read_file

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["pdfium", "pdfplumber"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(pdf_reader, "BACKEND", request.param)
    return request.param


def _canvas(path: Path, font: str = "Helvetica", size: float = 9):
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    c.setFont(font, size)
    return c


def _right(c, x: float, y: float, text: str) -> None:
    c.drawRightString(x, y, text)


def _table_rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.split("\n")
        if line.startswith("|") and not set(line) <= set("|-: ")
    ]


def _text(pdf: Path) -> str:
    return "\n\n".join(d.text for d in read_file(pdf))


YEARBOOK = [
    ("Total", "11,062.6", "1,540.0", "9,522.6"),
    ("Violent crime", "467.9", "69.1", "398.8"),
    ("Robbery", "102.1", "25.5", "76.6"),
    ("Arson", "9.8", "4.3", "5.5"),
    ("Fraud", "173.7", "5.1", "168.5"),
]


def test_an_unruled_table_with_dot_leaders_becomes_a_table(tmp_path: Path, backend: str) -> None:
    pdf = tmp_path / "yearbook.pdf"
    c = _canvas(pdf)
    c.drawString(60, 790, "Table 324. Arrests by age, in thousands, for the year to December.")
    y = 760
    _right(c, 290, y, "Total")
    _right(c, 360, y, "Under 18")
    _right(c, 430, y, "18 and over")
    c.drawString(60, y, "Offense charged")
    rows = YEARBOOK[:2] + [("Murder and nonnegligent", "", "", "")] + YEARBOOK[2:]
    for label, *values in rows:
        y -= 13
        leader = "" if not values[0] else " " + " ." * ((26 - len(label)) // 2)
        if label.startswith("Murder"):
            c.drawString(60, y, label)
            y -= 13
            label, values, leader = "manslaughter", ["10.0", "0.9", "9.1"], " . . . . . . ."
        c.drawString(60, y, label + leader)
        for x, v in zip((290, 360, 430), values, strict=True):
            _right(c, x, y, v)
    c.drawString(60, y - 30, "Source: a generated page. The note below the table stays prose.")
    c.showPage()
    c.save()
    text = _text(pdf)
    rows = _table_rows(text)
    assert rows[0] == ["Offense charged", "Total", "Under 18", "18 and over"], text
    assert ["Murder and nonnegligent", "", "", ""] in rows
    assert rows[-1][1:] == ["173.7", "5.1", "168.5"] and rows[-1][0].startswith("Fraud .")
    assert "Table 324. Arrests by age" in text.split("|")[0]
    assert "Source: a generated page" in text.split("\n|")[-1]


def test_a_key_value_page_is_a_table_not_two_columns(tmp_path: Path, backend: str) -> None:
    pdf = tmp_path / "keyfigures.pdf"
    c = _canvas(pdf)
    c.drawString(70, 760, "Class A")
    pairs = [
        ("Net asset value at 31 December", "5,111,372"),
        ("Number of outstanding units at 31 December", "49,136"),
        ("Net asset value per unit at 31 December", "104.03"),
        ("Costs", "(106,870)"),
    ]
    for i, (k, v) in enumerate(pairs):
        c.drawString(70, 740 - 20 * i, k)
        _right(c, 520, 740 - 20 * i, v)
    c.showPage()
    c.save()
    rows = _table_rows(_text(pdf))
    assert [list(p) for p in pairs] == rows[-4:], rows
    assert rows[0] == ["Class A", ""]


def test_a_contents_page_stays_text(tmp_path: Path, backend: str) -> None:
    pdf = tmp_path / "contents.pdf"
    c = _canvas(pdf, "Times-Roman", 11)
    entries = ["Introduction", "Installation", "Configuration", "Searching", "Backups", "Index"]
    for i, title in enumerate(entries):
        c.drawString(72, 760 - 16 * i, f"{i + 1}  {title} " + ". " * (40 - len(title)))
        _right(c, 520, 760 - 16 * i, str(3 + 4 * i))
    c.showPage()
    c.save()
    text = _text(pdf)
    assert "|" not in text, text
    assert "Configuration" in text


def test_an_index_in_two_columns_stays_text(tmp_path: Path, backend: str) -> None:
    pdf = tmp_path / "index.pdf"
    c = _canvas(pdf, "Times-Roman", 10)
    left = ["apple", "archive", "backup", "base", "chunk", "config"]
    right = ["search", "server", "splitter", "table", "token", "vector"]
    pages = [12, 3, 40, 7, 22, 15]
    for i in range(6):
        y = 760 - 14 * i
        c.drawString(60, y, left[i] + " " + ". " * (22 - len(left[i])))
        _right(c, 280, y, str(pages[i]))
        c.drawString(320, y, right[i] + " " + ". " * (22 - len(right[i])))
        _right(c, 540, y, str(pages[5 - i]))
    c.showPage()
    c.save()
    text = _text(pdf)
    assert "|" not in text, text
    assert text.index("config") < text.index("search")  # read column by column


def test_code_in_a_monospace_font_stays_text(tmp_path: Path, backend: str) -> None:
    pdf = tmp_path / "layout.pdf"
    c = _canvas(pdf, "Courier", 9)
    lines = [
        "4        CARD32     ALIAS_LIST_OFFSET",
        "4        CARD32     PARENT_LIST_OFFSET",
        "4        CARD32     LITERAL_LIST_OFFSET",
        "8*N      Entry      ALIASES",
    ]
    for i, line in enumerate(lines):
        c.drawString(72, 760 - 12 * i, line)
    c.showPage()
    c.save()
    text = _text(pdf)
    assert "|" not in text, text
    assert "ALIAS_LIST_OFFSET" in text


def test_a_winansi_soft_hyphen_at_a_line_end_joins_the_word(tmp_path: Path) -> None:
    # reportlab's built-in Helvetica writes U+00AD as WinAnsi 0xAD, with no ToUnicode map:
    # pdfminer read it as a space and left "sepa rated"; pdfium marks it as a line-end hyphen.
    pdf = tmp_path / "shy.pdf"
    c = _canvas(pdf, size=10)
    c.drawString(72, 760, "Keep the parts sepa\u00ad")
    c.drawString(72, 746, "rated until the 2019-")
    c.drawString(72, 732, "2020 season.")
    c.showPage()
    c.save()
    text = _text(pdf)
    assert "separated" in text and "2019-\n2020" in text, text


def test_a_landscape_page_with_rotate_reads_upright(tmp_path: Path, backend: str) -> None:
    from pypdf import PdfReader, PdfWriter

    pdf = tmp_path / "flat.pdf"
    c = _canvas(pdf)
    c.drawString(60, 780, "Licence listing")
    for i, (label, *values) in enumerate(YEARBOOK):
        c.drawString(60, 750 - 14 * i, label)
        for x, v in zip((290, 360, 430), values, strict=True):
            _right(c, x, 750 - 14 * i, v)
    c.showPage()
    c.save()
    # A sideways page: the glyphs run up the paper, and /Rotate turns it back for a viewer.
    writer = PdfWriter()
    writer.add_page(PdfReader(str(pdf)).pages[0])
    writer.pages[0].rotate(90)
    writer.pages[0].transfer_rotation_to_content()
    writer.pages[0].rotate(270)
    turned = tmp_path / "turned.pdf"
    with turned.open("wb") as fh:
        writer.write(fh)
    rows = _table_rows(_text(turned))
    assert rows == [list(r) for r in YEARBOOK], rows


def test_a_header_set_bottom_to_top_reads_forward(tmp_path: Path, backend: str) -> None:
    # Spreadsheet exports turn the headings of narrow columns; pdfplumber read the turned
    # glyphs top to bottom, one word per line: "voters registered of Number".
    pdf = tmp_path / "turned_header.pdf"
    c = _canvas(pdf)
    x0, top, w, head, row = 72, 760, 60, 90, 16
    heads = ["Township", "Number of registered voters", "Ballots cast"]
    rows = [["Alcona", "963", "439"], ["Curtis", "1026", "349"], ["Mikado", "781", "208"]]
    bottom = top - head - row * len(rows)
    for j in range(len(heads) + 1):
        c.line(x0 + j * w, top, x0 + j * w, bottom)
    for y in [top, top - head] + [top - head - row * (i + 1) for i in range(len(rows))]:
        c.line(x0, y, x0 + w * len(heads), y)
    c.setFont("Helvetica", 7)
    for j, text in enumerate(heads):
        c.saveState()
        c.translate(x0 + j * w + w / 2 - 3, top - head + 4)
        c.rotate(90)
        for k, part in enumerate(text.split(" of ") if " of " in text else [text]):
            c.drawString(0, -9 * k, part + (" of" if k == 0 and " of " in text else ""))
        c.restoreState()
    c.setFont("Helvetica", 9)
    for i, cells in enumerate(rows):
        for j, cell in enumerate(cells):
            c.drawString(x0 + j * w + 4, top - head - row * (i + 1) + 5, cell)
    c.showPage()
    c.save()
    table = _table_rows(_text(pdf))
    assert table[0] == ["Township", "Number of registered voters", "Ballots cast"], table
    assert table[1:] == rows


def _ruled_values(c, x0: float, top: float, values: list[list[str]], w: float = 50) -> None:
    h = 16
    for i in range(len(values) + 1):
        c.line(x0, top - i * h, x0 + w * len(values[0]), top - i * h)
    for j in range(len(values[0]) + 1):
        c.line(x0 + j * w, top, x0 + j * w, top - h * len(values))
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            c.drawString(x0 + j * w + 4, top - (i + 1) * h + 5, v)


def test_row_labels_left_of_the_rules_join_their_rows(tmp_path: Path, backend: str) -> None:
    # A spreadsheet export: the label column has no border, the figures are ruled.
    pdf = tmp_path / "labels.pdf"
    c = _canvas(pdf)
    values = [["2019", "2020"], ["963", "439"], ["923", "393"], ["1026", "349"]]
    _ruled_values(c, 160, 760, values)
    for i, label in enumerate(["", "Alcona", "Caledonia", "City Harrisville"]):
        c.drawString(80, 760 - (i + 1) * 16 + 5, label)
    c.drawString(80, 680, "Turnout is counted at the close of polls on election day.")
    c.showPage()
    c.save()
    text = _text(pdf)
    assert _table_rows(text) == [
        ["", "2019", "2020"],
        ["Alcona", "963", "439"],
        ["Caledonia", "923", "393"],
        ["City Harrisville", "1026", "349"],
    ]
    assert "Turnout is counted" in text.split("\n|")[-1]


def test_prose_beside_a_ruled_table_stays_out_of_it(tmp_path: Path, backend: str) -> None:
    pdf = tmp_path / "beside.pdf"
    c = _canvas(pdf)
    values = [["2019", "2020"], ["963", "439"], ["923", "393"], ["1026", "349"]]
    _ruled_values(c, 330, 760, values)
    prose = [
        "The county counts every ballot twice,",
        "once by machine on the night of the",
        "election and once by hand in the week",
        "after, before the board certifies the",
        "result and publishes the figures.",
    ]
    for i, line in enumerate(prose):
        c.drawString(80, 755 - 11 * i, line)
    c.showPage()
    c.save()
    text = _text(pdf)
    assert _table_rows(text) == values, text
    assert "the county counts every ballot twice," in text.lower()


LISTING = [
    ("648765", "AAA", "ALLEGIANT AIR", "7100 TERMINAL DRIVE", "OK"),
    ("648766", "AAA", "ALLEGIANT AIR LLC", "STREET", "OK"),
    ("82030", "AAA", "AMERICAN AIRLINES", "7777 EAST APACHE DRIVE", "OK"),
    ("509462", "BAW", "AMERICAN EAGLE", "WILL ROGERS AIRPORT", "TX"),
    ("79145", "BAW", "DELTA AIR LINES", "BOX 59975", "OK"),
    ("600941", "AAA", "ENDEAVOR AIR", "7100 TERMINAL DRIVE", "OK"),
    ("478482", "BAW", "EXPRESSJET", "WILL ROGERS AIRPORT", "OK"),
    ("505981", "AAA", "SKYWEST AIRLINES", "7100 TERMINAL DRIVE", "KS"),
    ("429754", "AAA", "SOUTHWEST", "7777 EAST APACHE DRIVE", "OK"),
    ("415051", "BAW", "UNITED AIRLINES", "WILL ROGERS AIRPORT", "OK"),
]


def test_a_tightly_set_listing_keeps_its_columns(tmp_path: Path, backend: str) -> None:
    # A licence listing printed from a database: left-aligned columns, some only 3-4 pt
    # (0.4 em) apart, as close as its word spaces; they line up in every row.
    from reportlab.pdfbase.pdfmetrics import stringWidth

    pdf = tmp_path / "listing.pdf"
    c = _canvas(pdf, size=8)
    xs = [40, 40, 40, 40, 40]
    for j, gap in zip(range(1, 5), (3, 12, 4, 12), strict=True):
        xs[j] = xs[j - 1] + max(stringWidth(r[j - 1], "Helvetica", 8) for r in LISTING) + gap
    for i, row in enumerate(LISTING):
        for x, cell in zip(xs, row, strict=True):
            c.drawString(x, 760 - 12 * i, cell)
    c.showPage()
    c.save()
    assert _table_rows(_text(pdf)) == [list(r) for r in LISTING]


def test_a_first_word_shared_by_many_rows_is_no_column(tmp_path: Path, backend: str) -> None:
    # "Domaine de ..." starts most rows, so a word space lines up down the page; the names
    # are one cell all the same.
    pdf = tmp_path / "wines.pdf"
    c = _canvas(pdf, size=9)
    wines = [
        "Domaine de la Guicharde 2016",
        "Domaine de Montvac 2016",
        "Domaine de Beaurenard",
        "Villa Tempora 2014",
        "Domaine de la Florane 2016",
        "Domaine de Joncas 2015",
        "Domaine de Dionysos",
        "Château Léoube 2016",
        "Domaine de Montvac 2017",
        "Domaine Lionnet 2012",
        "Domaine de la Florane 2014",
    ]
    for i, name in enumerate(wines):
        c.drawString(60, 760 - 14 * i, name)
        _right(c, 520, 760 - 14 * i, f"{8 + i % 5} €")
    c.showPage()
    c.save()
    rows = _table_rows(_text(pdf))
    assert [r[0] for r in rows] == wines, rows
    assert all(len(r) == 2 for r in rows)


TYPED = [
    (
        "Table 4. Sampling errors: urban and rural",
        [("Urban", "0.99", "800"), ("Rural", "0.87", "1204")],
    ),
    (
        "Table 5. Sampling errors: by age group",
        [("15-24", "0.42", "512"), ("25-34", "0.51", "498"), ("35-49", "0.47", "994")],
    ),
]


def test_a_typewritten_table_in_a_monospace_font_becomes_a_table(
    tmp_path: Path, backend: str
) -> None:
    # A statistical report typed on a fixed-pitch font: no drawn lines, a rule typed as
    # dashes, dot leaders between the values ("0.99 .......... 800"), a "Design effect" header
    # spanning two columns, and two such tables stacked. Before, any monospace block was code.
    pdf = tmp_path / "typed.pdf"
    c = _canvas(pdf, "Courier", 9)
    y = 780.0
    header = "Variable      Value             N      SE     Deft   Deff    RSE   Cases"
    for title, rows in TYPED:
        typed = [title, "", " " * 45 + "Design effect", header, "-" * 72]
        for i, (label, value, n) in enumerate(rows):
            dots = "." * (12 - len(label))
            values = f"0.01{i}   1.1{i}   1.2{i}   0.02{i}"
            typed.append(f"{label} {dots} {value} .......... {n:>4}   {values}   {n:>5}")
        typed += ["-" * 72, "", ""]
        for line in typed:
            c.drawString(50, y, line)
            y -= 11
    c.drawString(50, y, "Note: standard errors computed by Taylor linearisation.")
    c.showPage()
    c.save()
    text = _text(pdf)
    tables = [t for t in text.split("\n\n") if t.startswith("|")]
    assert len(tables) == 2, text
    for table, (_, rows) in zip(tables, TYPED, strict=True):
        grid = _table_rows(table)
        names = ["Variable", "Value", "N", "SE", "Deft", "Deff", "RSE", "Cases"]
        assert names in grid, table
        spanning = grid[grid.index(names) - 1]
        assert spanning[names.index("Deft")] == "Design effect", table
        body = grid[grid.index(names) + 1 :]
        # The label keeps its leaders (typed as part of it); a value's are filler.
        assert [r[0].rstrip(" .") for r in body] == [label for label, _, _ in rows], table
        assert [r[1:3] for r in body] == [[v, n] for _, v, n in rows], table
        assert [r[-1] for r in body] == [n for _, _, n in rows], table
        assert not any("---" in cell for r in grid for cell in r), table
    assert text.index("Sampling errors: urban") < text.index("| Urban") < text.index("by age")


RATINGS = [
    (["Effectiveness"], "", 0),
    (["Relevance of the objectives to", "national priorities"], "5", 1),
    (["Outputs delivered"], "4", 1),
    (["Processes"], "", 0),
    (["Planning"], "3", 1),
    (["Monitoring and", "evaluation"], "2", 1),
]


@pytest.mark.parametrize("every_row", [True, False], ids=["rule-per-row", "booktabs"])
def test_a_table_ruled_across_only_keeps_wrapped_labels_and_group_rows(
    tmp_path: Path, backend: str, every_row: bool
) -> None:
    # A small label | value table with horizontal rules only (one under every row, or only
    # over and under the header and at the end), indented row labels, group rows that hold
    # no value, and labels wrapped over two lines. Before, each wrapped line was a row, and
    # the last one ("evaluation") fell out of the table.
    pdf = tmp_path / "ratings.pdf"
    c = _canvas(pdf, "Helvetica-Bold", 10)
    c.drawString(72, 780, "Table 2. Assessment of the programme")
    c.setLineWidth(0.5)
    y = 770.0
    c.line(72, y, 300, y)
    c.setFont("Helvetica-Bold", 9)
    c.drawString(76, y - 12, "Criterion")
    _right(c, 294, y - 12, "Score")
    y -= 17
    c.line(72, y, 300, y)
    c.setFont("Helvetica", 9)
    for k, (lines, value, indent) in enumerate(RATINGS):
        for j, line in enumerate(lines):
            c.drawString(76 + 12 * indent, y - 12 - 11 * j, line)
        if value:
            _right(c, 294, y - 12, value)
        y -= 6 + 11 * len(lines)
        if every_row or k == len(RATINGS) - 1:
            c.line(72, y, 300, y)
    c.setFont("Helvetica", 10)
    c.drawString(72, y - 24, "Scores run from 1 (weak) to 6 (excellent); the annex has the scale.")
    c.showPage()
    c.save()
    text = _text(pdf)
    assert _table_rows(text) == [
        ["Criterion", "Score"],
        *[[" ".join(lines), value] for lines, value, _ in RATINGS],
    ], text
    assert text.index("Table 2.") < text.index("| Criterion") < text.index("Scores run")


def test_two_blocks_side_by_side_of_unequal_length_are_two_tables(
    tmp_path: Path, backend: str
) -> None:
    # A list of numbers continued in a second block to its right, which ends four rows
    # earlier: two tables. A wide gutter alone (a label column set far from its values)
    # does not split a table.
    pdf = tmp_path / "blocks.pdf"
    c = _canvas(pdf, size=10)
    for i in range(12):
        y = 760 - 14 * i
        _right(c, 90, y, str(i + 1))
        _right(c, 140, y, str(100 + i))
        _right(c, 190, y, str(200 + i))
        if i < 8:
            _right(c, 320, y, str(i + 13))
            _right(c, 370, y, str(112 + i))
            _right(c, 420, y, str(212 + i))
    c.showPage()
    c.save()
    tables = [t for t in _text(pdf).split("\n\n") if t.startswith("|")]
    assert len(tables) == 2, tables
    left, right = (_table_rows(t) for t in tables)
    assert left[-1] == ["12", "111", "211"] and len(left) == 12, tables[0]
    assert right[0] == ["13", "112", "212"] and len(right) == 8, tables[1]


def test_a_last_column_without_its_closing_rule_joins_its_rows(
    tmp_path: Path, backend: str
) -> None:
    # A table without an outer frame: the last column has no rule on its right, so the
    # lattice grid ends one column early; its header spans two rows of the grid.
    pdf = tmp_path / "frameless.pdf"
    c = _canvas(pdf)
    values = [["Crop", "2012"], ["Cotton", "1393"], ["Rice", "2426"], ["Wheat", "2166"]]
    _ruled_values(c, 100, 760, values, w=70)
    for i, v in enumerate(["Change", "(35,8)", "(1,3)", "(12,5)"]):
        c.drawString(100 + 2 * 70 + 4, 760 - (i + 1) * 16 + 5, v)
    for i in range(len(values) + 1):
        c.line(100, 760 - 16 * i, 100 + 3 * 70, 760 - 16 * i)
    c.showPage()
    c.save()
    text = _text(pdf)
    assert _table_rows(text) == [
        [*row, v] for row, v in zip(values, ["Change", "(35,8)", "(1,3)", "(12,5)"], strict=True)
    ], text
