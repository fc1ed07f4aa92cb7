"""Encoders: the adapter interface, preprocessing, open_clip, Hugging Face and sentence-transformers models, the embedding cache, and the registry of encoder kinds."""
