"""The sharded HDF5 dataset format shared by every generator: records, shards, manifest, build, read, verify."""

from bindscope.dataset.reader import Dataset, Split
from bindscope.dataset.records import Negative, ObjectRecord, Sample

__all__ = ["Dataset", "Split", "Sample", "ObjectRecord", "Negative"]
