"""The KV budget and the answers: how vLLM 0.33's block allocator fits requests into what weights leave.

All figures are per rank (every rank holds the same share). The allocator model is rules/memory.toml `[allocator]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..knowledge.memory import memory
from .layers import FULL, GDN, MLA, SLIDING, CacheModel


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Pages:
    """Block size, page bytes and KV-cache groups, after vLLM's hybrid alignment (recurrent pages padded to
    attention's) and its grouping of layers (`_get_kv_cache_groups_uniform_page_size`)."""

    block_size: int
    attention_pages: tuple[tuple[str, int, int | None], ...]  # (kind, page bytes, sliding window) per attention layer
    state_page: int  # padded recurrent page per linear-attention layer (0: none)
    state_layers: int
    state_pages_per_sequence: int
    in_flight_tokens: int
    speculative_blocks: int  # MambaSpec.num_speculative_blocks: one state page per speculative token
    group_size: int  # layers per KV-cache group (padding layers fill the last group of a kind)
    groups: tuple[tuple[str, int | None], ...] = ()  # (kind, sliding window) of each KV-cache group
    block_bytes: int = 0  # bytes one block id takes in the shared pool: the widest group's pages

    def layer_blocks(self, kind: str, window: int | None, length: int) -> int:
        """Blocks one layer of `kind` holds for a request of `length` tokens (the spec's max_memory_usage_bytes
        over its page size)."""
        if kind == GDN:
            return self.state_pages_per_sequence + self.speculative_blocks
        if kind == SLIDING and window:
            return _cdiv(min(window - 1 + self.in_flight_tokens, length), self.block_size) + 1
        return _cdiv(length, self.block_size)

    def request_blocks(self, length: int) -> int:
        """Block ids one request of `length` tokens takes from the pool: the sum over groups, padding groups
        included (`get_max_concurrency_for_kv_cache_config`, `_max_memory_usage_bytes_from_groups`)."""
        return sum(self.layer_blocks(kind, window, length) for kind, window in self.groups)

    def request_bytes(self, length: int) -> int:
        """KV bytes one request of `length` tokens holds: its blocks times the bytes of one block."""
        return self.request_blocks(length) * self.block_bytes

    @property
    def null_block_bytes(self) -> int:
        """The block the pool keeps back (one page for each layer of the widest group)."""
        return self.block_bytes


def _groups(cache: CacheModel) -> tuple[int, tuple[tuple[str, int | None], ...]]:
    """(group size, (kind, window) per group) as `_get_kv_cache_groups_uniform_page_size` splits the layers: one
    bucket per spec, the group size the smallest bucket (the largest when it is under 1.5x the smallest), each
    bucket cut into cdiv(layers, group size) groups. A model whose layers all share one spec is one group."""
    buckets: dict[tuple[str, int | None], int] = {}
    for layer in cache.layers:
        kind = FULL if layer.kind == MLA else layer.kind
        key = (kind, layer.sliding_window if kind == SLIDING else None)
        buckets[key] = buckets.get(key, 0) + 1
    if not buckets:
        return 0, ()
    sizes = list(buckets.values())
    if len(sizes) == 1:
        return sizes[0], tuple(buckets)
    group = min(sizes)
    if max(sizes) < group * 1.5:
        group = max(sizes)
    return group, tuple(key for key, n in buckets.items() for _ in range(_cdiv(n, group)))


