import os
import sys
from pathlib import Path

# No downloads at test time: every model and data set comes from installed packages or is trained here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))
