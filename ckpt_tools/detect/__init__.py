"""What vLLM will make of a checkpoint: quantization method, per-module schemes, activation mode."""
