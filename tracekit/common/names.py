"""Kernel and op names for people: demangling, and shortening that keeps names apart.

``demangle`` turns an Itanium-mangled symbol (``_ZN5aiter24add_rmsnorm_quant_kernel...``,
as ROCm and some CUDA libraries report kernels) into C++ text with the maintained
``cpp_demangle`` library (the Rust crate's binding); a mangled name it cannot parse gives
its function's name (``nested_name``, a small decoder of the symbol's head), and one that is
not mangled comes back unchanged. ``shorten`` cuts a long name in the middle, keeping
its head and its distinguishing tail; ``shorten_all`` shortens a set of names so that
distinct names stay distinct (a diff by kernel never shows one text as both added and
removed). The stored tables always keep the raw names.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator

ELLIPSIS = "…"


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """C++ text of an Itanium-mangled ``name`` (``_Z...``); any other name unchanged. A symbol the demangler
    cannot read whole (cut short, an expression it does not parse) gives its function's name (``nested_name``)."""
    if not isinstance(name, str) or not name.startswith(("_Z", "__Z")):
        return name
    try:
        import cpp_demangle
    except ImportError:  # a dependency; tolerated missing so that names still show
        return nested_name(name) or name
    try:
        return str(cpp_demangle.demangle(name.removeprefix("_") if name.startswith("__Z") else name))
    except (ValueError, RuntimeError):
        return nested_name(name) or name


_LENGTH = re.compile(r"[1-9][0-9]*")


def nested_name(symbol: str) -> str | None:
    """The function's name at the head of an Itanium symbol: ``_ZN4vllm25fused_add_rms_norm_kernelI...`` ->
    ``vllm::fused_add_rms_norm_kernel``, its source names up to the first template or parameter list
    (``St`` is ``std``, ``_GLOBAL__N_1`` the anonymous namespace). None when the head is no such name or an
    identifier in it is cut short."""
    s = symbol.removeprefix("_") if symbol.startswith("__Z") else symbol
    if not s.startswith("_Z"):
        return None
    i, nested = (3, True) if s.startswith("_ZN") else (2, False)
    while nested and i < len(s) and s[i] in "KVrRO":  # a member function's cv- and ref-qualifiers
        i += 1
    parts = []
    if nested and s.startswith("St", i):
        parts.append("std")
        i += 2
    while True:
        m = _LENGTH.match(s, i)
        if not m:
            break
        n, i = int(m.group()), m.end()
        if i + n > len(s):
            return None
        part = s[i : i + n]
        parts.append("(anonymous namespace)" if part.startswith("_GLOBAL__N") else part)
        i += n
        if not nested:
            break
    return "::".join(parts) if parts and parts[-1] != "(anonymous namespace)" else None


# A return type before the name: void, or SFINAE's std::enable_if<...>::type (vLLM's fused_add_rms_norm_kernel);
# the kernel_base macro drops the same ones for kernel rules.
_RETURN_TYPE = re.compile(r"^(?:void|std::enable_if<.*?>::type) +")


def readable(name: str) -> str:
    """The name as a table shows it: demangled, without a leading return type (``void``,
    ``std::enable_if<...>::type``)."""
    return _RETURN_TYPE.sub("", demangle(name))


def _without_params(text: str) -> str:
    """``f<T>(int, float)`` -> ``f<T>(…)``: a C++ signature's trailing parameter list elided."""
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            return text[:i] + "(…)" if i > 0 and len(text) - i > 3 else text
    return text


_ANON = re.compile(r"\(anonymous namespace\)::")
_LAMBDAS = re.compile(r"(::\{lambda\([^{}]*?\)#\d+\}(::operator\(\)\(\) const)?)+")
_CALL = re.compile(r"([\w>])\([^()]*\)")
_ARRAY = re.compile(r",\s*(?:std::)?array<char\*, \d+ul>")
_QUALIFIED = re.compile(r"\b(?:\w+::)+(?=[~\w])")
_MODULE = re.compile(r"^nn\.Module: ")


def _strip_params(text: str) -> str:
    """``f<T>(int, float)`` -> ``f<T>``: a C++ signature's parameter list dropped."""
    short = _without_params(text)
    return short[:-3] if short.endswith("(…)") and short != text else text


def _clean(text: str) -> str:
    """Noise dropped: the anonymous namespace, lambda chains, the parameters of functions named in template
    arguments (``where_kernel_impl(at::TensorIterator&)`` -> ``where_kernel_impl``)."""
    text = _ARRAY.sub("", _LAMBDAS.sub("", _ANON.sub("", text)))
    while True:
        shorter = _CALL.sub(r"\1", text)
        if shorter == text:
            return text
        text = shorter


def _namespaces(text: str, keep_head: bool) -> str:
    """Namespaces dropped from every name in the template arguments; the head keeps its first and last
    (``cutlass::gemm::device::Gemm<...>`` -> ``cutlass::…::Gemm<...>``), or only its last."""
    cut = text.find("<")
    head, rest = (text, "") if cut < 0 else (text[:cut], text[cut:])
    parts = head.split("::")
    if not keep_head:
        head = parts[-1]
    elif len(parts) >= 3:
        head = f"{parts[0]}::{ELLIPSIS}::{parts[-1]}"
    return head + _QUALIFIED.sub("", rest)


def _templates(text: str, depth: int) -> str:
    """Template arguments deeper than ``depth`` elided: ``gemm<a<b>>`` at depth 1 -> ``gemm<a<…>>``, at 0 ->
    ``gemm<…>``."""
    out = []
    level = 0
    for ch in text:
        if ch == "<":
            level += 1
            if level == depth + 1:
                out.append("<" + ELLIPSIS)
            elif level <= depth:
                out.append(ch)
        elif ch == ">":
            if level <= depth:
                out.append(ch)
            elif level == depth + 1:
                out.append(">")
            level = max(0, level - 1)
        elif level <= depth:
            out.append(ch)
    return "".join(out)


