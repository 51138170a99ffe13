"""This host: its GPUs, its fingerprint (collected, parsed, judged against the protocol's expectations), the kit that measures on it."""
