"""The paper's published findings, evaluated on measured runs, and what this host's GPUs should show."""
