"""Verifiers r(y) (METHOD.md §1): math-verify for math, exact match for the synthetic world.

math-verify's own timeout uses `signal.alarm`, which works only in the main thread and cannot
interrupt sympy stuck in C code. Its timeouts are therefore disabled, and parse + verify run in
a persistent worker subprocess (one per calling process, started lazily, reused across calls,
guarded by a lock so that any thread may grade). A pair that exceeds `timeout_s` gets its worker
killed and replaced, and yields `Grade(False, extracted, "timeout")`; an exception inside
math-verify, or an answer it cannot read whole (an integer longer than Python's int-string
limit, which math-verify would silently compare as a string), yields status "error". Neither
hangs nor crashes the caller.

The worker is a plain `subprocess` (fork + exec of a fresh interpreter), so it is safe to start
from a threaded process and does not re-import the caller's `__main__`. A forked child (e.g. a
`ProcessPoolExecutor` worker) forgets its parent's grading worker and starts its own.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Literal

from rredcot.tasks.base import Grade, require_text

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
STARTUP_TIMEOUT_S = 120.0  # importing sympy on a loaded machine; not charged to any answer
BATCH_SIZE = 256  # pairs per request line to the worker

Verdict = bool | Literal["timeout", "error"]  # what the worker says about one pair

_BOXED_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")


def extract_last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`), nested braces balanced, stripped.

    Brace counting skips backslash escapes (`\\{`, `\\}`, `\\\\`), so `\\boxed{\\{1,2\\}}` gives
    `\\{1,2\\}`. None when there is no box or the last one never closes (a truncated response).
    """
    opens = list(_BOXED_OPEN.finditer(text))
    if not opens:
        return None
    start = opens[-1].end()
    depth, i = 1, start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2  # an escaped character is never a group brace
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i].strip()
        i += 1
    return None


def exact_match(pred: str | None, gold: str) -> bool:
    """r(y) for the synthetic world: whitespace-stripped string equality; no answer is wrong."""
    return pred is not None and pred.strip() == gold.strip()


