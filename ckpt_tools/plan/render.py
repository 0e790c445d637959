"""Text renderings of a memory plan: the summary `ckpt plan` prints, and the arithmetic behind it (`--explain`)."""

from __future__ import annotations

from ..knowledge.runtimes import default_runtime_id
from ..report.text import finding_lines, terminal_width, wrap
from .layers import FULL, GDN, MLA, SLIDING
from .planner import MemoryPlan

VALUE_COLUMN = 15  # where a wrapped `  fits         NO: ...` line continues: two spaces and a label padded to 13


def size(n: int) -> str:
    """Bytes in binary units, the way vLLM's memory log prints them."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _layers(n: int, what: str) -> str:
    return f"{n} {what} layer{'s' if n != 1 else ''}"


def summary_lines(plan: MemoryPlan) -> list[str]:
    """Weights, KV per token, state per sequence, budget and the answers: what inspect and serve-flags quote."""
    w, tp = plan.weights, plan.tp
    comps = ", ".join(f"{k} {size(v)}" for k, v in w.by_component.items())
    out = [f"weights      {size(w.bytes)} ({comps})" + (f"; {size(w.per_device_bytes)} per device" if tp > 1 else "")]
    kv = f"KV cache     {plan.cache.kv_dtype} ({plan.cache.kv_dtype_reason}): "
    if plan.attention_layers:
        kv += f"{plan.token_bytes_per_device * tp:,} B per token over {_layers(plan.attention_layers, 'attention')}"
        if plan.sliding_token_bytes_per_device:
            window = plan.cache.of(SLIDING)[0].sliding_window
            kv += f" ({len(plan.cache.of(SLIDING))} sliding-window, capped at {window:,} tokens)"
    else:
        kv += "no attention layer"
    out.append(kv)
    gdn = plan.cache.of(GDN)
    if gdn:
        out.append(
            f"state        {plan.state_bytes_per_device * tp:,} B per sequence over "
            f"{_layers(len(gdn), 'linear-attention')} ({' / '.join(gdn[0].state_dtypes)})"
        )
    out.append(
        f"budget       {size(plan.device.bytes)} x {plan.utilization} = {size(plan.usable_bytes)}, "
        f"- weights {size(w.per_device_bytes)} - reserve {size(plan.reserve.bytes)} = "
        f"{size(plan.kv_budget_bytes)} for the KV cache" + (" per device" if tp > 1 else "")
    )
    return out


def answer_lines(plan: MemoryPlan) -> list[str]:
    a = plan.answers
    if a.fits:
        head = f"fits         yes: --max-model-len {a.max_model_len} at one sequence"
        head += " (the model's context)" if a.max_model_len == plan.context else f" (model context {plan.context:,})"
    else:
        head = f"fits         NO: {a.reason}"
        if a.max_model_len:
            head += f"; largest that fits one sequence: --max-model-len {a.max_model_len}"
    out = [head]
    if a.planned_len and not a.refused:  # no sequence count at a length vLLM does not start with
        out.append(
            f"sequences    {a.max_num_seqs:,} at {a.planned_len:,} tokens each "
            f"(KV cache size {a.kv_cache_tokens:,} tokens, concurrency {a.max_concurrency:.2f}x)"
        )
    out.append(
        "context      " + ", ".join(f"{n} seq{'s' if n != 1 else ''}: {length:,}" for n, length in a.context_at_seqs)
    )
    return out


def text(plan: MemoryPlan, *, explain: bool = False, notes: bool = True) -> str:
    """The plan as `ckpt plan` shows it; `notes=False` leaves the notes out (the CLI prints them on stderr, as
    `notes_text`)."""
    s = plan.settings
    where = (
        plan.hardware_name
        if s.hardware.lower() in plan.hardware_name.lower()
        else f"{plan.hardware_name} ({s.hardware})"
    )
    head = f"ckpt plan {plan.target} on {where}, tensor parallel {plan.tp}, {s.runtime or default_runtime_id()}" + (
        f", drafter {plan.drafter}" if plan.drafter else ""
    )
    width = terminal_width()

    def block(lines: list[str], prefix: str, indent: int) -> list[str]:
        return [part for ln in lines for part in wrap(prefix + ln, width, indent)]

    out = [head, *block(summary_lines(plan) + answer_lines(plan), "  ", VALUE_COLUMN)]
    if plan.findings:  # check-serve's verdict on the same settings, as every text report shows findings
        out += ["", *(line for f in plan.findings for line in finding_lines(f, width))][:-1]
    if explain:
        out += ["", "arithmetic:", *block(arithmetic(plan), "  ", 4)]
    if notes and plan.notes:
        out += ["", notes_text(plan).rstrip("\n")]
    return "\n".join(out) + "\n"


def notes_text(plan: MemoryPlan) -> str:
    """The plan's notes (how estimates were made, what was assumed), one per line; empty when there are none."""
    return "\n".join(["notes:", *(f"  - {n}" for n in plan.notes)]) + "\n" if plan.notes else ""


