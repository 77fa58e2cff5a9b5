"""What the tables are: every table, view and column declared once (``tables``), the typed ``args`` fields,
the event-kind vocabulary and the attention-stage vocabulary.

See docs/architecture.md for the layers and who owns what.
"""
