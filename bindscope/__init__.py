"""bindscope: controlled synthetic datasets for multi-object and attribute-binding studies of CLIP-style models."""

__version__ = "0.1.0"
