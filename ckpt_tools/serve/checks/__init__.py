"""check-serve's checks: one module per CS code, named after it (e.g. `cs120_max_model_len_exceeded.py`), each a
`ServeCheck` class under the CK rules' contract (docstring docs, TOML cases in tests/rule_cases/)."""

from .base import ServeCheck, ServeContext, all_checks, find_check, run_checks

__all__ = ["ServeCheck", "ServeContext", "all_checks", "find_check", "run_checks"]
