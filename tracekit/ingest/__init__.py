"""Reading trace files into the ``events`` table: finding files (``sources``), cutting the events array out of
a file (``scan``), the reader seam per format (``formats``), the table itself (``events_table``) and ranks.

See docs/architecture.md for the layers and who owns what.
"""
