"""The report: a run directory and the manifests -> a report model -> HTML -> PDF.

`render` refuses a run directory that does not match its SHA256SUMS (`verify`), so a report is
never rendered from a run that changed after it was written.
"""

from kit.report.evidence import EvidenceError, digest_mismatch, newest_run, verify
from kit.results import UnreadableRun
from kit.report.render import render

__all__ = ["EvidenceError", "UnreadableRun", "digest_mismatch", "newest_run", "render", "verify"]
