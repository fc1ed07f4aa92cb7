"""COCO importer: masks, object table, crowd regions, caption mentions, subsets, bad annotation files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from coco_fixture import ANNOTATIONS, CAPTIONS, IMAGES, rect, write_coco
from pycocotools.coco import COCO

from bindscope.cli.main import bindscope
from bindscope.errors import BadInput
from bindscope.format.reader import Dataset
from bindscope.importers.coco import COCO_LICENCE, SUBSETS, import_coco, read_coco
from bindscope.importers.mentions import MentionFinder, mention_table
from bindscope.publish.release import default_name, source_licences
from bindscope.publish.verify import verify_dataset


@pytest.fixture()
def coco_files(tmp_path):
    return write_coco(tmp_path / "src")


def test_import_masks_objects_mentions(tmp_path, coco_files):
    images, instances, captions = coco_files
    manifest = import_coco(images, instances, captions, tmp_path / "out", image_size=40, progress=False)
    assert manifest["generator"]["name"] == "coco"
    assert source_licences(manifest) == [COCO_LICENCE] and default_name(manifest) == "COCO val2017 (bindscope import)"
    assert verify_dataset(tmp_path / "out") == []
    stats = manifest["statistics"]["splits"]["val2017"]
    assert stats == {"images": 3, "objects": 7, "crowd_regions": 1, "captions": 7, "captions_without_mention": 1,
                     "mentions": 12, "unmatched_mentions": 1, "degenerate_polygons": 0}
    api = COCO(str(instances))
    with Dataset(tmp_path / "out") as ds:
        first, second, third = list(ds.split("val2017"))
    # Image 7 is stored as is (40x40): the mask is pycocotools' rasterisation of the polygons, dog painted over person.
    expected = np.zeros((40, 40), np.uint8)
    expected[api.annToMask(api.anns[101]) > 0] = 1
    expected[api.annToMask(api.anns[102]) > 0] = 2
    assert np.array_equal(first.mask, expected)
    assert first.image[0, 0, 0] == 7 and first.spec["coco_image_id"] == 7
    table = [(o.index, o.category, o.category_id, o.area, o.bbox, o.size_rank, o.mention_position)
             for o in first.objects]
    assert table == [(1, "person", 1, 600 - 100, (2, 2, 22, 32), 1, 1), (2, "dog", 18, 100, (10, 10, 20, 20), 2, 2)]
    assert first.objects[0].extras == {"annotation_id": 101.0, "coco_area": 600.0, "full_area": 600.0}
    assert first.objects[0].attributes == {"supercategory": "person"}
    # The crowd band (rows 35..37) is kept apart: not an object, not in the mask, its RLE in the spec.
    from pycocotools import mask as mask_utils
    (crowd,) = first.spec["crowd"]
    assert crowd["category"] == "person" and crowd["annotation_id"] == 103
    band = mask_utils.decode({"size": crowd["rle"]["size"], "counts": crowd["rle"]["counts"].encode()})
    assert band.sum() == 120 and band[35:38].all() and not first.mask[35:38].any()
    # Every caption with its mentions; the object table's positions refer to the first caption.
    assert first.caption == "A man with his dog."
    caps = first.spec["captions"]
    assert [c["mentions"] for c in caps] == [{"person": 1, "dog": 2}, {"dog": 1, "person": 2}, {"person": 1}, {}]
    assert caps[1]["unmatched"] == [["couch", "sofa"]] and caps[1]["phrases"]["person"] == "woman"
    # Image 9 (60x30) is letterboxed into 40x40: scale 2/3, 10 px of padding above and below.
    assert second.spec["offset"] == [0, 10] and not second.image[:10].any() and not second.image[30:].any()
    assert [(o.category, o.area, o.bbox, o.size_rank, o.mention_position) for o in second.objects] == [
        ("car", 400, (0, 10, 20, 30), 1, 2), ("cat", 100, (20, 10, 30, 20), 2, 1)]
    assert second.spec["captions"][0]["phrases"] == {"cat": "kitten", "car": "car"}
    assert [o.mention_position for o in third.objects] == [2, 1, 3]


def test_mention_carried_by_largest_instance(tmp_path):
    # Two people: the caption's person mention goes to the larger (visible) one; positions stay 1..m.
    # The first person also has a 2-point polygon (no area; pycocotools would read 4 numbers as a box): left out.
    anns = [{"id": 1, "image_id": 7, "category_id": 1, "segmentation": [rect(0, 0, 5, 5), [30, 0, 39, 9]],
             "area": 25},
            {"id": 2, "image_id": 7, "category_id": 1, "segmentation": [rect(10, 10, 30, 30)], "area": 400},
            {"id": 3, "image_id": 7, "category_id": 18, "segmentation": [rect(0, 30, 10, 40)], "area": 100}]
    caps = [{"id": 5, "image_id": 7, "caption": "Two men walking a puppy"}]
    files = write_coco(tmp_path / "src", images=IMAGES[:1], annotations=anns, captions=caps)
    manifest = import_coco(*files, tmp_path / "out", image_size=40, progress=False)
    with Dataset(tmp_path / "out") as ds:
        sample = ds.split("val2017")[0]
    assert [(o.size_rank, o.mention_position) for o in sample.objects] == [(3, 0), (1, 1), (2, 2)]
    assert sample.objects[0].area == 25 and manifest["statistics"]["splits"]["val2017"]["degenerate_polygons"] == 1


def test_mention_table_longest_phrase_first():
    finder = MentionFinder(list(mention_table()))
    assert finder.find("A boy eats a hot dog beside his dog, a teddy bear and the TV.") == [
        ("person", "boy"), ("hot dog", "hot dog"), ("dog", "dog"), ("teddy bear", "teddy bear"), ("tv", "tv")]
    assert len(mention_table()) == 80
    # A category missing from the table is matched by its own name and plural.
    assert MentionFinder(["gnome"], table={}).find("Two gnomes and a gnome") == [("gnome", "gnomes"),
                                                                                  ("gnome", "gnome")]


def test_subsets(coco_files):
    plan = read_coco(*coco_files, subset=SUBSETS["image-side"])
    # image 7: 600 vs 100; image 9: 900 vs 225 (4x); image 12: 400 vs 300 (< 2x) is left out.
    assert [i["id"] for i in plan["images"]] == [7, 9]
    assert plan["counts"]["images_selected"] == 2


def test_cli_import_and_verify(tmp_path, coco_files):
    images, instances, captions = coco_files
    out = tmp_path / "cli"
    result = CliRunner().invoke(bindscope, ["import", "coco", "--images", str(images), "--instances", str(instances),
                                            "--captions", str(captions), "--out", str(out), "--image-size", "40",
                                            "--subset", "image-side", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "2 samples" in result.output and "1 unmatched" in result.output
    assert CliRunner().invoke(bindscope, ["verify", str(out)]).exit_code == 0
    assert json.loads((out / "manifest.json").read_text())["config"]["subset"]["largest_ratio"] == 2.0


def test_out_under_a_file_is_bad_input(tmp_path, coco_files):
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="is a file, not a folder"):
        import_coco(*coco_files, tmp_path / "file" / "out", image_size=40, progress=False)


def _broken(tmp_path, **kwargs):
    return write_coco(tmp_path / "bad", **kwargs)


@pytest.mark.parametrize("case, needle", [
    ("missing image", "image id 9 (file_name '000000000009.png') is missing"),
    ("unknown category", "annotation id 202 has unknown category id 99"),
    ("polygon outside", "annotation id 201: polygon outside the image (60x30 pixels)"),
    ("unknown image", "annotation id 201 refers to image id 555"),
    ("caption image", "caption id 2001 refers to image id 8"),
    ("size mismatch", "image id 12 (file_name '000000000012.png') is 40x40 pixels, but the instances file says 50x40"),
])
def test_bad_annotation_files(tmp_path, case, needle):
    anns, caps, images, skip = list(map(dict, ANNOTATIONS)), list(map(dict, CAPTIONS)), list(map(dict, IMAGES)), ()
    if case == "missing image":
        skip = ("000000000009.png",)
    elif case == "unknown category":
        anns[4]["category_id"] = 99
    elif case == "polygon outside":
        anns[3]["segmentation"] = [rect(0, 0, 30, 45)]
    elif case == "unknown image":
        anns[3]["image_id"] = 555
    elif case == "caption image":
        caps[4]["image_id"] = 8
    files = _broken(tmp_path, annotations=anns, captions=caps, images=images, skip_files=skip)
    if case == "size mismatch":  # the file on disk is 40x40; the instances file claims 50x40
        data = json.loads(files[1].read_text())
        data["images"][2]["width"] = 50
        files[1].write_text(json.dumps(data))
    out = tmp_path / "out"
    with pytest.raises(BadInput) as info:
        import_coco(*files, out, image_size=40, progress=False)
    assert needle in str(info.value)
    result = CliRunner().invoke(bindscope, ["import", "coco", "--images", str(files[0]), "--instances",
                                            str(files[1]), "--captions", str(files[2]), "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.count("Error:") == 1 and needle in result.output
    assert not out.exists()
