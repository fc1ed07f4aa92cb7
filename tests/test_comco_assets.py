"""ComCO/SimCO object registry, procedural models (real bpy) and `comco assets` commands."""

from __future__ import annotations

import shutil

import pytest

from bindscope.errors import BadInput
from bindscope.generators.comco.registry import (
    SIMCO_COLOURS,
    Category,
    builtin_entries,
    category_by_name,
    load_set,
    size_class_for,
)

# COCO 2017 detection categories: the 80 valid ids (1..90 with 10 gaps).
COCO_IDS = set(range(1, 91)) - {12, 26, 29, 30, 45, 66, 68, 69, 71, 83}
SIMCO_NAMES = ["cube", "sphere", "cylinder", "mug", "pentagon", "heart", "cone", "pyramid", "diamond", "moon",
               "cross", "snowflake", "leaf", "arrow", "star", "torus", "pot", "cap"]


def test_registry_counts_and_ids():
    comco = load_set("comco72")
    simco = load_set("simco18")
    assert len(comco) == 72 and len(simco) == 18
    assert len(COCO_IDS) == 80
    ids = [c.id for c in comco]
    assert len(set(ids)) == 72 and set(ids) <= COCO_IDS
    assert len({c.name for c in comco}) == 72
    assert [c.name for c in simco] == SIMCO_NAMES
    assert [c.id for c in simco] == list(range(18))
    assert all(isinstance(c, Category) and c.source == "procedural" for c in comco + simco)


def test_registry_known_entries_and_size_classes():
    pizza = category_by_name("comco72", "pizza")
    assert (pizza.id, pizza.size_class) == (59, "small")
    assert category_by_name("comco72", "traffic light").id == 10
    assert category_by_name("comco72", "toothbrush").id == 90
    assert category_by_name("comco72", "bus").size_class == "large"
    assert category_by_name("comco72", "chair").size_class == "medium"
    # size class follows the nominal size with the documented boundaries (car 4.5 m, school bag 0.45 m)
    for c in load_set("comco72"):
        assert c.size_class == size_class_for(c.nominal_size_m)
    classes = [c.size_class for c in load_set("comco72")]
    assert (classes.count("large"), classes.count("medium"), classes.count("small")) == (7, 34, 31)
    assert size_class_for(4.5) == "medium" and size_class_for(4.51) == "large" and size_class_for(0.44) == "small"
    assert {c.size_class for c in load_set("simco18")} == {"shape"}
    assert all(e["colour"] in SIMCO_COLOURS and e["material"] in ("rubber", "metal")
               for e in builtin_entries("simco18"))


def test_left_out_categories_are_documented():
    import json
    from importlib import resources

    data = json.loads(resources.files("bindscope.assets").joinpath("comco72.json").read_text())
    left_out = data["left_out"]
    assert len(left_out) == 8
    names = {c.name for c in load_set("comco72")}
    assert not names & set(left_out)
    assert "person" in left_out


def test_load_set_rejects_unknown(tmp_path):
    with pytest.raises(BadInput, match="allowed: comco72, simco18"):
        load_set("coco80")
    with pytest.raises(BadInput, match="registry.json"):
        load_set(str(tmp_path))
    with pytest.raises(BadInput, match="'unicorn' is not in set 'comco72'"):
        category_by_name("comco72", "unicorn")


# ----------------------------------------------------------------------------------------------- models (real bpy)


