"""The run directory: every record a run writes (its schema), the directory itself, its evidence (SHA256SUMS), its signatures and its redaction."""
