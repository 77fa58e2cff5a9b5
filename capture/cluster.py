"""Where a trace comes from on a cluster (rank, host, job) and where it is written.

Cluster layout of output files::

    {outdir}/{tag}/rank{rank:05d}.{host}[.{name}].{time}-{pid}-{n}.json.gz

`time` is UTC ``%Y%m%dT%H%M%SZ``; `pid` and the per-process counter `n` keep two
processes of one rank (or two runs within a second) from overwriting each other, so
an unknown rank can safely be written as ``rank00000``.
"""

from __future__ import annotations

import gzip
import itertools
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from .errors import CaptureError

# Checked in order: the launcher that set the first one present wins.
RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
WORLD_SIZE_VARS = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
JOB_ID_VARS = (
    "SLURM_JOB_ID",
    "PBS_JOBID",
    "LSB_JOBID",
    "JOB_ID",
    "FLUX_JOB_ID",
    "COBALT_JOBID",
    "TORCHELASTIC_RUN_ID",
)


@dataclass(frozen=True)
class ClusterInfo:
    """The process's place in a job; None where nothing tells."""

    rank: int | None
    world_size: int | None
    local_rank: int | None
    host: str
    job_id: str | None

    @property
    def file_rank(self) -> int:
        """The rank used in file names: the real one, or 0 when it is unknown."""
        return 0 if self.rank is None else self.rank

    def as_dict(self) -> dict[str, object]:
        """The fields as a JSON-ready dict, for trace metadata."""
        return asdict(self)


def _env_int(env: Mapping[str, str], names: Iterable[str]) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                continue  # e.g. an unexpanded template; try the next launcher's variable
    return None


def _env_str(env: Mapping[str, str], names: Iterable[str]) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        # torchrun sets TORCHELASTIC_RUN_ID to "none" outside rendezvous jobs.
        if value and value.lower() != "none":
            return value
    return None


def _distributed() -> tuple[int, int] | None:
    # Only look if torch is already loaded: reading the environment must not pull in
    # torch, and an uninitialised process group cannot have been set up without it.
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def init_distributed(device: str, env: Mapping[str, str] | None = None) -> bool:
    """Join the job's default process group (gloo on CPU, nccl on CUDA) from the launcher's environment
    (torchrun's MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE); True when this call created it.

    For recordings whose steps run collectives (``capture attention --all-reduce``): Kineto then writes
    ``distributedInfo`` and the collectives into every rank's trace.
    """
    import torch.distributed as dist

    env = os.environ if env is None else env
    if not dist.is_available():
        raise CaptureError("--all-reduce: this torch build has no torch.distributed")
    if dist.is_initialized():
        return False
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE") if not env.get(name)]
    if missing:
        raise CaptureError(
            f"--all-reduce needs a launcher's process group ({', '.join(missing)} not set): "
            "run under torchrun, e.g. torchrun --nproc-per-node 2 -m capture attention --all-reduce ..."
        )
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    return True


def finish_distributed() -> None:
    """Leave the process group ``init_distributed`` joined."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def detect_cluster(env: Mapping[str, str] | None = None) -> ClusterInfo:
    """Return rank, world size, local rank, host and job id of this process.

    Rank and world size come from an initialised `torch.distributed` process group,
    else from the launcher's environment (torchrun, Slurm, Open MPI, PMI); job id from
    the scheduler's (Slurm, PBS, LSF, SGE, Flux, Cobalt, torchrun). `env` defaults to
    `os.environ`.
    """
    env = os.environ if env is None else env
    rank = _env_int(env, RANK_VARS)
    world_size = _env_int(env, WORLD_SIZE_VARS)
    dist = _distributed()
    if dist is not None:
        rank, world_size = dist
    return ClusterInfo(
        rank=rank,
        world_size=world_size,
        local_rank=_env_int(env, LOCAL_RANK_VARS),
        host=socket.gethostname() or "unknown-host",
        job_id=_env_str(env, JOB_ID_VARS),
    )


def parse_ranks(text: str | None) -> frozenset[int] | None:
    """Parse a ``--ranks`` value such as ``0,3`` or ``0-3,8``; None or "" means all."""
    if text is None or not text.strip():
        return None
    ranks: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError
                ranks.update(range(lo, hi + 1))
            else:
                ranks.add(int(part))
        except ValueError:
            raise CaptureError(
                f"bad --ranks value {text!r}: use comma-separated ranks or ranges, e.g. 0,3 or 0-7"
            ) from None
    return frozenset(ranks)


def should_record(info: ClusterInfo, ranks: frozenset[int] | None) -> bool:
    """True when this process records: `ranks` is None or contains its rank (0 if unknown)."""
    return ranks is None or info.file_rank in ranks


_SAFE = re.compile(r"[^A-Za-z0-9_-]+")
_counter = itertools.count()


def safe_token(text: str) -> str:
    """`text` reduced to letters, digits, ``_`` and ``-``, for one file-name field."""
    return _SAFE.sub("-", text).strip("-") or "x"


def trace_path(
    outdir: str | os.PathLike[str],
    tag: str,
    info: ClusterInfo,
    name: str | None = None,
    now: float | None = None,
) -> Path:
    """Return a fresh cluster-layout path for one trace (see the module docstring).

    The host field is the short host name (up to the first dot) so that the dots in
    the file name stay field separators; `name` (e.g. the implementation) is optional.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    host = safe_token(info.host.split(".")[0])
    fields = [f"rank{info.file_rank:05d}", host]
    if name:
        fields.append(safe_token(name))
    directory = Path(outdir) / safe_token(tag)
    while True:
        path = directory / ".".join([*fields, f"{stamp}-{os.getpid()}-{next(_counter)}"])
        path = path.with_name(path.name + ".json.gz")
        if not path.exists():
            return path


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object]) -> Path:
    """Write a file through `write(fileobj)` into a temp file, then rename it into place.

    Readers (and a crashed writer) never leave or see a half-written trace; the
    rename is atomic because the temp file lies in the target's directory.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        # mkstemp creates the file 0600; traces are usually read by others on the
        # cluster (and by the analyzer under another account).
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return target


def gzip_into(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Gzip file `source` atomically into `target`."""

    def write(fh: IO[bytes]) -> None:
        # No file name and a zero mtime in the gzip header: the temp name means
        # nothing, and identical traces then compress to identical files.
        with open(source, "rb") as src, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as gz:
            while chunk := src.read(1 << 20):
                gz.write(chunk)

    return atomic_write(target, write)


def output_path(
    outdir: str | os.PathLike[str],
    tag: str,
    info: ClusterInfo,
    name: str,
    flat: bool = False,
) -> Path:
    """The path for one trace: ``{outdir}/{name}.json.gz`` when `flat`, else `trace_path`.

    Flat names are stable, for sample traces and single-machine runs; a second run
    replaces the file.
    """
    if flat:
        return Path(outdir) / f"{safe_token(name)}.json.gz"
    return trace_path(outdir, tag, info, name=name)