@pytest.mark.blender
@pytest.mark.parametrize("set_name", ["simco18", "comco72"])
def test_build_model_is_one_normalised_object(set_name):
    import bpy
    from mathutils import Vector

    from bindscope.generators.comco.blender.models import build_model

    for category in load_set(set_name):
        bpy.ops.wm.read_factory_settings(use_empty=True)
        obj = build_model(category, set_name)
        scene_objects = list(bpy.context.scene.objects)
        assert scene_objects == [obj], category.name
        assert obj.type == "MESH" and obj.name == category.name
        assert tuple(obj.location) == (0, 0, 0) and tuple(obj.scale) == (1, 1, 1)
        assert len(obj.data.polygons) > 0 and len(obj.data.materials) >= 1
        corners = [Vector(c) for c in obj.bound_box]
        low = [min(c[i] for c in corners) for i in range(3)]
        high = [max(c[i] for c in corners) for i in range(3)]
        dims = [h - lo for h, lo in zip(high, low)]
        assert max(dims) == pytest.approx(1.0, abs=1e-5), category.name
        assert low[2] == pytest.approx(0.0, abs=1e-6), category.name  # resting on z = 0
        assert (low[0] + high[0]) / 2 == pytest.approx(0.0, abs=1e-5), category.name  # origin at the base centre
        assert (low[1] + high[1]) / 2 == pytest.approx(0.0, abs=1e-5), category.name
        # every face carries a material of the model, and every material slot is used
        used = {p.material_index for p in obj.data.polygons}
        assert used == set(range(len(obj.data.materials))), category.name


@pytest.mark.blender
def test_simco_colour_and_material_overrides():
    import bpy

    from bindscope.generators.comco.blender.models import build_model, hex_to_linear

    bpy.ops.wm.read_factory_settings(use_empty=True)
    cube = category_by_name("simco18", "cube")
    obj = build_model(cube, "simco18", colour="red", material="metal")
    material = obj.data.materials[0]
    bsdf = material.node_tree.nodes["Principled BSDF"]
    assert bsdf.inputs["Metallic"].default_value == 1.0
    expected = hex_to_linear("#ad2323")  # CLEVR red (173, 35, 35)
    assert tuple(bsdf.inputs["Base Color"].default_value) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(BadInput, match="allowed: gray, red, blue"):
        build_model(cube, "simco18", colour="magenta")
    with pytest.raises(BadInput, match="allowed: rubber, metal"):
        build_model(cube, "simco18", material="glass")
    with pytest.raises(BadInput, match="simco18 shapes only"):
        build_model(category_by_name("comco72", "pizza"), "comco72", colour="red")


# ----------------------------------------------------------------------------------------------- import (real bpy)


def _export_models(folder):
    """Write a two-part model (a 2 m cube with a 2 m cone on top, 4 m tall, raised 5 m) as GLB and OBJ."""
    import bmesh
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    for name, build, z in (("base", lambda bm: bmesh.ops.create_cube(bm, size=2), 5.0),
                           ("top", lambda bm: bmesh.ops.create_cone(bm, cap_ends=True, segments=8, radius1=1,
                                                                   radius2=0, depth=2), 7.0)):
        mesh = bpy.data.meshes.new(name)
        bm = bmesh.new()
        build(bm)
        bm.to_mesh(mesh)
        bm.free()
        material = bpy.data.materials.new(name)
        mesh.materials.append(material)
        obj = bpy.data.objects.new(name, mesh)
        obj.location = (3.0, -2.0, z)
        bpy.context.scene.collection.objects.link(obj)
    bpy.ops.export_scene.gltf(filepath=str(folder / "pizza.glb"))
    bpy.ops.wm.obj_export(filepath=str(folder / "tower.obj"))
    bpy.ops.wm.read_factory_settings(use_empty=True)


