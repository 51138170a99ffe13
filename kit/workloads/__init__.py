"""Code that runs inside the workload processes (in a pinned image, or in this Python).

This package is the only part of the kit that imports torch, deepspeed, transformers, peft and
bitsandbytes, and only inside the functions that need them: the pure modules here (the
DeepSpeed config, for instance) stay importable on a host without the frameworks.
"""
