"""``import bindscope`` and the generator namespaces are light: no h5py, torch, bpy or jsonschema (nor numpy,
numba, scipy or matplotlib) until a call needs them."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("h5py", "torch", "bpy", "jsonschema", "numpy", "numba", "scipy", "matplotlib", "open_clip", "PIL")


def _loaded_after(code: str) -> list[str]:
    script = f"import sys\n{code}\nimport json\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def test_import_and_generator_namespaces_load_nothing_heavy():
    assert _loaded_after("import bindscope; bindscope.madman; bindscope.comco; bindscope.labclip") == []


def test_the_command_line_loads_nothing_heavy_for_help():
    assert _loaded_after("from bindscope.cli.main import madman, comco, bindscope") == []


def test_a_call_loads_what_it_needs():
    assert "h5py" in _loaded_after("import bindscope; bindscope.Dataset")