@pytest.mark.blender
def test_import_gltf_and_obj_then_build(tmp_path):
    import bpy
    from click.testing import CliRunner

    from bindscope.cli.main import comco
    from bindscope.generators.comco.blender.models import build_model

    models = tmp_path / "models_in"
    models.mkdir()
    _export_models(models)
    (models / "mapping.yaml").write_text("tower.obj: {category: lighthouse, licence: CC0-1.0 (test), "
                                         "nominal_size_m: 20}\n")
    out = tmp_path / "assets"
    result = CliRunner().invoke(comco, ["assets", "import", str(models), "--out", str(out),
                                        "--licence", "CC-BY-4.0 (tester)"])
    assert result.exit_code == 0, result.output
    import bindscope  # the library call behind the command writes the same registry and model files (the .blend
    # bytes differ between two imports of the same models: Blender's save; only their names are compared)

    shutil.move(out, tmp_path / "assets-cli")
    registry = bindscope.comco.import_assets(models, out, licence="CC-BY-4.0 (tester)", progress=False)
    assert (out / "registry.json").read_bytes() == (tmp_path / "assets-cli" / "registry.json").read_bytes()
    assert sorted(p.name for p in (out / "models").iterdir()) == ["lighthouse.blend", "pizza.blend"]
    assert sorted(p.name for p in (tmp_path / "assets-cli" / "models").iterdir()) == ["lighthouse.blend", "pizza.blend"]
    assert [e["name"] for e in registry["categories"]] == ["lighthouse", "pizza"]
    categories = load_set(str(out))
    assert [(c.name, c.id, c.size_class, c.nominal_size_m, c.source, c.licence) for c in categories] == [
        ("lighthouse", 0, "large", 20.0, "tower.obj", "CC0-1.0 (test)"),
        ("pizza", 1, "small", 0.3, "pizza.glb", "CC-BY-4.0 (tester)"),  # size taken from comco72
    ]
    import json

    registry = json.loads((out / "registry.json").read_text())
    for entry in registry["categories"]:
        assert entry["imported_dimensions"] == pytest.approx([2.0, 2.0, 4.0], abs=1e-4)  # cube + cone, upright
        assert len(entry["sha256"]) == 64 and (out / entry["file"]).is_file()
    bpy.ops.wm.read_factory_settings(use_empty=True)
    for category in categories:
        obj = build_model(category, str(out))
        assert obj.type == "MESH"
        zs = [v.co.z for v in obj.data.vertices]
        xs = [v.co.x for v in obj.data.vertices]
        assert tuple(obj.dimensions) == pytest.approx((0.5, 0.5, 1.0), abs=1e-5)  # the two parts joined, scaled
        assert min(zs) == pytest.approx(0.0, abs=1e-6)
        assert (min(xs) + max(xs)) / 2 == pytest.approx(0.0, abs=1e-6)
        assert len(obj.data.materials) == 2
    listing = CliRunner().invoke(comco, ["assets", "list", str(out)])
    assert listing.exit_code == 0 and "lighthouse" in listing.output and "CC0-1.0 (test)" in listing.output
    assert "comco72 categories without a model here (71)" in listing.output


@pytest.mark.blender
@pytest.mark.parametrize("name,content", [("broken.glb", b"this is not a glTF file"),
                                          ("empty.obj", b"v 1 2 3\n# a vertex and no face\n")])
