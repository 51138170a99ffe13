"""Serving under the paper's burst: engine launch specs, exact-length prompts, the load
generator and its per-request records, and the aggregates computed from them.

Host-side code: nothing here imports torch. The serve workload (kit/workloads/serve.py) runs it
on rank 0 of a serve case: launch the engine, wait until it is ready, fire the burst, stop it.
"""
