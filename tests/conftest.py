import os
import sys
import tempfile
from pathlib import Path

import pytest

# No downloads at test time: every model and data set comes from installed packages or is trained here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# One cache folder per test session (MNIST digit tables, embeddings): never the user's ~/.cache.
os.environ.setdefault("BINDSCOPE_CACHE", tempfile.mkdtemp(prefix="bindscope-test-cache-"))
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread for a test module (``pytestmark = pytest.mark.usefixtures(...)``): on a busy
    2-core machine this is several times faster than two."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
