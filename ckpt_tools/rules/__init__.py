"""Rules: one module per rule, named after its code (e.g. `ck401_nvfp4_weight_only.py`)."""

from .base import Context, Finding, Rule, all_rules, find_rule

__all__ = ["Context", "Finding", "Rule", "all_rules", "find_rule"]
