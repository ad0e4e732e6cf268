"""The serve tests' fixtures live in serve_world.py (a unique module name to import)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_world import server, world

__all__ = ["server", "world"]
