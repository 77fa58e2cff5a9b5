"""Analyses over a loaded ``Trace``: findings, and the report (data, then its terminal and HTML views).

See docs/architecture.md for the layers and who owns what.
"""
