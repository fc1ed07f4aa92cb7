"""Files on disk: atomic writes, canonical JSON and hashing, output ownership and locks, the one claim every writer takes
on its output (``claim``), worker lifetime, the cache
folder, reading ahead in a thread."""
