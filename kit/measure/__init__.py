"""How each stage's cases are judged and their figures computed from the raw samples (no layout: the report lays them out)."""