def arithmetic(plan: MemoryPlan) -> list[str]:
    """Every step from headers to answers, with the numbers (per device)."""
    p, a = plan.pages, plan.answers
    out = [
        f"device memory {plan.device.bytes:,} B ({plan.device.kind}: {plan.device.source})",
        f"usable = {plan.device.bytes:,} x {plan.utilization} ({plan.utilization_reason}) = {plan.usable_bytes:,} B",
        f"weights per device = {plan.weights.per_device_bytes:,} B (sum of tensor data bytes"
        + (
            f"; {plan.weights.split_bytes:,} B split over {plan.tp} ranks, {plan.weights.replicated_bytes:,} B "
            f"replicated)"
            if plan.tp > 1
            else ")"
        ),
        f"reserve = activation {plan.reserve.activation_bytes:,} ({plan.reserve.kind}) + non-torch "
        f"{plan.reserve.non_torch_bytes:,} + CUDA graphs {plan.reserve.cuda_graph_bytes:,} + sampler "
        f"{plan.reserve.sampler_bytes:,} = {plan.reserve.bytes:,} B (estimate)",
        f"KV budget = {plan.usable_bytes:,} - {plan.weights.per_device_bytes:,} - {plan.reserve.bytes:,} = "
        f"{plan.kv_budget_bytes:,} B; less the null block ({p.null_block_bytes:,} B) = "
        f"{plan.kv_budget_bytes - p.null_block_bytes:,} B",
    ]
    for kind, label in ((FULL, "full attention"), (MLA, "MLA latent"), (SLIDING, "sliding window")):
        layers = plan.cache.of(kind)
        if layers:
            l0 = layers[0]
            per = (
                f"{l0.kv_heads} KV heads x ({l0.head_size} + {l0.head_size_v}) dims"
                if kind != MLA
                else f"1 latent of {l0.head_size} dims"
            )
            out.append(
                f"{label}: {_layers(len(layers), 'attention')} x {l0.token_bytes:,} B per token ({per}, "
                f"{plan.cache.kv_dtype}); page {p.block_size} tokens = {p.block_size * l0.token_bytes:,} B"
                + (
                    f"; window {l0.sliding_window:,} + in-flight {p.in_flight_tokens:,} tokens"
                    if kind == SLIDING
                    else ""
                )
            )
    gdn = plan.cache.of(GDN)
    if gdn:
        l0 = gdn[0]
        shapes = " + ".join(
            f"{'x'.join(map(str, s))} {d}" for s, d in zip(l0.state_shapes, l0.state_dtypes, strict=True)
        )
        out.append(
            f"linear attention: {_layers(len(gdn), 'GatedDeltaNet')} x {l0.state_bytes:,} B state ({shapes}); page padded to "
            f"{p.state_page:,} B, {p.state_pages_per_sequence + p.speculative_blocks} page(s) per sequence"
            + (f" ({p.speculative_blocks} for speculative tokens)" if p.speculative_blocks else "")
        )
    out.append(
        f"KV-cache groups: {len(p.groups)} of {p.group_size} layer(s) each; one block id = "
        f"{p.block_bytes:,} B; pool {plan.kv_budget_bytes:,} // {p.block_bytes:,} = "
        f"{plan.kv_budget_bytes // p.block_bytes if p.block_bytes else 0:,} blocks"
    )
    if a.planned_len:
        per_req = plan.request_bytes(a.planned_len)
        out.append(
            f"KV cache size: {a.max_concurrency:.4f}x concurrency (blocks / "
            f"{p.request_blocks(a.planned_len):,} blocks per request) x {a.planned_len:,} = "
            f"{a.kv_cache_tokens:,} tokens"
        )
        out.append(
            f"one request of {a.planned_len:,} tokens holds {per_req:,} B; "
            f"{plan.kv_budget_bytes - p.null_block_bytes:,} // {per_req:,} = {a.max_num_seqs:,} "
            f"sequence{'s' if a.max_num_seqs != 1 else ''}"
        )
    out.append(f"largest --max-model-len at one sequence (binary search, <= {plan.context:,}): {a.max_model_len:,}")
    return out
