"""The analytic model (FLOPs, bytes and memory of a Llama-family model) and the hardware table it is held to; no case, no run."""
