"""The named-query library: ``.sql`` files with a documented header, checked parameters, composed into SQL.

See docs/architecture.md for the layers and who owns what.
"""
