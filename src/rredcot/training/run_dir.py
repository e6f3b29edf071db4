"""A run directory's identity and ownership: its run record, stale copies, lock and checkpoints.

A directory left by a run with another record (settings, arguments, inputs by content, launch)
is moved aside to `<out>.stale-N` rather than resumed (`claim_run_dir`); `<out>.lock` keeps a
second trainer out (`run_dir_lock`); a restarted run resumes from the newest checkpoint whose
files are whole (`resume_point`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
import zipfile
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from transformers import PreTrainedModel
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from rredcot.planning.machine import machine_info
from rredcot.training.settings import TrainingSettings

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- the run record

RUN_RECORD = "run_record.json"
_FINGERPRINT_CHUNK = 1 << 20


def fingerprint(path: str | Path) -> str:
    """A content fingerprint of a file or directory (a Hub id that is no local path: the id).

    sha256 over every file's relative path, size, first and last MiB: cheap for multi-GB
    checkpoints and changed by any retraining or re-export in practice."""
    path = Path(path)
    if not path.exists():
        return f"id:{path}"
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        size = f.stat().st_size
        digest.update(f"{f.relative_to(path) if path.is_dir() else f.name}:{size}".encode())
        with f.open("rb") as fh:
            digest.update(fh.read(_FINGERPRINT_CHUNK))
            if size > 2 * _FINGERPRINT_CHUNK:
                fh.seek(-_FINGERPRINT_CHUNK, 2)
                digest.update(fh.read())
    return digest.hexdigest()


def job_record(
    arguments: Mapping[str, Any], inputs: Collection[str], not_identity: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str | None]]:
    """A job's arguments as the (arguments, inputs) blocks of its run record.

    Every argument is in one of them unless `not_identity` names it, with the reason (a
    setting that does not change what the run computes): so an argument added to a step
    script is compared without anyone listing it. `inputs` (paths) are recorded by content
    (`fingerprint`; None when not given); another argument that is a path is an error, as it
    would be compared by name only.
    """
    unknown = sorted(set(inputs) - set(arguments))
    if unknown:
        raise ValueError(f"job_record: input(s) {unknown} are not arguments {sorted(arguments)}")
    fingerprints = {k: None if arguments[k] is None else fingerprint(arguments[k]) for k in inputs}
    rest = {k: v for k, v in arguments.items() if k not in inputs and k not in not_identity}
    paths = sorted(k for k, v in rest.items() if isinstance(v, Path))
    if paths:
        raise ValueError(
            f"job_record: argument(s) {paths} are paths; declare them inputs (fingerprinted) "
            "or not identity (with the reason)"
        )
    return json.loads(json.dumps(rest)), fingerprints


def launch_info(policy: PreTrainedModel, device: str) -> dict[str, Any]:
    """How this process was launched and what it trains: processes, accelerate's distributed
    type and ZeRO stage (they decide the checkpoints' layout and the data each process sees), and
    the dtype the policy was loaded in."""
    from accelerate import PartialState

    state = PartialState(cpu=device == "cpu")
    plugin = getattr(state, "deepspeed_plugin", None)
    return {
        "processes": state.num_processes,
        "distributed_type": str(state.distributed_type),
        "zero_stage": getattr(plugin, "zero_stage", None),
        "policy_dtype": str(policy.dtype).removeprefix("torch."),
    }


def run_record(
    settings: TrainingSettings,
    fingerprints: Mapping[str, str | None],
    arguments: Mapping[str, Any] | None = None,
    launch: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What a run directory was started with: the settings, the job's other arguments (e.g. the
    policy's dtype), the inputs' fingerprints and the launch (its identity, `RECORD_IDENTITY`),
    and the machine it started on (recorded, not compared: a run may resume on another node)."""
    return {
        "settings": settings.to_dict(),
        "arguments": dict(sorted((arguments or {}).items())),
        "inputs": dict(sorted(fingerprints.items())),
        "launch": dict(sorted((launch or {}).items())),
        "machine": machine_info(),
    }


RECORD_IDENTITY: tuple[str, ...] = ("settings", "arguments", "inputs", "launch")


def _identity(record: Any) -> Any:
    """The blocks of a run record that decide whether a directory belongs to a run."""
    if not isinstance(record, dict):
        return record
    return {k: record.get(k) for k in RECORD_IDENTITY}


def _changed_keys(old: Any, new: Mapping[str, Any]) -> list[str]:
    """`<block>.<key>` entries that differ between two run records (`<block>` alone when the old
    record lacks the block: it was written before the block existed)."""
    if not isinstance(old, dict):
        return ["no record"]
    keys = []
    for block in RECORD_IDENTITY:
        if block not in old:
            keys += [f"{block} (not in the old record)"] * (block in new)
            continue
        a, b = old[block], json.loads(json.dumps(new.get(block, {})))
        keys += [f"{block}.{k}" for k in sorted({*a, *b}) if a.get(k) != b.get(k)]
    return keys


def _stale_copies(out: Path) -> list[Path]:
    """`out.stale-N` directories, by N."""
    found = [
        p
        for p in out.parent.glob(f"{out.name}.stale-*")
        if p.is_dir() and p.name.removeprefix(f"{out.name}.stale-").isdigit()
    ]
    return sorted(found, key=lambda p: int(p.name.removeprefix(f"{out.name}.stale-")))


def prune_stale(out: Path) -> None:
    """Delete the intermediate checkpoints of every `out.stale-N` (at paper scale hundreds of
    GB that no run resumes from), keeping what tells the old run apart (final/, metrics,
    curve, record, summary); each deletion is logged."""
    for stale in _stale_copies(out):
        for p in sorted(
            stale.glob(f"{PREFIX_CHECKPOINT_DIR}-*"), key=lambda p: (len(p.name), p.name)
        ):
            if p.is_dir():
                size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
                log.warning("deleting checkpoint %s of a stale run (%.1f MB)", p, size / 1e6)
                shutil.rmtree(p)


def claim_run_dir(
    out: Path, record: Mapping[str, Any], main: bool = True, keep_stale_checkpoints: bool = False
) -> None:
    """Make `out` a directory of this run: checkpoints left by a run with another record
    (other settings, arguments, base model, training data or launch) are moved aside to
    `out.stale-N`, with a log line naming the changed keys, so that a run never resumes from
    them; then the checkpoints of every stale copy are deleted (`prune_stale`) unless
    `keep_stale_checkpoints`. Then the record is written."""
    path = out / RUN_RECORD
    if not main:
        return
    if out.is_dir() and any(out.iterdir()):
        old = json.loads(path.read_text()) if path.is_file() else None
        if _identity(old) != _identity(json.loads(json.dumps(record))):
            changed = _changed_keys(old, record)
            n = 0
            while out.with_name(f"{out.name}.stale-{n}").exists():
                n += 1
            stale = out.with_name(f"{out.name}.stale-{n}")
            log.warning(
                "run directory %s was started with other settings or inputs (%s): moved to %s; "
                "starting fresh",
                out,
                ", ".join(changed),
                stale,
            )
            out.rename(stale)
            if not keep_stale_checkpoints:
                prune_stale(out)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True))


