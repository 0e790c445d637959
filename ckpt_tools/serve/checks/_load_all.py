"""Import every `csNNN_*.py` module of this package so that each serve check registers itself."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

for _info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
    if _info.name.startswith("cs") and _info.name[2:5].isdigit():
        importlib.import_module(f"{__package__}.{_info.name}")
