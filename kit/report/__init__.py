"""The report: a run directory and the manifests -> a report model -> HTML -> PDF.

`render` (kit.report.render) refuses a run directory that does not match its SHA256SUMS
(kit.rundir.evidence's `verify`), so a report is never rendered from a run that changed after it
was written. The package imports none of its modules: code that lays out a section with its cells
and tables does not load the renderer, which loads every section in turn.
"""

FORMATS = ("html", "pdf", "json", "csv")  # what `kit report --format` renders (kit.report.render)