# --------------------------------------------------------------------------- checkpoints


def checkpoint_step(path: Path) -> int:
    return int(path.name.removeprefix(f"{PREFIX_CHECKPOINT_DIR}-"))


def complete_checkpoints(out: str | Path) -> list[Path]:
    """checkpoint-N directories whose trainer state was written (the last file saved), by N."""
    out = Path(out)
    if not out.is_dir():
        return []
    found = [
        p
        for p in out.glob(f"{PREFIX_CHECKPOINT_DIR}-*")
        if p.is_dir() and p.name.removeprefix(f"{PREFIX_CHECKPOINT_DIR}-").isdigit()
    ]
    return sorted((p for p in found if (p / "trainer_state.json").is_file()), key=checkpoint_step)


def unreadable_checkpoint(checkpoint: Path) -> str | None:
    """Why a checkpoint cannot be loaded (the file and what is wrong), or None.

    Cheap checks that catch a file cut short (a kill or a full disk while saving): a
    safetensors file must be as long as its header says; a torch zip file (optimizer,
    scheduler, RNG state) must have its central directory, written last, at its end; a JSON
    file (trainer_state.json, the configs) must parse, and the trainer state must be an object
    whose `global_step` is the directory's step (it is the file HF writes last)."""
    for f in sorted(checkpoint.rglob("*")):
        if not f.is_file():
            continue
        try:
            if f.suffix == ".json":
                state = json.loads(f.read_text())
                if f.name == "trainer_state.json" and f.parent == checkpoint:
                    step = state.get("global_step") if isinstance(state, dict) else None
                    if step != checkpoint_step(checkpoint):
                        return f"{f}: global_step {step!r}, not the checkpoint's {checkpoint.name}"
            elif f.suffix == ".safetensors":
                size = f.stat().st_size
                with f.open("rb") as fh:
                    n = int.from_bytes(fh.read(8), "little")
                    header = json.loads(fh.read(n)) if 8 + n <= size else None
                if header is None:
                    return f"{f}: {size} bytes, shorter than its header"
                ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
                if size != 8 + n + max(ends, default=0):
                    return f"{f}: {size} bytes, its header says {8 + n + max(ends, default=0)}"
            elif f.suffix in (".pt", ".pth", ".bin") and not zipfile.is_zipfile(f):
                return f"{f}: not a readable torch file (no zip directory at its end)"
        except (OSError, ValueError, KeyError, TypeError) as err:  # JSONDecodeError: ValueError
            return f"{f}: {type(err).__name__}: {err}"
    return None


