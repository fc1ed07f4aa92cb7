"""bindscope: controlled synthetic datasets for multi-object and attribute-binding studies of CLIP-style models.

The public Python API (docs/python-api.md); every command-line tool is a thin wrapper over it::

    import bindscope
    bindscope.madman.generate(out, config=None, **overrides)    # MADMAN dataset -> BuildResult
    bindscope.comco.render(out, config=None, **overrides)       # ComCO / SimCO dataset (Blender) -> BuildResult
    bindscope.comco.t2i(out, pipeline, ...)                     # ComCO prompts through a diffusers pipeline
    bindscope.evaluate(data, encoder, ...)                      # recognition / binding, TOR / IOR -> result dict
    bindscope.audit / caption_bias / collect                    # oracle audit, caption bias, result tables
    bindscope.t2i_score(data, encoder, detector, ...)           # which prompt objects generated images show
    bindscope.compare(results, ...)                             # paired tests between results -> Comparison
    bindscope.train(data, out, ...)                             # a small CLIP on MADMAN -> summary dict
    bindscope.probe(data, encoder, ...)                         # linear probes -> result dict
    bindscope.labclip.fit / eval / apply                        # LABCLIP alignment
    bindscope.EncoderSettings(model, ...)                       # which encoder, how it runs, its cache
    bindscope.SampledCaptions(objects=4, vocab="comco72", ...)  # evaluate's data when no dataset: sampled captions
    bindscope.Dataset(path)                                     # read a dataset (.split(name).as_torch())

Errors: :class:`BadInput` (a bad value, raised before anything is written; :class:`DatasetError` for a
dataset folder) and :class:`GenerationError` (a failure after writing began).

Attributes are imported on first use, so ``import bindscope`` stays light (no torch, bpy or h5py).
"""

import importlib

__version__ = "0.1.0"

# public name -> "module" (the module itself) or "module:attribute"
_EXPORTS = {
    "madman": "bindscope.generators.madman",
    "comco": "bindscope.generators.comco",
    "evaluate": "bindscope.evaluation.api:evaluate",
    "audit": "bindscope.evaluation.api:audit",
    "caption_bias": "bindscope.evaluation.api:caption_bias",
    "collect": "bindscope.evaluation.api:collect",
    "t2i_score": "bindscope.evaluation.t2i:t2i_score",
    "compare": "bindscope.evaluation.compare:compare",
    "train": "bindscope.training.api:train",
    "probe": "bindscope.alignment.api:probe",
    "labclip": "bindscope.alignment.labclip_api",
    "EncoderSettings": "bindscope.encoders.settings:EncoderSettings",
    "SampledCaptions": "bindscope.evaluation.sampled:SampledCaptions",
    "Dataset": "bindscope.format.reader:Dataset",
    "BuildResult": "bindscope.build.builder:BuildResult",
    "BadInput": "bindscope.errors:BadInput",
    "DatasetError": "bindscope.errors:DatasetError",
    "GenerationError": "bindscope.errors:GenerationError",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bindscope' has no attribute {name!r}")
    module, _, attr = _EXPORTS[name].partition(":")
    value = importlib.import_module(module)
    value = getattr(value, attr) if attr else value
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
