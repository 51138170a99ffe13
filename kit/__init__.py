"""kit: a reproducibility kit for the LLM runtime benchmarks of arXiv:2311.03687."""

__version__ = "0.1.0"
