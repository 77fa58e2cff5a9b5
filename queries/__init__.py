"""The shipped query library: ``<domain>/<name>.sql`` files read by ``tracekit.library.queries``."""
