"""The package's public face: what ``from knowbase import …`` offers, pinned."""

from __future__ import annotations

import inspect
import subprocess
import sys

import knowbase
from knowbase import errors

FACADE = {"Knowledge", "AddInput", "Settings", "load_settings"}


def test_all_is_the_facade_and_every_error_class():
    error_classes = {
        name
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, errors.KnowbaseError)
    }
    assert set(knowbase.__all__) == FACADE | error_classes
    assert len(knowbase.__all__) == len(set(knowbase.__all__))


def test_every_name_in_all_resolves_to_its_defining_object():
    from knowbase.operations.add.inputs import AddInput
    from knowbase.service import Knowledge
    from knowbase.settings import Settings, load_settings

    assert knowbase.Knowledge is Knowledge and knowbase.AddInput is AddInput
    assert knowbase.Settings is Settings and knowbase.load_settings is load_settings
    for name in knowbase.__all__:
        assert getattr(knowbase, name) is not None


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
