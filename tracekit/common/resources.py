"""Data shipped inside tracekit's packages, found through the import system.

The rule tables (``tracekit.rules``), the query library (``tracekit.queries``)
and the stage vocabulary (``stages.csv`` of ``tracekit.capture``) live in
packages of their own, installed from the wheel or mapped from a checkout by an
editable install; nothing here assumes where the repository is.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
from pathlib import Path

from tracekit.errors import TracekitError


def data_dir(package: str) -> Path:
    """The folder of data package ``package`` (``tracekit.rules``, ``tracekit.queries``)."""
    try:
        folder = importlib.resources.files(package)
    except ModuleNotFoundError:
        raise TracekitError(f"{package} is missing from this installation: reinstall tracekit") from None
    if not isinstance(folder, Path) or not folder.is_dir():
        raise TracekitError(f"{package} is not a folder on disk ({folder}): install tracekit unzipped")
    return folder


def file_beside(package: str, name: str) -> Path:
    """File ``name`` beside the ``__init__.py`` of ``package``, found without importing the package
    (``tracekit.capture`` imports torch's side of the project)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise TracekitError(f"{package} is missing from this installation: {name} not found")
    return Path(spec.origin).with_name(name)
