"""The package's public face: what ``from knowbase import …`` offers, pinned."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import knowbase
from knowbase import errors

FACADE = {"Knowledge", "Settings", "load_settings"}
#: What the facade takes and returns, the base settings' declaration, the limits it enforces and
#: the rules it applies to what it takes, the formats it reads and a hit's matched spans: what
#: the surfaces import from the face (issue 38), each from the module that defines it.
EXPORTS = {
    "AddInput": "knowbase.operations.add.inputs",
    "AddResult": "knowbase.operations.add.workflow",
    "ConflictStrategy": "knowbase.conflict_strategy",
    "STRATEGIES": "knowbase.conflict_strategy",
    "DEFAULT_STRATEGY": "knowbase.conflict_strategy",
    "Base": "knowbase.catalog.models",
    "Item": "knowbase.catalog.models",
    "Principal": "knowbase.catalog.models",
    "OPEN": "knowbase.catalog.models",
    "Job": "knowbase.jobs.model",
    "SearchResponse": "knowbase.search.search",
    "SearchResult": "knowbase.search.search",
    "BaseSetting": "knowbase.catalog.base_settings",
    "BASE_SETTINGS": "knowbase.catalog.base_settings:SETTINGS",
    "BATCH_MAX": "knowbase.operations.add.inputs",
    "NOTE_MAX_CHARS": "knowbase.operations.add.inputs",
    "MAX_QUERY_CHARS": "knowbase.search.search",
    "MAX_DIMENSIONS": "knowbase.providers.base",
    "validate_input": "knowbase.operations.add.inputs:validate",
    "resolve_local": "knowbase.operations.add.inputs",
    "sanitize_filename": "knowbase.files.naming",
    "is_readable": "knowbase.pipeline.readers",
    "parse_url": "knowbase.pipeline.sources.ssrf",
    "check_url": "knowbase.pipeline.sources.ssrf",
    "FORMATS": "knowbase.pipeline.readers.formats",
    "TEXT_NAMES": "knowbase.pipeline.readers.formats",
    "mark_spans": "knowbase.search.snippet",
    "passage": "knowbase.search.snippet",
}


def test_all_is_the_facade_and_every_error_class():
    error_classes = {
        name
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, errors.KnowbaseError)
    }
    assert set(knowbase.__all__) == FACADE | set(EXPORTS) | error_classes
    assert len(knowbase.__all__) == len(set(knowbase.__all__))


def test_every_name_in_all_resolves_to_its_defining_object():
    from knowbase.operations.add.inputs import AddInput
    from knowbase.service import Knowledge
    from knowbase.settings import Settings, load_settings

    assert knowbase.Knowledge is Knowledge and knowbase.AddInput is AddInput
    assert knowbase.Settings is Settings and knowbase.load_settings is load_settings
    for name in knowbase.__all__:
        assert getattr(knowbase, name) is not None
    for name, where in EXPORTS.items():
        module, _, attribute = where.partition(":")
        defined = getattr(importlib.import_module(module), attribute or name)
        assert getattr(knowbase, name) is defined, name


def test_unknown_attribute_is_an_attribute_error():
    try:
        knowbase.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:  # pragma: no cover - the assertion is the point
        raise AssertionError("knowbase.NoSuchThing resolved")


def test_import_knowbase_loads_no_facade_until_asked():
    code = (
        "import sys, knowbase\n"
        "print('knowbase.service' in sys.modules, 'sqlalchemy' in sys.modules)\n"
        "from knowbase import Knowledge\n"
        "print('knowbase.service' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True"]


def test_a_name_the_surfaces_take_loads_its_own_module_only():
    """``kb --help`` takes the base settings' declaration and the snippet marks from the face:
    neither may load the facade, nor a data class the URL rules' HTTP client."""
    code = (
        "import sys\n"
        "from knowbase import BASE_SETTINGS, Base, Job, mark_spans\n"
        "print('knowbase.service' in sys.modules, 'httpx' in sys.modules)\n"
        "from knowbase import check_url\n"
        "print('httpx' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True"]
