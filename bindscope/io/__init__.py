"""Files on disk: atomic writes, canonical JSON and hashing, output ownership and locks, worker lifetime, the cache
folder, reading ahead in a thread."""
