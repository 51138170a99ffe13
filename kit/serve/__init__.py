"""Serving under the paper's burst: the engines as published, exact-length prompts, the load
generator and its per-request records, and the aggregates computed from them.

Host-side code: nothing here imports torch. An executor places the engine (its pinned image, or
a process of this host) and kit.serve.session drives one run of it from the host: readiness,
warm-up, the engine's counters, the burst, the rows.
"""
