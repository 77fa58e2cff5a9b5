"""The linked model over the base tables: CPU op nesting and the linked tables (``link``), and the rule
tables (``rules``).

See docs/architecture.md for the layers and who owns what.
"""
