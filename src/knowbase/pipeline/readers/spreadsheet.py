"""Workbooks (xlsx, xls, xlsb, ods) → one Markdown table per sheet, located ``{"sheet": name}``.

python-calamine reads all four formats, recovers workbooks xlrd rejects, and reports password
protection as its own error (DESIGN.md). Zip-based workbooks pass the zip-bomb guard first.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from knowbase.errors import EncryptedFile, UnreadableFile
from knowbase.pipeline.documents import Document
from knowbase.pipeline.readers.sniff import check_zip
from knowbase.pipeline.readers.text import table_documents

_MAX_CELLS = 5_000_000  # per workbook; beyond this the sheet is data, not reading material


def read_spreadsheet(path: Path) -> list[Document]:
    """One document per non-empty sheet, in workbook order."""
    import python_calamine as cal

    if path.suffix.lower() in (".xlsx", ".xlsb", ".ods"):
        check_zip(path).close()
    try:
        wb = cal.CalamineWorkbook.from_path(str(path))
    except cal.PasswordError as exc:
        raise EncryptedFile(
            f"{path.name} is a password-protected workbook", path=str(path)
        ) from exc
    except (cal.CalamineError, cal.ZipError, cal.XmlError, ValueError, OSError) as exc:
        raise _corrupt(path, exc) from exc
    except Exception as exc:  # calamine maps some Rust errors to bare exceptions
        raise _corrupt(path, exc) from exc
    docs: list[Document] = []
    cells = 0
    try:
        for name in wb.sheet_names:
            rows = wb.get_sheet_by_name(name).to_python(skip_empty_area=True)
            cells += sum(len(r) for r in rows)
            if cells > _MAX_CELLS:
                raise UnreadableFile(
                    f"{path.name} has more than {_MAX_CELLS} cells; split it or export the "
                    "sheets you need as CSV",
                    path=str(path),
                    reason="too_many_cells",
                )
            # In blocks with the header repeated, like CSV: one 28 MB table document cost the
            # chunker ~500 MB (issue 41).
            docs += table_documents(
                lambda rows=rows: ([_fmt(v) for v in row] for row in rows),
                locator={"sheet": name},
                name=path.name,
            )
    except (EncryptedFile, UnreadableFile):
        raise
    except cal.PasswordError as exc:
        raise EncryptedFile(
            f"{path.name} is a password-protected workbook", path=str(path)
        ) from exc
    except Exception as exc:
        raise _corrupt(path, exc) from exc
    finally:
        close = getattr(wb, "close", None)
        if close is not None:
            close()
    return docs


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        # calamine returns every number as float; 3.0 in a cell was typed as 3.
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ") if value.time() != dt.time() else value.date().isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    return str(value)


def _corrupt(path: Path, exc: BaseException) -> UnreadableFile:
    return UnreadableFile(
        f"{path.name} is not a readable workbook: {exc}", path=str(path), reason="corrupt"
    )
