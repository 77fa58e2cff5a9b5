"""Output for people and machines: values as text (``values``), the table format (``humanize``), every
output format (``render``), the terminal status line (``console``), SVG plots and the Perfetto export.

See docs/architecture.md for the layers and who owns what.
"""
