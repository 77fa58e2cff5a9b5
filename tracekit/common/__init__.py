"""What every layer shares: SQL quoting, checks on user values, atomic outputs, locks between processes,
background imports, kernel names for people, and where shipped data files are.

See docs/architecture.md for the layers and who owns what.
"""
