"""Stage labels: the `record_function` ranges the analyzer attributes GPU time by.

Label scheme ``tracekit-1`` (the analyzer depends on it; keep it exact):

* one attention call is a range named ``attention:<impl>`` (``<impl>`` is any token
  without whitespace, e.g. ``flash``, ``naive``, ``LlamaAttention``);
* a stage inside it is a range named ``stage:<stage>``, with ``<stage>`` from `STAGES`.

In the exported trace both appear as ``cat: "user_annotation"`` complete events.
"""

from __future__ import annotations

import csv
import fnmatch
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import require

LABEL_SCHEME = "tracekit-1"
ATTENTION_PREFIX = "attention:"
STAGE_PREFIX = "stage:"


def _read_stages() -> tuple[str, ...]:
    # The vocabulary is declared once, in stages.csv beside this file; the analyzer reads it too.
    with open(Path(__file__).with_name("stages.csv"), newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return tuple(r["stage"] for r in sorted(rows, key=lambda r: int(r["order"])))


STAGES: tuple[str, ...] = _read_stages()

DEFAULT_PATTERNS: tuple[str, ...] = ("*Attention", "*attn*")

# Child-module names (last component of the qualified name, lower-cased) that are
# projections or rotary embeddings in common model families: Llama/Mistral/Qwen
# (q_proj...o_proj), GPT-2 (c_attn/c_proj), GPT-NeoX/Falcon (query_key_value/dense),
# BERT (query/key/value, output.dense), T5 (q/k/v/o), MPT (Wqkv), Meta's reference
# Llama (wq/wk/wv/wo).
_CHILD_STAGES: tuple[tuple[str, str], ...] = (
    ("q_proj", "qkv_proj"),
    ("k_proj", "qkv_proj"),
    ("v_proj", "qkv_proj"),
    ("qkv", "qkv_proj"),
    ("qkv_proj", "qkv_proj"),
    ("query", "qkv_proj"),
    ("key", "qkv_proj"),
    ("value", "qkv_proj"),
    ("query_key_value", "qkv_proj"),
    ("c_attn", "qkv_proj"),
    ("wqkv", "qkv_proj"),
    ("wq", "qkv_proj"),
    ("wk", "qkv_proj"),
    ("wv", "qkv_proj"),
    ("q", "qkv_proj"),
    ("k", "qkv_proj"),
    ("v", "qkv_proj"),
    ("o_proj", "out_proj"),
    ("out_proj", "out_proj"),
    ("dense", "out_proj"),
    ("c_proj", "out_proj"),
    ("wo", "out_proj"),
    ("o", "out_proj"),
    ("*rotary*", "rope"),
    ("*rope*", "rope"),
)


def _check_token(kind: str, value: str) -> None:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError(f"{kind} label must be a non-empty token without whitespace, got {value!r}")


def _check_stage(name: str) -> None:
    if name not in STAGES:
        raise ValueError(f"unknown attention stage {name!r}; use one of: {', '.join(STAGES)}")


def attention_label(impl: str) -> str:
    """Return the range name of one attention call, ``attention:<impl>``."""
    _check_token("attention", impl)
    return ATTENTION_PREFIX + impl


def stage_label(name: str) -> str:
    """Return the range name of one stage, ``stage:<name>``; `name` must be in `STAGES`."""
    _check_stage(name)
    return STAGE_PREFIX + name


@contextmanager
def attention_call(impl: str) -> Iterator[None]:
    """Mark the enclosed code as one attention call, range ``attention:<impl>``."""
    name = attention_label(impl)
    profiler = require("torch.profiler")
    with profiler.record_function(name):
        yield


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Mark the enclosed code as one attention stage, range ``stage:<name>``.

    Raises ValueError when `name` is not in the stage vocabulary `STAGES`.
    """
    label = stage_label(name)
    profiler = require("torch.profiler")
    with profiler.record_function(label):
        yield


def child_stage(child_name: str) -> str | None:
    """Return the stage a child module of an attention module stands for, if any.

    `child_name` is the last component of the child's qualified name (``q_proj``,
    ``rotary_emb``); None when the name is not a known projection or rotary embedding.
    """
    lowered = child_name.lower()
    for pattern, stage_name in _CHILD_STAGES:
        if fnmatch.fnmatchcase(lowered, pattern):
            return stage_name
    return None


# Set on the forward wrappers so a second label_modules() call recognises them.
_MARK = "__tracekit_label__"


@dataclass
class LabelHandle:
    """The modules `label_modules` wrapped; `remove()` restores their forwards.

    `labels` lists ``(qualified module name, range name)`` in model order. Also
    usable as a context manager that removes the labels on exit.
    """

    labels: list[tuple[str, str]] = field(default_factory=list)
    _undo: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def remove(self) -> None:
        """Restore every wrapped forward; calling it twice is harmless."""
        while self._undo:
            self._undo.pop()()
        self.labels.clear()

    @property
    def attention_modules(self) -> list[str]:
        """Qualified names of the modules labelled as attention calls."""
        return [name for name, label in self.labels if label.startswith(ATTENTION_PREFIX)]

    def __enter__(self) -> LabelHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _matches(qualified: str, module: Any, patterns: Iterable[str]) -> bool:
    cls = type(module)
    class_name = cls.__name__.lower()
    # A match by module name alone is a false positive when it hits a building block:
    # a torch.nn module (``attn_dropout``, a ModuleList ``attn_layers``) or a leaf such
    # as a model's own RMSNorm called ``attn_norm``. Attention modules own projections,
    # so a name-only match needs children; torch.nn classes match by class name only
    # (MultiheadAttention).
    name_counts = not cls.__module__.startswith("torch.nn") and any(True for _ in module.children())
    for pattern in patterns:
        p = pattern.lower()
        if fnmatch.fnmatchcase(class_name, p):
            return True
        if name_counts and fnmatch.fnmatchcase(qualified.lower(), p):
            return True
    return False


def _wrap_forward(module: Any, label: str, handle: LabelHandle) -> None:
    profiler = require("torch.profiler")
    had_own = "forward" in module.__dict__
    previous = module.__dict__.get("forward")
    inner = module.forward

    # Wrapping forward (not pre/post hooks) keeps the range balanced when forward
    # raises, and an instance attribute leaves the class and other instances alone.
    def forward(*args: Any, **kwargs: Any) -> Any:
        with profiler.record_function(label):
            return inner(*args, **kwargs)

    setattr(forward, _MARK, label)
    module.forward = forward

    def undo() -> None:
        if had_own:
            module.forward = previous
        else:
            del module.forward

    handle._undo.append(undo)


def label_modules(model: Any, patterns: Iterable[str] = DEFAULT_PATTERNS) -> LabelHandle:
    """Label the attention modules of `model` so each forward is one attention call.

    A module matches when its class name or its qualified module name matches one of
    the fnmatch `patterns` (case-insensitive); a match by name alone counts only for a
    module that has child modules and is not a torch.nn class. Its forward becomes an
    ``attention:<ClassName>`` range. Inside a match, child modules named like
    projections become ``stage:qkv_proj`` / ``stage:out_proj`` ranges and rotary
    embedding modules ``stage:rope`` (see `child_stage`). Modules nested in a match
    are not wrapped again, nor are modules an earlier call already labelled.
    Returns a `LabelHandle`; call ``.remove()`` to undo.
    """
    patterns = tuple(patterns)
    handle = LabelHandle()
    done: list[str] = []  # subtrees already labelled, by this call or an earlier one
    for qualified, module in model.named_modules():
        if any(_within(qualified, root) for root in done):
            continue
        if _is_labelled(module):
            done.append(qualified)
            continue
        if not _matches(qualified, module, patterns):
            continue
        done.append(qualified)
        label = attention_label(type(module).__name__)
        _wrap_forward(module, label, handle)
        handle.labels.append((qualified, label))
        staged: list[str] = []
        for child_name, child in module.named_modules():
            if not child_name or any(_within(child_name, s) for s in staged):
                continue
            stage_name = child_stage(child_name.rsplit(".", 1)[-1])
            if stage_name is None or _is_labelled(child):
                continue
            staged.append(child_name)
            child_label = stage_label(stage_name)
            _wrap_forward(child, child_label, handle)
            handle.labels.append((_join(qualified, child_name), child_label))
    return handle


def _within(qualified: str, root: str) -> bool:
    """True when module `qualified` lies strictly below module `root`."""
    return qualified != root and (root == "" or qualified.startswith(root + "."))


def _join(parent: str, child: str) -> str:
    return f"{parent}.{child}" if parent else child


def _is_labelled(module: Any) -> bool:
    return getattr(module.__dict__.get("forward"), _MARK, None) is not None
