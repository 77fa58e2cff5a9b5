"""Databases: the build's steps in order (``pipeline``), a ``.duckdb`` built atomically and cached
(``database``), many files at once (``parallel``) and Parquet datasets and Dask (``dataset``).

See docs/architecture.md for the layers and who owns what.
"""


def __getattr__(name: str):
    """A submodule on first use, so ``import tracekit`` alone reaches it (the README's spelling)."""
    import importlib
    import importlib.util

    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
