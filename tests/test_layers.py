"""Layer order and import cycles, read from the source (every import statement, including those inside
functions). Each folder of the package is one layer:

    errors, limits, config, schemas, assets  <- io, text  <- format  <- build  <- publish  <- generators, importers
        <- encoders  <- evaluation  <- training, alignment  <- cli

A module never imports one of a higher layer (no import statement, and no module path of a higher layer in a
string either), and the import graph has no cycle. The ``bindscope`` package itself holds ``__version__``
(imported everywhere) and re-exports the public API lazily (module ``__getattr__``), without import
statements: it is layer 0 and may import nothing of bindscope."""

from __future__ import annotations

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "bindscope"
LAYERS = {"errors": 0, "limits": 0, "config": 0, "schemas": 0, "assets": 0, "io": 1, "text": 1, "format": 2, "build": 3,
          "publish": 4, "generators": 5, "importers": 5, "encoders": 6, "evaluation": 7, "training": 8, "alignment": 8, "cli": 9}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("bindscope"):
                names = [f"{node.module}.{a.name}" for a in node.names]
                targets.update(n if n in modules else node.module for n in names)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.startswith("bindscope"))
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def layer(module: str) -> int:
    parts = module.split(".")
    return 0 if len(parts) == 1 else LAYERS[parts[1]]


def test_every_module_has_a_layer():
    assert all(isinstance(layer(m), int) for m in _imports())


def test_the_package_facade_imports_nothing():
    assert _imports()["bindscope"] == set()


def test_lower_layers_never_import_higher_ones():
    upward = sorted(f"{m} -> {t}" for m, targets in _imports().items() for t in targets if layer(t) > layer(m))
    assert upward == []


def test_no_import_cycles():
    try:
        tuple(TopologicalSorter(_imports()).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None


def test_no_pickle_anywhere():
    """Nothing read from a dataset, part folder or checkpoint may execute code: no module calls pickle
    (or its wrappers) to load or dump anything (catching pickle.UnpicklingError from torch is fine), and every
    torch.load passes weights_only=True."""
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and getattr(node.value, "id", "") in ("pickle", "dill", "cloudpickle"):
                assert node.attr not in ("load", "loads", "dump", "dumps", "Unpickler", "Pickler"), \
                    f"{path}:{node.lineno}"
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "load" and \
                    getattr(node.func.value, "id", "") == "torch":
                assert any(k.arg == "weights_only" and getattr(k.value, "value", None) is True
                           for k in node.keywords), f"{path}:{node.lineno}"


BLENDER_MODULES = ("bpy", "bmesh", "mathutils")
BLENDER_DOOR = ROOT / "generators" / "comco" / "blender" / "runtime.py"


def test_blender_modules_are_imported_through_one_module():
    """bpy, bmesh and mathutils are imported in generators/comco/blender/runtime.py only; the rest of the
    Blender package gets them from it. Outside that package only the ComCO generator (its session) and
    the asset calls (the importer) use it, inside functions, so planning code never loads Blender."""
    found = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] in BLENDER_MODULES for n in names):
                found.append(path.relative_to(ROOT).as_posix())
    assert sorted(set(found)) == [BLENDER_DOOR.relative_to(ROOT).as_posix()]
    outside = sorted(m for m, targets in _imports().items() for t in targets
                     if t.startswith("bindscope.generators.comco.blender")
                     and not m.startswith("bindscope.generators.comco.blender"))
    assert outside == ["bindscope.generators.comco.asset_api", "bindscope.generators.comco.generator"]
    for name in outside:  # only inside functions: importing the module loads no Blender code
        path = ROOT.parent / (name.replace(".", "/") + ".py")
        top = [n for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, ast.ImportFrom)]
        assert not any((n.module or "").startswith("bindscope.generators.comco.blender") for n in top), name


def test_no_upward_import_hidden_in_a_string():
    """A module path of a higher layer in a string constant (``"bindscope.training.checkpoint:load"``) is an
    import in disguise; plug-ins of higher layers register through entry points (pyproject.toml) instead.
    Docstrings may name any module."""
    found = []
    for name in _imports():
        if name == "bindscope":
            continue  # the facade's lazy export table
        path = ROOT.parent / (name.replace(".", "/") + ("/__init__.py" if name.count(".") == 0 or
                              (ROOT.parent / name.replace(".", "/")).is_dir() else ".py"))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                for match in re.finditer(r"\bbindscope\.([a-z_]+)\.[a-z_.]+", node.value):
                    if match.group(1) in LAYERS and LAYERS[match.group(1)] > layer(name):
                        found.append(f"{name}: {match.group(0)}")
    assert found == []
