"""The dataset format: sample records, HDF5 shards, the manifest, and the readers (plain and PyTorch)."""
