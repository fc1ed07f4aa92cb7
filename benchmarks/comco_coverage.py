"""How much of the image ComCO objects cover, measured from a dataset's stored instance masks.

Prints, over the scenes (median and minimum, fractions of the image): the width of the union of the objects'
mask bounding boxes (image widths), the largest object's bounding-box side (its larger side, image sides),
the smallest object's visible area (image areas) and the ratio of the largest to the second-largest visible
area; over the references: the object's bounding-box side and area. Example::

    comco render --objects 2-5 -n 24 --out /tmp/comco24
    python benchmarks/comco_coverage.py /tmp/comco24
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", help="a comco render output folder")
    args = parser.parse_args()

    from bindscope.format.reader import Dataset
    from bindscope.format.records import mask_bbox_area

    def report(name: str, values: list[float]) -> None:
        print(f"{name}: median {np.median(values):.4g}, min {np.min(values):.4g} (n = {len(values)})")

    with Dataset(args.dataset) as ds:
        union, largest_side, smallest_area, ratio = [], [], [], []
        for s in ds.split("scenes"):
            h, w = s.mask.shape
            boxes = [mask_bbox_area(s.mask, o.index) for o in s.objects]
            union.append((max(b[2] for b, _ in boxes) - min(b[0] for b, _ in boxes)) / w)
            (x0, y0, x1, y1), _ = max(boxes, key=lambda item: item[1])
            largest_side.append(max(x1 - x0, y1 - y0) / max(h, w))
            areas = sorted((a for _, a in boxes), reverse=True)
            smallest_area.append(areas[-1] / (h * w))
            if len(areas) > 1:
                ratio.append(areas[0] / areas[1])
        print(f"{args.dataset}: {len(union)} scenes, {h} x {w} px, size mode {ds.manifest['config']['size_mode']}")
        report("union of object bboxes, width / image width", union)
        report("largest object's bbox side / image side", largest_side)
        report("smallest object's visible area / image area", smallest_area)
        if ratio:
            report("largest / second-largest visible area", ratio)
        if "references" in ds.split_names:
            sides, areas = [], []
            for r in ds.split("references"):
                (x0, y0, x1, y1), area = mask_bbox_area(r.mask, 1)
                sides.append(max(x1 - x0, y1 - y0) / r.mask.shape[1])
                areas.append(area / r.mask.size)
            report("reference object's bbox side / image side", sides)
            report("reference object's area / image area", areas)


if __name__ == "__main__":
    main()
