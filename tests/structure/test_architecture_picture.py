"""docs/images/architecture.svg is what scripts/make_architecture_picture.py makes from today's modules,
and that script refuses a stage whose owning module or symbol is gone."""

import importlib.util
from types import ModuleType

import pytest

from tests.conftest import REPO_ROOT
from tests.structure.import_graph import project_modules


def _load_script() -> ModuleType:
    path = REPO_ROOT / "scripts" / "make_architecture_picture.py"
    spec = importlib.util.spec_from_file_location("make_architecture_picture", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PICTURE = _load_script()


def test_committed_picture_is_current() -> None:
    committed = (REPO_ROOT / "docs" / "images" / "architecture.svg").read_text()
    assert committed == PICTURE.render_svg(), "run: python scripts/make_architecture_picture.py"


def test_every_room_of_the_product_is_in_the_picture() -> None:
    rooms = {PICTURE._room(name) for name in project_modules() if name not in ("run_stream", "streamer")}
    assert None not in rooms


def test_a_stage_whose_owner_is_gone_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = PICTURE.Stage("vanished", "streamer.realtime.mailbox:NoSuchMailbox", "worker")
    monkeypatch.setattr(PICTURE, "FRAME_PATH", (*PICTURE.FRAME_PATH, gone))
    with pytest.raises(SystemExit, match="NoSuchMailbox"):
        PICTURE.check_stages(project_modules())