def test_corrupt_asset_file_exits_2_naming_the_file(tmp_path, name, content):
    import bpy  # noqa: F401 - fail, never skip, when bpy is missing
    from click.testing import CliRunner

    from bindscope.cli.main import comco

    models = tmp_path / "in"
    models.mkdir()
    _export_models(models)
    (models / name).write_bytes(content)
    out = tmp_path / "assets"
    result = CliRunner().invoke(comco, ["assets", "import", str(models), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "Error:" in result.output and name in result.output
    assert not out.exists()  # nothing half-written
    assert [p.name for p in tmp_path.iterdir()] == ["in"]  # and no staging folder left behind


def test_import_rejects_bad_folders_and_mappings(tmp_path):
    from click.testing import CliRunner

    from bindscope.cli.main import comco

    runner = CliRunner()
    result = runner.invoke(comco, ["assets", "import", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "does not exist" in result.output
    result = runner.invoke(comco, ["assets", "import", str(tmp_path)])
    assert result.exit_code == 2 and "holds no model file" in result.output
    (tmp_path / "a_cat.glb").write_bytes(b"x")
    (tmp_path / "a-cat.obj").write_bytes(b"x")
    result = runner.invoke(comco, ["assets", "import", str(tmp_path)])
    assert result.exit_code == 2 and "'a cat' comes from two files" in result.output
    (tmp_path / "a-cat.obj").unlink()
    (tmp_path / "mapping.yaml").write_text("a_cat.glb: {category: cat, up: W}\n")
    result = runner.invoke(comco, ["assets", "import", str(tmp_path)])
    assert result.exit_code == 2 and "up 'W'; allowed: X, Y, Z, -X, -Y, -Z" in result.output
    (tmp_path / "mapping.yaml").write_text("missing.glb: dog\n")
    result = runner.invoke(comco, ["assets", "import", str(tmp_path)])
    assert result.exit_code == 2 and "missing.glb" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_cat.glb", "mapping.yaml"]


def test_category_from_filename_and_orientation():
    from pathlib import Path

    from bindscope.generators.comco.assets import category_from_filename

    assert category_from_filename(Path("Traffic_Light.glb")) == "traffic light"
    assert category_from_filename(Path("teddy-bear.obj")) == "teddy bear"
    import bpy  # noqa: F401 - bpy is a hard dependency in CI: fail, never skip
    from mathutils import Vector

    from bindscope.generators.comco.blender.importer import orientation_matrix

    m = orientation_matrix("Y", "Z")  # a Y-up model whose front faces +Z (glTF convention before conversion)
    assert tuple((m @ Vector((0, 1, 0, 0))).to_3d()) == pytest.approx((0, 0, 1), abs=1e-6)
    assert tuple((m @ Vector((0, 0, 1, 0))).to_3d()) == pytest.approx((0, -1, 0), abs=1e-6)
    m = orientation_matrix("Z", "X")  # upright, front towards +X: a quarter turn about Z
    assert tuple((m @ Vector((1, 0, 0, 0))).to_3d()) == pytest.approx((0, -1, 0), abs=1e-6)
    m = orientation_matrix("X", "Y")  # lying on its side, front +Y: a 180-degree front turn must stay about z
    assert tuple((m @ Vector((1, 0, 0, 0))).to_3d()) == pytest.approx((0, 0, 1), abs=1e-6)
    assert tuple((m @ Vector((0, 1, 0, 0))).to_3d()) == pytest.approx((0, -1, 0), abs=1e-6)
    with pytest.raises(BadInput, match="parallel"):
        orientation_matrix("Z", "-Z")


# ----------------------------------------------------------------------------------------------- Objaverse (offline)


def test_objaverse_selection_keeps_cc_by_and_cc0_only():
    from bindscope.generators.comco.assets import candidate_uids, lvis_mapping, select_objaverse

    mapping = lvis_mapping()
    assert set(mapping) == {c.name for c in load_set("comco72")}
    assert mapping["fire hydrant"] == ["fireplug"] and "doughnut" in mapping["donut"]
    lvis = {"fireplug": ["u1", "u2", "u3"], "doughnut": ["u4", "u5"], "sofa": ["u6"], "pizza": ["u7"]}
    annotations = {
        "u1": {"license": "by-nc", "likeCount": 99},  # non-commercial: dropped even though most liked
        "u2": {"license": "by", "likeCount": 5, "name": "Hydrant", "user": {"username": "ann"},
               "viewerUrl": "https://sketchfab.com/3d-models/u2"},
        "u3": {"license": "cc0", "likeCount": 5, "name": "Plug"},  # ties with u2 on likes: uid order decides
        "u4": {"license": "by-sa", "likeCount": 1},
        "u5": {"license": "CC0", "likeCount": 0},
        "u6": {"license": "st"},
        "u7": {"license": "by-nd"},
    }
    chosen = select_objaverse(lvis, annotations, ["fire hydrant", "donut", "couch", "pizza", "bus"], mapping)
    assert sorted(chosen) == ["donut", "fire hydrant"]
    assert chosen["fire hydrant"]["uid"] == "u2"
    assert chosen["fire hydrant"]["licence"] == "CC-BY-4.0 ('Hydrant' by ann, https://sketchfab.com/3d-models/u2)"
    assert chosen["fire hydrant"]["source"] == "objaverse:u2"
    assert chosen["donut"]["uid"] == "u5" and chosen["donut"]["licence"].startswith("CC0-1.0")
    assert candidate_uids(lvis, ["donut", "couch"], mapping) == ["u4", "u5", "u6"]
    with pytest.raises(BadInput, match="no Objaverse-LVIS mapping"):
        select_objaverse(lvis, annotations, ["unicorn"], mapping)


def test_fetch_rejects_unknown_category_before_network():
    from click.testing import CliRunner

    from bindscope.cli.main import comco

    result = CliRunner().invoke(comco, ["assets", "fetch", "--out", "unused", "--categories", "pizza,unicorn"])
    assert result.exit_code == 2 and "'unicorn' not in the LVIS mapping" in result.output


@pytest.mark.blender
def test_import_fbx_and_blend_with_axes(tmp_path):
    import bmesh
    import bpy
    from click.testing import CliRunner

    from bindscope.cli.main import comco
    from bindscope.generators.comco.blender.models import build_model

    models = tmp_path / "in"
    models.mkdir()
    bpy.ops.wm.read_factory_settings(use_empty=True)
    mesh = bpy.data.meshes.new("slab")
    bm = bmesh.new()
    bmesh.ops.create_cube(bm, size=1.0, matrix=__import__("mathutils").Matrix.Diagonal((1.0, 2.0, 4.0, 1.0)))
    bm.to_mesh(mesh)
    bm.free()
    obj = bpy.data.objects.new("slab", mesh)
    bpy.context.scene.collection.objects.link(obj)
    bpy.ops.export_scene.fbx(filepath=str(models / "cup.fbx"))
    bpy.data.libraries.write(str(models / "vase.blend"), {obj})
    # vase.blend lies on its side: its up is +X and its front faces +Y
    (models / "mapping.json").write_text('{"vase.blend": {"category": "vase", "up": "X", "front": "Y"}}')
    out = tmp_path / "assets"
    result = CliRunner().invoke(comco, ["assets", "import", str(models), "--out", str(out), "--licence", "CC0-1.0"])
    assert result.exit_code == 0, result.output
    bpy.ops.wm.read_factory_settings(use_empty=True)
    cup, vase = load_set(str(out))
    assert (cup.name, vase.name) == ("cup", "vase")
    cup_obj = build_model(cup, str(out))
    assert tuple(cup_obj.dimensions) == pytest.approx((0.25, 0.5, 1.0), abs=1e-5)  # FBX round trip keeps axes
    vase_obj = build_model(vase, str(out))
    # x (up, 1 m) -> z; y (front, 2 m) -> -y; so the 4 m side lies along x
    assert tuple(vase_obj.dimensions) == pytest.approx((1.0, 0.5, 0.25), abs=1e-5)
    assert min(v.co.z for v in vase_obj.data.vertices) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.blender
def test_fetch_command_offline_with_a_local_objaverse_standin(tmp_path, monkeypatch):
    """The whole fetch flow (select, download, copy, import, record licences) with a stand-in for the
    network-bound `objaverse` package that serves GLB files exported here."""
    import json
    import sys
    import types

    import bpy  # noqa: F401 - fail, never skip, when bpy is missing
    from click.testing import CliRunner

    from bindscope.cli.main import comco

    store = tmp_path / "store"
    store.mkdir()
    _export_models(store)  # pizza.glb
    standin = types.ModuleType("objaverse")
    standin.load_lvis_annotations = lambda: {"pizza": ["p1", "p2"], "doughnut": ["d1"]}
    standin.load_annotations = lambda uids: {
        "p1": {"license": "by-nc", "likeCount": 50},
        "p2": {"license": "by", "likeCount": 3, "name": "Pie", "user": {"username": "cook"},
               "viewerUrl": "https://sketchfab.com/3d-models/p2"},
        "d1": {"license": "by-nd"},
    }
    requested = []

    def load_objects(uids, download_processes=1):
        requested.extend(uids)
        return {uid: str(store / "pizza.glb") for uid in uids}

    standin.load_objects = load_objects
    monkeypatch.setitem(sys.modules, "objaverse", standin)
    out = tmp_path / "fetched"
    result = CliRunner().invoke(comco, ["assets", "fetch", "--out", str(out), "--categories", "pizza,donut"])
    assert result.exit_code == 0, result.output
    assert requested == ["p2"]  # the by-nc object is never downloaded
    assert "no CC-BY/CC0 model for: donut" in result.output
    registry = json.loads((out / "registry.json").read_text())
    (entry,) = registry["categories"]
    assert entry["name"] == "pizza" and entry["source"] == "objaverse:p2"
    assert entry["licence"] == "CC-BY-4.0 ('Pie' by cook, https://sketchfab.com/3d-models/p2)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fetched", "store"]  # download folder removed
