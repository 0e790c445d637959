"""The KV budget and the answers: how vLLM 0.33's block allocator fits requests into what weights leave.

All figures are per rank (every rank holds the same share). The allocator model is rules/memory.toml `[allocator]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import facts
from .layers import FULL, GDN, MLA, SLIDING, CacheModel


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Pages:
    """Block size and page bytes per layer, after vLLM's hybrid alignment (recurrent pages padded to attention's)."""

    block_size: int
    attention_pages: tuple[tuple[str, int, int | None], ...]  # (kind, page bytes, sliding window) per attention layer
    state_page: int  # padded recurrent page per linear-attention layer (0: none)
    state_layers: int
    state_pages_per_sequence: int
    in_flight_tokens: int
    group_size: int

    def request_bytes(self, length: int) -> int:
        """KV bytes one request of `length` tokens holds (vLLM's max_memory_usage_bytes summed over layers)."""
        total = 0
        for kind, page, window in self.attention_pages:
            if kind == SLIDING and window:
                tokens = min(window - 1 + self.in_flight_tokens, length)
                total += (_cdiv(tokens, self.block_size) + 1) * page
            else:
                total += _cdiv(length, self.block_size) * page
        return total + self.state_layers * self.state_pages_per_sequence * self.state_page

    @property
    def null_block_bytes(self) -> int:
        """The block the pool keeps back (one page for each layer of a group)."""
        pages = [p for _, p, _ in self.attention_pages] + ([self.state_page] if self.state_layers else [])
        return self.group_size * max(pages, default=0)


def pages(cache: CacheModel, *, max_num_batched_tokens: int, prefix_caching: bool) -> Pages:
    rule = facts.allocator()
    block = int(rule["block_size"])
    attn = cache.of(FULL, SLIDING, MLA)
    gdn = cache.of(GDN)
    state_page = max((layer.state_bytes for layer in gdn), default=0)
    if gdn and attn:
        # Platform._align_hybrid_block_size: the smallest kernel-aligned block whose attention page holds a state.
        align = max(int(rule["hybrid_kernel_alignment"]), block)
        one_token = max(layer.token_bytes for layer in attn)
        block = max(block, align * _cdiv(state_page, align * one_token))
        state_page = block * one_token
    per_seq = int(rule["mamba_pages_per_sequence_prefix_caching" if prefix_caching else "mamba_pages_per_sequence"])
    buckets = [n for n in (len(cache.of(FULL, MLA)), len(cache.of(SLIDING)), len(gdn)) if n]
    group = min(buckets) if buckets else 0
    if buckets and max(buckets) < group * 1.5:
        group = max(buckets)
    return Pages(
        block_size=block,
        attention_pages=tuple((layer.kind, block * layer.token_bytes, layer.sliding_window) for layer in attn),
        state_page=state_page,
        state_layers=len(gdn),
        state_pages_per_sequence=per_seq,
        in_flight_tokens=int(rule["concurrent_batches"]) * max_num_batched_tokens,
        group_size=group,
    )


@dataclass(frozen=True)
class Answers:
    fits: bool
    max_model_len: int  # the largest length <= the model's context that fits one sequence (0: none)
    max_num_seqs: int  # sequences that fit at the planned length
    planned_len: int  # the length the sequence count is for (--max-model-len, else max_model_len)
    context_at_seqs: tuple[tuple[int, int], ...]  # (sequences, largest length each) for the asked counts
    kv_cache_tokens: int  # vLLM's "KV cache size" log line at the planned length
    reason: str  # why it does not fit ("" when it does)


def largest_length(p: Pages, available: int, seqs: int, ceiling: int) -> int:
    """The largest length <= ceiling at which `seqs` requests fit in `available` bytes (0 when none does)."""
    if available <= 0 or seqs * p.request_bytes(1) > available:
        return 0
    lo, hi = 1, ceiling
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if seqs * p.request_bytes(mid) <= available:
            lo = mid
        else:
            hi = mid - 1
    return lo


def answer(p: Pages, kv_budget: int, *, context: int, max_model_len: int | None, max_num_seqs: int | None,
           seq_counts: tuple[int, ...]) -> Answers:
    available = kv_budget - p.null_block_bytes
    longest = largest_length(p, available, 1, context)
    planned = max_model_len or longest
    per_request = p.request_bytes(planned) if planned else 0
    seqs = available // per_request if per_request and available > 0 else 0
    counts = tuple(sorted(set(seq_counts) | ({max_num_seqs} if max_num_seqs else set())))
    at_seqs = tuple((n, largest_length(p, available, n, context)) for n in counts)
    tokens = int(available / per_request * planned) if per_request and available > 0 else 0
    reason = ""
    if kv_budget <= 0:
        reason = "the weights and the reserve leave no memory for the KV cache"
    elif longest == 0:
        reason = "not even one token of one sequence fits the KV budget"
    elif max_model_len and max_model_len > context:
        reason = f"--max-model-len {max_model_len:,} is above the model's context ({context:,})"
    elif max_model_len and seqs < 1:
        reason = f"one sequence of {max_model_len:,} tokens does not fit (largest: {longest:,})"
    elif max_num_seqs and seqs < max_num_seqs:
        reason = f"{max_num_seqs} sequences of {planned:,} tokens do not fit (at most {seqs})"
    return Answers(fits=not reason, max_model_len=longest, max_num_seqs=int(seqs), planned_len=planned,
                   context_at_seqs=at_seqs, kv_cache_tokens=tokens, reason=reason)