def pages(
    cache: CacheModel, *, max_num_batched_tokens: int, prefix_caching: bool, speculative_tokens: int = 0
) -> Pages:
    rule = memory().allocator
    block = rule.block_size
    attn = cache.of(FULL, SLIDING, MLA)
    gdn = cache.of(GDN)
    state_page = max((layer.state_bytes for layer in gdn), default=0)
    if gdn and attn:
        # Platform._align_hybrid_block_size: the smallest kernel-aligned block whose attention page holds a state.
        align = max(rule.hybrid_kernel_alignment, block)
        one_token = max(layer.token_bytes for layer in attn)
        block = max(block, align * _cdiv(state_page, align * one_token))
        state_page = block * one_token
    per_seq = rule.mamba_pages_per_sequence_prefix_caching if prefix_caching else rule.mamba_pages_per_sequence
    group, groups = _groups(cache)
    layer_pages = [block * layer.token_bytes for layer in attn] + [state_page] * len(gdn)
    # _get_kv_cache_bytes_per_block: the widest group's pages. One group: every layer's page (their sizes may
    # differ, e.g. an MLA drafter beside GQA layers); several: the group size times the one uniform page.
    block_bytes = sum(layer_pages) if len(groups) == 1 else group * max(layer_pages, default=0)
    return Pages(
        block_size=block,
        attention_pages=tuple((layer.kind, block * layer.token_bytes, layer.sliding_window) for layer in attn),
        state_page=state_page,
        state_layers=len(gdn),
        state_pages_per_sequence=per_seq,
        in_flight_tokens=rule.concurrent_batches * max_num_batched_tokens,
        speculative_blocks=speculative_tokens if gdn else 0,
        group_size=group,
        groups=groups,
        block_bytes=block_bytes,
    )


@dataclass(frozen=True)
class Answers:
    fits: bool
    max_model_len: int  # the largest length <= the model's context that fits one sequence (0: none)
    max_num_seqs: int  # sequences that fit at the planned length
    planned_len: int  # the length the sequence count is for (--max-model-len, else max_model_len)
    context_at_seqs: tuple[tuple[int, int], ...]  # (sequences, largest length each) for the asked counts
    kv_cache_tokens: int  # vLLM's "KV cache size: N tokens" log line at the planned length
    max_concurrency: float  # vLLM's "Maximum concurrency for L tokens per request: Cx" at the planned length
    reason: str  # why it does not fit ("" when it does)
    refused: bool = False  # vLLM refuses the asked length whatever the memory: `reason` says why


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


def answer(
    p: Pages,
    kv_budget: int,
    *,
    context: int,
    max_model_len: int | None,
    max_num_seqs: int | None,
    seq_counts: tuple[int, ...],
    refused: str | None = None,
) -> Answers:
    """The answers for `max_model_len` / `max_num_seqs` (None: the largest that fit). `refused`: why vLLM refuses
    the asked length at its config check (ckpt_tools/plan/limits.py), which is then the answer's reason; the memory
    figures stay what the budget holds at that length (check-serve's memory check reads them)."""
    available = kv_budget - p.null_block_bytes
    longest = largest_length(p, available, 1, context)
    planned = max_model_len or longest
    per_request = p.request_bytes(planned) if planned else 0
    seqs = available // per_request if per_request and available > 0 else 0
    counts = tuple(sorted(set(seq_counts) | ({max_num_seqs} if max_num_seqs else set())))
    at_seqs = tuple((n, largest_length(p, available, n, context)) for n in counts)
    # update_kv_cache_capacity (vllm/v1/core/kv_cache_utils.py): the pool's blocks, the null block included (the
    # allocation uses the whole budget; only the fit check holds it back), over the blocks one request of
    # max_model_len takes; the token figure is that ratio times max_model_len, truncated.
    num_blocks = kv_budget // p.block_bytes if p.block_bytes and kv_budget > 0 else 0
    blocks = p.request_blocks(planned) if planned else 0
    concurrency = num_blocks / blocks if blocks else 0.0
    tokens = int(concurrency * planned)
    reason = ""
    if refused:  # vLLM stops at its config check, before it sizes any memory
        reason = refused
    elif kv_budget <= 0:
        reason = "the weights and the reserve leave no memory for the KV cache"
    elif longest == 0:
        reason = "not even one token of one sequence fits the KV budget"
    elif max_model_len and max_model_len > context:
        reason = f"--max-model-len {max_model_len} is above the model's context ({context:,})"
    elif max_model_len and seqs < 1:
        reason = f"one sequence of {max_model_len:,} tokens does not fit (largest: {longest:,})"
    elif max_num_seqs and seqs < max_num_seqs:
        reason = f"{max_num_seqs} sequences of {planned:,} tokens do not fit (at most {seqs})"
    return Answers(
        fits=not reason,
        max_model_len=longest,
        max_num_seqs=int(seqs),
        planned_len=planned,
        context_at_seqs=at_seqs,
        kv_cache_tokens=tokens,
        max_concurrency=concurrency,
        reason=reason,
        refused=bool(refused),
    )
