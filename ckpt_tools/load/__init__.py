"""What vLLM's weight loader does with every tensor of a checkpoint, and which of its parameters stay unfilled.

Two producers of the same `LoadAccounting`: the load model (knowledge in rules/, applied without vLLM installed) and
`ckpt doctor --vllm` (vLLM's own `load_weights` run over meta tensors in a subprocess). Findings come from the
accounting through one function, whichever produced it, so both judge a checkpoint with the same codes and slugs.
"""
