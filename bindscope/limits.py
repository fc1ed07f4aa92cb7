"""Bounds that many numeric options share, in one place (pure constants; every layer may import them).

Each command's option takes its range from here, from its library's own table or from the config schema, so the
command line, the library call and ``--help`` state the same range, and no loop is unbounded by user input.
"""

MAX_SEED = 2 ** 32 - 1
"""Largest seed: one 32-bit word (numpy's ``SeedSequence`` takes it whole; ``torch.manual_seed`` accepts it)."""
MAX_JOBS = 256
"""Most worker processes of one command (more only starts idle processes: a shard is the unit of work)."""
MAX_COUNT = 10_000_000
"""Most images, scenes, samples or captions one command makes or reads at a time."""
MAX_EPOCHS = 100_000
"""Most passes over a training set (probes, LABCLIP maps, the audit oracle, position heads)."""
MAX_BATCH = 65_536
"""Most inputs per batch or forward pass."""
MAX_LR = 10.0
"""Largest learning rate (Adam / SGD / AdamW); anything larger diverges at once."""
MAX_TILES = 1024
"""Most tiles of a preview grid (``madman preview`` / ``comco preview``)."""
MAX_COLS = 64
"""Most columns of a preview grid."""
MAX_OBJECTS = 255
"""Most objects in one image: the uint8 instance mask numbers them 1..255."""
IMPORT_IMAGE_SIZE = (32, 2048)
"""Allowed side (pixels) of the square images an importer stores."""