def resume_point(out: str | Path, remove_incomplete: bool = True) -> Path | None:
    """The newest complete checkpoint whose files are readable (`unreadable_checkpoint`; else a
    warning names the file); newer ones, incomplete (killed while saving) or unreadable, are
    removed (by one process only when several run: `remove_incomplete`)."""
    complete = complete_checkpoints(out)
    while complete and (why := unreadable_checkpoint(complete[-1])) is not None:
        log.warning("checkpoint %s is unreadable (%s); trying the one before", complete[-1], why)
        complete.pop()
    last = complete[-1] if complete else None
    newest = checkpoint_step(last) if last else -1
    if not remove_incomplete:
        return last
    for p in Path(out).glob(f"{PREFIX_CHECKPOINT_DIR}-*") if Path(out).is_dir() else []:
        name = p.name.removeprefix(f"{PREFIX_CHECKPOINT_DIR}-")
        if p.is_dir() and name.isdigit() and int(name) > newest:
            log.warning("removing incomplete or unreadable checkpoint %s", p)
            shutil.rmtree(p)
    return last


# --------------------------------------------------------------------------- one trainer per run


class RunDirectoryLocked(RuntimeError):
    """Another trainer holds the run directory's lock (`run_dir_lock`)."""


def lock_path(out: str | Path) -> Path:
    """The lock file of run directory `out`: beside it, so it stays put when `claim_run_dir`
    moves the directory aside."""
    out = Path(out)
    return out.with_name(f"{out.name}.lock")


@contextmanager
def run_dir_lock(out: str | Path) -> Iterator[TextIO]:
    """Hold an exclusive `fcntl.flock` on `lock_path(out)` while the block runs.

    The kernel releases it when the holder dies (SIGKILL included), so no stale lock outlives a
    job, and an orphaned job that is still running (after `snakemake --unlock`) keeps it: a
    second trainer raises `RunDirectoryLocked` at once, naming the holder's host and pid (written
    into the file). Across nodes it needs a file system whose flock is cluster-wide (NFSv4,
    Lustre mounted with `-o flock`, GPFS).
    """
    path = lock_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = path.open("a+")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "a process that has not written its name yet"
            raise RunDirectoryLocked(
                f"run directory {out} is in use by another trainer ({holder}; lock {path}); "
                "stop that job or wait for it to end, then rerun"
            ) from None
        fh.truncate(0)
        fh.write(f"host {socket.gethostname()} pid {os.getpid()}\n")
        fh.flush()
        yield fh
    finally:
        fh.close()  # closing the last descriptor releases the lock