def verify_math(response: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Grade:
    """r(y) for math: the last `\\boxed{}` of `response` against the bare benchmark answer `gold`.

    math-verify 0.9.0 with its default extraction; gold parsed first and passed first
    (`verify(gold, pred)` is not symmetric: a gold interval `(1,2)` rejects the relation
    `1<x<2`, the reverse accepts). Both sides are wrapped as `\\boxed{...}` before parsing;
    so wrapped, every gold of the mirrored benchmarks verifies against itself. A gold sympy
    cannot read (5 of Minerva's, e.g. `E_{1},E_{2}`) is compared as a string, as math-verify does.
    """
    return grade_many([(response, gold)], timeout_s)[0]


def grade_many(
    pairs: Iterable[tuple[str, str]], timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[Grade]:
    """`verify_math` over (response, gold) pairs, streamed through the worker in batches.

    `timeout_s` bounds each pair separately (from the previous pair's reply). Responses without
    a box, or with an empty one, are judged here ("no_answer") and never sent.
    """
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    pairs = list(pairs)
    for i, (response, gold) in enumerate(pairs):
        require_text(response, f"response of pair {i}")
        if not isinstance(gold, str) or not gold.strip():
            raise ValueError(f"gold answer of pair {i} must be a non-empty string, got {gold!r}")
    preds = [extract_last_boxed(response) for response, _ in pairs]
    asked = [i for i, pred in enumerate(preds) if pred]
    verdicts: dict[int, Verdict] = {}
    if asked:
        jobs = [(pairs[i][1].strip(), preds[i] or "") for i in asked]
        verdicts = dict(zip(asked, _WORKER.run(jobs, timeout_s), strict=True))
    return [_to_grade(pred, verdicts.get(i)) for i, pred in enumerate(preds)]


def _to_grade(pred: str | None, verdict: Verdict | None) -> Grade:
    if verdict is None:
        return Grade(False, pred, "no_answer")
    if verdict == "timeout" or verdict == "error":
        return Grade(False, pred, verdict)
    return Grade(verdict, pred, "ok")


def shutdown_worker() -> None:
    """Stop this process's grading worker (it restarts on the next call); also run at exit."""
    _WORKER.close()


# --- in the worker process -----------------------------------------------------------------


# A thousands separator (also a LaTeX one) between the digit groups of one number.
_DIGIT_SEPARATORS = re.compile(r"(?<=\d)(?:\\[,!; ]|\{,\}|[,~\s])(?=\d{3}(?!\d))")


def too_long_integer(text: str) -> bool:
    """Whether `text` holds an integer with more digits than Python converts from a string
    (`sys.get_int_max_str_digits`, 4300 by default): sympy then fails inside math-verify, which
    falls back to comparing strings, so `N` and `N.0` would be graded wrong with status ok."""
    limit = sys.get_int_max_str_digits()
    if not limit:
        return False
    return re.search(rf"\d{{{limit + 1},}}", _DIGIT_SEPARATORS.sub("", text)) is not None


def _parse_and_verify(gold: str, pred: str) -> bool:
    """math-verify with its signal-based timeouts off; the parent enforces the time limit.
    Raises (status "error") for an answer with an integer too long to parse (`too_long_integer`)."""
    from math_verify import parse, verify

    for side, text in (("gold", gold), ("answer", pred)):
        if too_long_integer(text):
            raise ValueError(f"{side}: an integer longer than Python's int-string limit")

    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
    pred_parsed = parse(f"\\boxed{{{pred}}}", parsing_timeout=None)
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def _serve() -> None:
    """Worker loop: one JSON request line {"pairs": [[gold, pred], ...]} in, one line per pair
    out ({"correct": bool} or {"error": type name}), after a first {"ready": true} line."""
    import signal

    proto = os.fdopen(os.dup(1), "w", buffering=1)  # line-buffered protocol channel
    os.dup2(2, 1)  # stray prints from libraries go to stderr, never into the protocol
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.ERROR)  # "timeout disabled" warnings
    parent = os.getppid()
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()
    _parse_and_verify("1", "1")  # import and warm up before "ready": not an answer's time
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        for gold, pred in json.loads(line)["pairs"]:
            try:
                msg: dict[str, object] = {"correct": _parse_and_verify(gold, pred)}
            except Exception as exc:  # str(exc) of a sympy object can itself hang: name only
                msg = {"error": type(exc).__name__}
            proto.write(json.dumps(msg) + "\n")


def _exit_when_orphaned(parent: int) -> None:
    """Leave when the parent dies (stdin EOF is not seen while stuck in sympy)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


# --- in the calling process ----------------------------------------------------------------


class _GradingWorker:
    """One math-verify subprocess owned by one process; `run` is serialised by a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._owner = os.getpid()

    @property
    def pid(self) -> int | None:
        """The worker's process id while one is running (for tests and diagnostics)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def run(self, pairs: Sequence[tuple[str, str]], timeout_s: float) -> list[Verdict]:
        """Verdicts for (gold, pred) pairs; a pair that overruns `timeout_s` or kills the worker
        gets "timeout" / "error" and the rest continue in a fresh worker."""
        out: list[Verdict] = []
        with self._lock:
            try:
                while len(out) < len(pairs):
                    batch = pairs[len(out) : len(out) + BATCH_SIZE]
                    self._send(batch)
                    for _ in batch:
                        out.append(self._receive(timeout_s))
                        if self._proc is None:
                            break  # worker replaced: resend what is left of the batch
            except BaseException:  # e.g. KeyboardInterrupt: replies still queued would
                self._stop()  # answer the next caller's pairs, so start afresh next time
                raise
        return out

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _send(self, batch: Sequence[tuple[str, str]]) -> None:
        line = (json.dumps({"pairs": [list(p) for p in batch]}) + "\n").encode()
        for attempt in range(2):  # a worker that died between calls is restarted once
            self._ensure_started()
            assert self._proc is not None and self._proc.stdin is not None
            try:
                _write_all(self._proc.stdin.fileno(), line)
                return
            except OSError:
                self._stop()
                if attempt == 1:
                    raise

    def _receive(self, timeout_s: float) -> Verdict:
        try:
            line = self._readline(timeout_s)
        except EOFError:  # the worker died on this pair (e.g. memory); judge it an error
            log.warning("math-verify worker exited while grading; restarting it")
            self._stop()
            return "error"
        if line is None:
            log.warning(
                "math-verify exceeded %.1f s on one answer; restarting the worker", timeout_s
            )
            self._stop()
            return "timeout"
        msg = json.loads(line)
        if "correct" in msg:
            return bool(msg["correct"])
        log.debug("math-verify raised %s", msg.get("error"))
        return "error"

    def _readline(self, timeout_s: float) -> bytes | None:
        """The next protocol line, None after `timeout_s` without one; EOFError if it died."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(remaining * 1000):
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _ensure_started(self) -> None:
        if self._owner != os.getpid():  # inherited through fork: the worker is not ours
            self._forget()
        if self._proc is not None and self._proc.poll() is None:
            return
        self._stop()
        cmd = [sys.executable, "-c", "from rredcot.tasks.grading import _serve; _serve()"]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        try:
            ready = self._readline(STARTUP_TIMEOUT_S)
        except EOFError:
            ready = None
        if ready is None or not json.loads(ready).get("ready"):
            code = self._proc.poll()
            self._stop()
            raise RuntimeError(
                f"math-verify grading worker did not start within {STARTUP_TIMEOUT_S:.0f} s "
                f"(exit code {code}; command {cmd}); see its stderr above"
            )

    def _stop(self) -> None:
        """Kill our worker (if any) and reap it."""
        proc, self._proc, self._buf = self._proc, None, b""
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()

    def _forget(self) -> None:
        """After fork: drop the parent's worker without touching it, and take ownership."""
        proc, self._proc, self._buf = self._proc, None, b""
        self._owner = os.getpid()
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):  # unbuffered: closing flushes nothing
                if stream is not None:
                    stream.close()  # only this process's copy of the pipe
            proc.returncode = -1  # not our child: Popen must never wait on it


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_WORKER = _GradingWorker()


def _reset_after_fork() -> None:
    """In a forked child the lock may be held by a thread that does not exist there."""
    _WORKER._lock = threading.Lock()
    _WORKER._forget()


def _shutdown_at_exit() -> None:
    if _WORKER._owner == os.getpid():
        _WORKER._stop()


os.register_at_fork(after_in_child=_reset_after_fork)
atexit.register(_shutdown_at_exit)
