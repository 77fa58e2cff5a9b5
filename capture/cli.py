"""``python -m capture``: record attention traces. Parses arguments, calls the library.

Every `CaptureError` (torch missing, CUDA absent, a bad option) becomes one
``Error: ...`` line on stderr and exit status 1; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from .attention import IMPLS, AttentionShape, parse_impls, run_attention
from .cluster import detect_cluster, finish_distributed, init_distributed, parse_ranks
from .errors import CaptureError
from .labels import ATTENTION_PREFIX, DEFAULT_PATTERNS
from .model import run_hf_model
from .samples import SAMPLE_DIR, record_gpu_samples, record_samples
from .serving import ENGINES, SERVING_SAMPLE_DIR, record_serving_samples
from .session import resolve_device
from .zoo import CASE_NAMES, DTYPES, record_zoo

_EXAMPLES = {
    "attention": "example: python -m capture attention --impl all --seq 1024 --out traces",
    "model": "example: python -m capture model --hf ./Llama-3.2-1B --seq 512 --out traces",
    "samples": "example: python -m capture samples --out sample_traces/cpu_attention",
    "zoo": "example: python -m capture zoo zoo_traces --only torch_llama_eager,hf_llama_sdpa",
}


def _recording_options() -> argparse.ArgumentParser:
    """Options shared by every recording command: output layout and profiler switches."""
    p = argparse.ArgumentParser(add_help=False)
    out = p.add_argument_group("output")
    out.add_argument("--out", default="traces", help="output directory (default: traces)")
    out.add_argument("--tag", help="run name, the sub-directory of --out (default: from the shapes)")
    out.add_argument(
        "--flat",
        action="store_true",
        help="write {out}/{name}.json.gz with stable names instead of "
        "{out}/{tag}/rank{R:05d}.{host}.{name}.{time}.json.gz",
    )
    out.add_argument("--ranks", help="record only on these ranks, e.g. 0,3 or 0-7 (others run unrecorded)")
    prof = p.add_argument_group("profiler")
    prof.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    prof.add_argument("--warmup", type=_count, default=3, help="un-profiled warm-up calls first (default 3)")
    prof.add_argument(
        "--steps",
        type=_positive,
        default=3,
        help="profiled steps, after the schedule's 1 wait and 1 warm-up step (default 3)",
    )
    prof.add_argument(
        "--record-shapes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="record input shapes; attribution and FLOPs use them (default on)",
    )
    prof.add_argument("--with-stack", action="store_true", help="record Python stacks (large traces)")
    prof.add_argument("--profile-memory", action="store_true", help="record allocations")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    return p


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m capture``."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}",
        description="Record PyTorch profiler traces of attention, labelled for tracekit.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    shared = _recording_options()

    att = sub.add_parser(
        "attention",
        parents=[shared],
        help="profile attention implementations on random q/k/v, one trace each",
        description="Profile one forward of each attention implementation on random "
        "q/k/v [B, H, S, D] under no_grad, one trace per implementation.",
        epilog=_EXAMPLES["attention"],
    )
    att.add_argument(
        "--impl",
        default="all",
        help=f"{', '.join(IMPLS)}, a comma list, or all (default: all)",
    )
    att.add_argument("--batch", type=_positive, default=8)
    att.add_argument("--heads", type=_positive, default=16)
    att.add_argument("--seq", type=_positive, default=1024)
    att.add_argument("--head-dim", type=_positive, default=64)
    att.add_argument("--dtype", default="auto", help="auto (bf16 on cuda, fp32 on cpu), bf16, fp16, fp32")
    att.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    att.add_argument("--compile", action="store_true", help="torch.compile the attention body")
    att.add_argument("--seed", type=int, default=0)
    att.add_argument(
        "--all-reduce",
        action="store_true",
        help="all-reduce each call's output over the job (under torchrun: gloo on cpu, nccl on cuda), "
        "so every rank's trace holds real collectives",
    )

    mod = sub.add_parser(
        "model",
        parents=[shared],
        help="profile forward passes of a transformers model with labelled attention",
        description="Load a transformers model, label its attention modules and "
        "profile forward passes on random token ids.",
        epilog=_EXAMPLES["model"],
    )
    mod.add_argument("--hf", required=True, metavar="MODEL_ID_OR_PATH", help="model to load")
    mod.add_argument("--batch", type=_positive, default=1)
    mod.add_argument("--seq", type=_positive, default=512)
    mod.add_argument("--dtype", default="auto", help="auto (bf16 on cuda, fp32 on cpu), bf16, fp16, fp32")
    mod.add_argument("--attn-impl", help="transformers attn_implementation (eager, sdpa, ...)")
    mod.add_argument(
        "--pattern",
        action="append",
        help="fnmatch pattern for attention modules, by class or module name; repeatable "
        "(default: *Attention and *attn*)",
    )

    smp = sub.add_parser(
        "samples",
        help="rewrite the repository's CPU sample traces",
        description="Record the reference variants that run on CPU at a small shape, "
        "with stable file names and a manifest.json.",
        epilog=_EXAMPLES["samples"],
    )
    smp.add_argument(
        "--out",
        help="output directory (default: sample_traces/cpu_attention, with --gpu sample_traces/gpu_<name>)",
    )
    smp.add_argument(
        "--gpu",
        action="store_true",
        help="record the post's setting on the GPU (bf16, batch 8, heads 16, seq 1024, head_dim 64) and a small Llama",
    )
    smp.add_argument("--debug", action="store_true", help="show tracebacks of errors")

    zoo = sub.add_parser(
        "zoo",
        help="record the trace zoo: tiny models with module scopes, and each again without",
        description="Record tiny transformer families on the CPU with with_stack and with_modules "
        "({name}.scoped.json.gz) and write each again without its python_function events "
        "({name}.stripped.json.gz), with a manifest.json.",
        epilog=_EXAMPLES["zoo"],
    )
    zoo.add_argument("outdir", metavar="OUTDIR", help="output directory")
    zoo.add_argument("--only", help=f"a comma list of cases (default: all): {', '.join(CASE_NAMES)}")
    zoo.add_argument(
        "--device", default="cpu", choices=("cpu", "cuda", "auto"), help="where the models run (default: cpu)"
    )
    zoo.add_argument("--dtype", default="float32", choices=DTYPES, help="the models' dtype (default: float32)")
    zoo.add_argument("--debug", action="store_true", help="show tracebacks of errors")

    srv = sub.add_parser(
        "serving",
        help="record CPU traces that annotate their steps as vLLM V1, vLLM, SGLang and TGI do",
        description="Run a tiny decoder through a plan of serving steps (prefill, decode, mixed) on the "
        "CPU, each step annotated as the engine annotates it, one trace per engine and a manifest.json.",
    )
    srv.add_argument("--out", default=str(SERVING_SAMPLE_DIR), help="output directory (default: %(default)s)")
    srv.add_argument("--engine", default="all", help=f"{', '.join(ENGINES)}, a comma list, or all (default: all)")
    srv.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    return parser


def _recording(args: argparse.Namespace, cluster) -> dict:
    """The library's keyword arguments for the options of ``_recording_options``."""
    return dict(
        out=args.out,
        device=args.device,
        tag=args.tag,
        flat=args.flat,
        ranks=parse_ranks(args.ranks),
        cluster=cluster,
        warmup=args.warmup,
        steps=args.steps,
        record_shapes=args.record_shapes,
        with_stack=args.with_stack,
        profile_memory=args.profile_memory,
    )


