"""Where the MiniLM ONNX export lives and when it is made anew (no model is loaded here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from knowbase.errors import ProviderUnavailable
from knowbase.providers import minilm_onnx


def fake_model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights v1")
    return folder


def test_one_folder_per_weights_file_and_runtime_version(tmp_path: Path) -> None:
    model = fake_model(tmp_path / "model")
    root = tmp_path / "cache"
    first = minilm_onnx.export_dir(model, "1.20.0", root)
    assert first.parent == root and first == minilm_onnx.export_dir(model, "1.20.0", root)
    assert minilm_onnx.export_dir(model, "1.21.0", root) != first  # an upgraded runtime
    weights = model / "model.safetensors"
    weights.write_bytes(b"weights v2")  # a reinstalled package: new size and mtime
    os.utime(weights, ns=(1, 1))
    assert minilm_onnx.export_dir(model, "1.20.0", root) != first


def test_the_cache_follows_knowbase_model_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KNOWBASE_MODEL_CACHE", str(tmp_path / "models"))
    assert minilm_onnx.cache_root() == tmp_path / "models"
    monkeypatch.delenv("KNOWBASE_MODEL_CACHE")
    assert minilm_onnx.cache_root().parts[-2:] == ("knowbase", "models")


def test_an_unwritable_cache_is_a_provider_error_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxruntime")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("KNOWBASE_MODEL_CACHE", str(blocker / "models"))
    with pytest.raises(ProviderUnavailable) as info:
        minilm_onnx.ensure_exported(fake_model(tmp_path / "model"))
    assert info.value.hint == "set KNOWBASE_MODEL_CACHE to a writable folder"
    assert not (blocker.parent / "models").exists()
