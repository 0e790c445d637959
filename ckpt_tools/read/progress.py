"""Progress bars (tqdm) for the long reads and rewrites."""

from __future__ import annotations

from typing import Any


def progress_bar(**options: Any) -> Any:
    """A tqdm bar without tqdm's monitor thread. The monitor only tunes refresh rates, and any thread left running
    keeps the next value scan in this process from forking (read/background_scan.py `forkable`)."""
    from tqdm import tqdm

    tqdm.monitor_interval = 0
    return tqdm(**options)
