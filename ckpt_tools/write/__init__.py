"""Writers: the one place that encodes safetensors headers and lays out files."""
