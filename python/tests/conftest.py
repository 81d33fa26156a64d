"""Tests run against this checkout's package (python/tirl), whatever is installed."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
