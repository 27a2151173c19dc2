"""Rules about bases (``operations/bases.py``): defaults, compensation, model-field refusal."""

from __future__ import annotations

import shutil

import pytest

from knowbase.errors import InvalidInput
from knowbase.operations.bases import base_defaults
from knowbase.pipeline.indexing.chunking import chunk_settings_for_window
from knowbase.pipeline.processing import tesseract_available
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


def test_defaults_follow_the_window_and_keep_what_was_given() -> None:
    size, overlap = chunk_settings_for_window(256)
    assert base_defaults(256, {}) == {
        "chunk_size": size,
        "chunk_overlap": overlap,
        "file_processor_id": "tesseract" if tesseract_available() else None,
    }
    given = {"chunk_size": 500, "chunk_overlap": 7, "file_processor_id": None}
    assert base_defaults(256, given) == given


def test_default_overlap_stays_below_a_small_given_size() -> None:
    _, overlap = chunk_settings_for_window(None)
    assert overlap > 3  # else this test says nothing
    assert base_defaults(None, {"chunk_size": 4, "file_processor_id": None})["chunk_overlap"] == 3


def test_create_that_fails_after_the_row_leaves_no_base(kb: Knowledge) -> None:
    """The directory cannot be made (bases/ is a file): the row written first is removed."""
    bases_dir = kb.settings.bases_dir
    shutil.rmtree(bases_dir)
    bases_dir.write_text("not a folder", encoding="utf-8")
    with pytest.raises(OSError):
        kb.create_base("doomed", file_processor_id=None)
    assert kb.list_bases() == []
    bases_dir.unlink()
    bases_dir.mkdir()
    assert kb.create_base("doomed", file_processor_id=None).name == "doomed"  # the name is free


@pytest.mark.parametrize("field", ["embedding_model_id", "dimensions", "status", "error"])
def test_update_refuses_what_only_enable_embedding_may_set(kb: Knowledge, field: str) -> None:
    base = kb.create_base("b", file_processor_id=None)
    with pytest.raises(InvalidInput, match="enable_embedding_model"):
        kb.update_base(base.id, **{field: None})
    assert kb.update_base(base.id, threshold=0.5).threshold == 0.5
