"""The stages of the protocol, one unit each (kit/stages/<stage>.py, see kit.stages.unit), that
measures its cases and lays out its section; kit.stages.registry lists them.

The package imports none of its modules, so that the report's helpers a unit lays out its section
with can name the unit's type without loading every unit.
"""
