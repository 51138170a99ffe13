"""The report's sections, one module each; each stage's section is registered in kit.report.sections.stages."""