def _nesting(text: str) -> int:
    level = most = 0
    for ch in text:
        level += ch == "<"
        most = max(most, level)
        level -= ch == ">" and level > 0
    return most


def _forms(text: str) -> Iterator[str]:
    """``compactions``, one at a time (a caller that stops at the first form that fits does no more work)."""
    yield text
    if "::" not in text and "<" not in text:
        return
    forms = [text]
    for step in (
        _strip_params,
        _clean,
        lambda t: _namespaces(t, True),
        lambda t: _namespaces(t, False),
    ):
        form = step(forms[-1])
        if form != forms[-1]:
            forms.append(form)
            yield form
    last = forms[-1]
    headed = _templates(_namespaces(forms[2] if len(forms) > 2 else last, True), 0)
    for depth in range(_nesting(last) - 1, -1, -1):
        form = _templates(last, depth)
        if depth == 0 and headed not in forms and len(headed) < len(forms[-1]):
            forms.append(headed)  # cutlass::…::gemm<…> before gemm<…>
            yield headed
        if form != forms[-1]:
            forms.append(form)
            yield form


def compactions(text: str) -> list[str]:
    """Ever shorter forms of a C++ name that keep what it is: parameters dropped, then noise (anonymous
    namespaces, lambdas), then namespaces (``cutlass::…::gemm``), then template arguments from the deepest
    (``gemm<…>``). Other text: itself only."""
    return list(_forms(text))


def base(text: str, forms: list[str] | None = None) -> str:
    """The most compact form of ``text`` that elides no template argument: what a middle cut cuts."""
    forms = forms or compactions(_MODULE.sub("", text))
    return next((f for f in reversed(forms) if "<" + ELLIPSIS not in f), forms[0])


def shorten(text: str, width: int, at: int | None = None, form: str | None = None) -> str:
    """``text`` cut to ``width`` characters. A C++ name sheds its parameter list, lambdas, namespaces
    and then its deepest template arguments (``compactions``: ``cutlass::…::gemm<…>``) before anything is
    cut; a module scope sheds ``nn.Module:``; what is still too long is cut in the middle, keeping the
    head (what it is) and the tail (which one: a tile shape, a suffix). ``at``: keep the characters
    from this index on visible too (where the text differs from a similar one) of ``form`` (default: its
    ``base``)."""
    if width <= 0 or len(text) <= width:
        return text
    if text.count(" ") >= 3 and "::" not in text and "<" not in text:  # prose (a doc): cut at the end
        return text[: width - 1] + ELLIPSIS
    if form is not None:
        text = form
    else:
        if at is None:
            forms = list(_forms(_MODULE.sub("", text)))
            fitting = next((f for f in forms if len(f) <= width), None)
            if fitting is not None:
                return fitting
            text = forms[-1]  # even the most compact form is too long: cut that one
        else:
            text = base(text)
    if len(text) <= width:
        return text
    if width == 1:
        return ELLIPSIS
    if at is not None and width >= 12 and 0 < at < len(text):
        side = max(1, (width - 2) // 4)
        mid = width - 2 - 2 * side
        lo = min(max(side, at - mid // 3), len(text) - side - mid)
        if lo > side:
            return text[:side] + ELLIPSIS + text[lo : lo + mid] + ELLIPSIS + text[len(text) - side :]
    tail = (width - 1) // 2
    head = width - 1 - tail
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _diverge_all(forms: dict[str, str]) -> dict[str, int]:
    """``{text: where its form first differs from the most similar other form}``: in sorted order the most
    similar form is a neighbour, so this is linear in the texts after the sort (a clash of thousands of
    names once made the table format quadratic)."""
    order = sorted(forms, key=lambda t: forms[t])
    out = {}
    for k, t in enumerate(order):
        before = _common(forms[t], forms[order[k - 1]]) if k else 0
        after = _common(forms[t], forms[order[k + 1]]) if k + 1 < len(order) else 0
        out[t] = max(before, after)
    return out


def shorten_all(texts: Iterable[str], width: int) -> dict[str, str]:
    """``{text: shortened}`` for each distinct text, every shortened text distinct.

    Texts whose shortenings collide show the place where they differ (between the head
    and the tail); if that is not enough they are widened until they differ."""
    uniq = sorted(set(texts))
    out = {t: shorten(t, width) for t in uniq}
    w = width
    first = True
    while True:
        seen: dict[str, list[str]] = {}
        for t, s in out.items():
            seen.setdefault(s, []).append(t)
        clashes = [ts for ts in seen.values() if len(ts) > 1]
        if not clashes:
            return out
        if not first:
            w += max(4, w // 4)
        for ts in clashes:
            forms = {t: base(t) if len(t) > w else t for t in ts}
            if len(set(forms.values())) < len(ts):  # the compact forms are alike: cut the names themselves
                forms = {t: _without_params(t) if len(t) > w else t for t in ts}
            plain = {t: shorten(t, w, form=forms[t]) for t in ts}
            alike: dict[str, int] = {}
            for p in plain.values():
                alike[p] = alike.get(p, 0) + 1
            diverge = _diverge_all(forms)
            for t in ts:
                if alike[plain[t]] == 1:  # head and tail of its compact form tell it apart
                    out[t] = plain[t]
                    continue
                out[t] = shorten(t, w, at=diverge[t], form=forms[t])
        first = False