def _attention(args: argparse.Namespace) -> int:
    impls, explicit = parse_impls(args.impl)
    joined = args.all_reduce and init_distributed(resolve_device(args.device))
    try:
        return _attention_runs(args, impls, explicit)
    finally:
        if joined:
            finish_distributed()


def _attention_runs(args: argparse.Namespace, impls: list[str], explicit: bool) -> int:
    cluster = detect_cluster()
    recording = _recording(args, cluster)
    ran = failed = 0
    for impl in impls:
        if impl == "flex" and not args.compile:
            print("flex: note: without --compile flex_attention runs unfused", file=sys.stderr)
        outcome = run_attention(
            impl,
            shape=AttentionShape(args.batch, args.heads, args.seq, args.head_dim),
            dtype=args.dtype,
            causal=args.causal,
            compiled=args.compile,
            seed=args.seed,
            all_reduce=args.all_reduce,
            **recording,
        )
        note = f"rank {cluster.file_rank} not in --ranks {args.ranks}: ran without recording"
        if outcome.unavailable is not None:
            print(outcome.line(), file=sys.stderr)
            failed += 1
        else:
            print(outcome.line(note))
            ran += 1
    # `all` is a survey: what this device cannot run is expected, but a named
    # implementation that cannot run is an error.
    return 1 if (explicit and failed) or not ran else 0


def _model(args: argparse.Namespace) -> int:
    cluster = detect_cluster()
    result = run_hf_model(
        args.hf,
        batch=args.batch,
        seq=args.seq,
        dtype=args.dtype,
        attn_implementation=args.attn_impl,
        patterns=tuple(args.pattern or DEFAULT_PATTERNS),
        **_recording(args, cluster),
    )
    if result is None:
        print(f"rank {cluster.file_rank} not in --ranks {args.ranks}: ran without recording")
        return 0
    if not any(key.startswith(ATTENTION_PREFIX) for key in result.regions):
        print(
            "warning: no module matched the attention patterns; pass --pattern",
            file=sys.stderr,
        )
    print(result.summary(args.hf))
    return 0


def _samples(args: argparse.Namespace) -> int:
    if args.gpu:
        manifest, outcomes = record_gpu_samples(args.out)
    else:
        manifest, outcomes = record_samples(args.out or SAMPLE_DIR)
    for outcome in outcomes:
        print(outcome.line(), file=sys.stderr if outcome.unavailable else sys.stdout)
    print(f"manifest -> {manifest}")
    return 0


def _zoo(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None

    def progress(outcome) -> None:
        print(outcome.line(), file=sys.stderr if outcome.unavailable else sys.stdout, flush=True)

    manifest, _ = record_zoo(args.outdir, names, progress=progress, device=args.device, dtype=args.dtype)
    print(f"manifest -> {manifest}")
    return 0


def _serving(args: argparse.Namespace) -> int:
    engines = ENGINES if args.engine == "all" else tuple(e.strip() for e in args.engine.split(",") if e.strip())
    print(f"manifest -> {record_serving_samples(args.out, engines)}")
    return 0


_COMMANDS = {"attention": _attention, "model": _model, "samples": _samples, "zoo": _zoo, "serving": _serving}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m capture`` with `argv`; return the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except CaptureError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("Error: interrupted", file=sys.stderr)
        return 130
