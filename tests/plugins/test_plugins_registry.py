"""The generic plug-in registry (issue 39 item 1): one `kgprobe.plugins.Registry` per extension
kind. What measures and backends rely on, checked on a registry of its own: decorator and lookup,
lazy "module:attr" entries imported on first use, the base-class check, a taken name naming
both entries, the origin of a plug-in's entries, and the listing."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgprobe import plugins
from kgprobe.errors import ConfigError, PluginError
from kgprobe.plugins import KINDS, Registry


class Shape:
    """A made-up extension kind."""

    name = ""


@pytest.fixture()
def reg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry[type[Shape]]]:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(plugins.ENV_PLUGINS, raising=False)
    r: Registry[type[Shape]] = Registry("shape", plugins.MEASURES, Shape)
    yield r
    KINDS.pop("shape", None)
    for mod in ("lazy_shapes", "broken_shapes", "plugin_shapes"):
        sys.modules.pop(mod, None)


def test_decorator_lookup_and_listing(reg: Registry[type[Shape]]) -> None:
    @reg.register
    class Square(Shape):
        """Four equal sides. And right angles."""

        name = "square"

    @reg.register("disc")
    class Circle(Shape):
        """Round."""

    assert list(reg) == ["square", "disc"] and reg.lookup("disc") is Circle and "square" in reg
    assert [(e.name, e.description) for e in reg.entries()] == [
        ("square", "Four equal sides."), ("disc", "Round.")]
    with pytest.raises(ConfigError, match=r"^unknown shape 'hexagon'; choose from: square, disc$"):
        reg.lookup("hexagon")
    with pytest.raises(TypeError, match=r"shape name 'square' of .*Other is taken by the shape .*Square"):
        @reg.register
        class Other(Shape):
            name = "square"
    with pytest.raises(TypeError, match=r"is not a subclass of .*Shape"):
        reg.register("str")(str)
    assert reg.pop("disc") is Circle and list(reg) == ["square"]


def test_lazy_entries_are_imported_on_first_use(reg: Registry[type[Shape]], tmp_path: Path) -> None:
    (tmp_path / "lazy_shapes.py").write_text(
        "from test_plugins_registry import Shape\n\n\nclass Tri(Shape):\n    \"\"\"Three sides.\"\"\"\n")
    (tmp_path / "broken_shapes.py").write_text("raise RuntimeError('no shapes today')\n")
    reg.add_lazy("triangle", "lazy_shapes:Tri", "three sides")
    reg.add_lazy("broken", "broken_shapes:Gone", "")
    assert "triangle" in reg and "lazy_shapes" not in sys.modules  # listed, not imported
    assert [e.target for e in reg.entries()] == ["lazy_shapes:Tri", "broken_shapes:Gone"]
    assert "lazy_shapes" not in sys.modules
    tri = reg.lookup("triangle")
    assert tri.__name__ == "Tri" and "lazy_shapes" in sys.modules and tri.name == ""
    with pytest.raises(PluginError, match=r"^shape broken \(broken_shapes:Gone\): RuntimeError: no shapes today$"):
        reg.lookup("broken")


def test_a_plugin_entry_records_where_it_came_from(reg: Registry[type[Shape]], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "plugin_shapes.py").write_text(
        "from test_plugins_registry import Shape\n\n\n"
        "class Star(Shape):\n    \"\"\"Pointy.\"\"\"\n    name = 'star'\n\n\n"
        "import kgprobe.plugins\nkgprobe.plugins.KINDS['shape'].register(Star)\n")
    monkeypatch.setenv(plugins.ENV_PLUGINS, "plugin_shapes")
    plugins._loaded.clear()
    try:
        star = reg.lookup("star")
        assert reg.origin("star") == reg.origin_of(star) == "module plugin_shapes (KGPROBE_PLUGINS)"
        assert [e.origin for e in reg.entries()] == ["module plugin_shapes (KGPROBE_PLUGINS)"]
    finally:
        plugins._loaded.clear()


def test_the_contract_of_a_kind_is_checked_before_anything_is_registered() -> None:
    """``requires`` and ``overrides``: one form for every kind (they were a ``_check_*``
    function per module): an attribute left empty or a method left to the base is a TypeError
    naming the kind, the class and what is missing, and nothing is registered."""

    class Solid:
        summary = ""

        def volume(self) -> float:
            raise NotImplementedError

    r: Registry[type[Solid]] = Registry("solid", plugins.MEASURES, Solid, name_attr=None,
                                        requires=("summary",), overrides=("volume",))
    try:
        class Blank(Solid):
            def volume(self) -> float:
                return 1.0

        class Lazy(Solid):
            summary = "a cube that never says its volume"

        class Cube(Solid):
            summary = "six square faces"

            def volume(self) -> float:
                return 8.0

        with pytest.raises(TypeError, match=r"^solid Blank has no summary$"):
            r.add("blank", Blank)
        with pytest.raises(TypeError, match=r"^solid Lazy has no volume\(\)$"):
            r.add("lazy", Lazy)
        assert list(r) == []
        r.add("cube", Cube)
        assert list(r) == ["cube"] and r["cube"]().volume() == 8.0
    finally:
        KINDS.pop("solid", None)
