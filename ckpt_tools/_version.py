"""The tool's version: one small module every layer may import (the package root imports the whole API lazily)."""

__version__ = "0.1.0"
