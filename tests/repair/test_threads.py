"""A repair encodes its journal on a thread of its own (`repair._thread.InThread`) while the value scan's result is
read. What the thread returns must be what the call in place
gives, and its failure must reach the caller."""

from __future__ import annotations

import pytest

from ckpt_tools.repair import fix_prefix, journal, run, runner, steps
from ckpt_tools.repair._thread import InThread
from tests.repair_helpers import copy_of


def test_the_threads_value_and_error_reach_the_caller():
    assert InThread(lambda: sum(range(10))).result() == 45

    def fails() -> int:
        raise ValueError("from the thread")

    with pytest.raises(ValueError, match="from the thread"):
        InThread(fails).result()


def test_the_journal_encoded_on_a_thread_is_the_one_encoded_in_place(tmp_path, monkeypatch):
    folder = copy_of("llmc-qwen3moe-nvfp4-sharded", tmp_path)
    seen: list[tuple[bytes | None, bytes]] = []
    real = runner.run_journaled

    def spy(root, job, step_list, writer, encoded=None):
        seen.append((encoded, journal.encode_journal(job, root, step_list)))
        return real(root, job, step_list, writer, encoded)

    monkeypatch.setattr(runner, "run_journaled", spy)
    result = run(str(folder), fix_prefix.job([("model.layers.1.self_attn", "model.layers.1.attn")]), force=True)
    assert result.applied and len(seen) == 1
    encoded, in_place = seen[0]
    assert encoded is not None and encoded == in_place  # made ahead, on its thread
    index_steps = [s for s in result.steps if isinstance(s, steps.IndexStep)]
    assert index_steps and index_steps[0].old_sha256 == steps.sha256(index_steps[0].old)
