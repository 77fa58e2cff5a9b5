"""What long work shows on a terminal: one self-overwriting status line on stderr.

Silent when stderr is not a terminal (piped, CI), so output stays clean. The
CLI hands these to the library as ``progress`` / ``on_link`` callbacks; the
library never prints.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracekit.present.values import format_unit


class StatusLine:
    """One self-overwriting status line on a terminal; silent when stderr is piped."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self.shown = False

    def show(self, text: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\x1b[2K{text}")
            sys.stderr.flush()
            self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


class Progress(StatusLine):
    """Progress of a load (bytes read; files done when there are several); shown for inputs of 32 MB or more,
    or of 8 files or more."""

    MANY_FILES = 8

    def __call__(self, done: int, total: int, name: str, files: tuple[int, int] | None = None) -> None:
        if total >= (32 << 20) or (files is not None and files[1] >= self.MANY_FILES):
            pct = 100 * done / total if total else 100
            label = Path(name).name if name else "writing the database"
            count = f"{files[0]:,}/{files[1]:,} files  " if files else ""
            digits = 0 if total >= 10_000_000 else 1
            self.show(f"loading {pct:5.1f}%  {count}{done / 1e6:,.{digits}f}/{total / 1e6:,.{digits}f} MB  {label}")


class Steps(StatusLine):
    """Progress of a job of many steps (a report's queries)."""

    def __init__(self, enabled: bool, what: str):
        super().__init__(enabled)
        self.what = what

    def __call__(self, done: int, total: int, name: str) -> None:
        self.show(f"{self.what}: {done}/{total} {name}")


def warn(message: str) -> None:
    click.echo(f"Warning: {message}", err=True)


def note(message: str) -> None:
    click.echo(f"Note: {message}", err=True)


def orphan_note(orphans: tuple[int, int], how: str) -> None:
    """One line on stderr saying which GPU ops a command left out: ``orphans`` is (count, ns); nothing when none."""
    count, ns = orphans
    if count:
        click.echo(
            f"Note: left out {count:,} GPU op(s) launched before the trace ({format_unit(ns, 'ms')}); {how} counts them.",
            err=True,
        )


def rank_notes(rows: list[dict]) -> None:
    """One line on stderr per row of the rank_notes query: what the cross-rank figures could not cover, and why."""
    for row in rows:
        spent = f" ({format_unit(row['comm_ns'], 'ms')} of communication)" if row.get("comm_ns") else ""
        click.echo(f"Note: {row['note']}{spent}", err=True)


class Waiting(StatusLine):
    """A status line while another tracekit process builds or links the same trace."""

    def __init__(self, enabled: bool, source: str, what: str):
        super().__init__(enabled)
        self.source = source
        self.what = what

    def __call__(self, seconds: float) -> None:
        if seconds >= 0.5:
            self.show(
                f"waiting for another tracekit process {self.what} {Path(self.source).name} ({seconds:.0f} s) ..."
            )


class LinkNotice(StatusLine):
    """A status line while the linked tables are built on first use."""

    def __init__(self, enabled: bool, source: str):
        super().__init__(enabled)
        self.source = source

    def __call__(self, starting: bool) -> None:
        if starting:
            self.show(f"linking {Path(self.source).name}: CPU op stacks, launches, attention stages (once) ...")
        else:
            self.close()
