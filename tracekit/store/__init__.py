"""Databases: the build's steps in order (``pipeline``), a ``.duckdb`` built atomically and cached
(``database``), many files at once (``parallel``) and Parquet datasets and Dask (``dataset``).

See docs/architecture.md for the layers and who owns what.
"""
