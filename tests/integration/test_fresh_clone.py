"""A fresh clone with nothing beside it (no ../shared, no RREDCOT_MIRROR) builds the DAG of
every paper config and of results/aime24_table.csv: no mirror is the default, and the benchmark
rows then come from the Hub when the job runs (a dry run reads none)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAPER_CONFIGS = sorted(p.name for p in REPO.glob("configs/paper_*.yaml"))


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's files (tracked and new, not ignored: what a commit would hold) copied
    alone into an empty directory."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs the repository's git checkout to list its files")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    clone = tmp_path_factory.mktemp("fresh") / "rredcot"
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    assert not (clone.parent / "shared").exists() and not (clone / "results" / "data").exists()
    return clone


def dry_run(clone: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`snakemake -n` in the clone, as its user would type it, without the development mirror
    or this checkout's package on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("RREDCOT_MIRROR", "PYTHONPATH")}
    env["HF_HUB_OFFLINE"] = "1"
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "64", *args]
    return subprocess.run(cmd, cwd=clone, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["results/aime24_table.csv"], id="default-aime24"),
        # `null` on the command line reaches the config as the text 'null': no mirror too
        pytest.param(
            ["results/aime24_table.csv", "--config", "data={mirror: null}"], id="mirror-null"
        ),
        *(
            pytest.param(["all", "results/aime24_table.csv", "--configfile", f"configs/{n}"], id=n)
            for n in PAPER_CONFIGS
        ),
    ],
)
def test_fresh_clone_dry_run(fresh_clone: Path, args: list[str]) -> None:
    proc = dry_run(fresh_clone, *args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "This was a dry-run" in proc.stdout
    # the AIME table is prepared by a job that reads the Hub: no mirror file is its input
    prepare = re.search(r"rule prepare_benchmark:\n(?:    .*\n)*?    input: (.*)\n", proc.stdout)
    assert re.search(r"rule prepare_benchmark:", proc.stdout), out[-3000:]
    assert prepare is None or ".jsonl" not in prepare.group(1)


def test_a_named_missing_mirror_still_stops_the_dag(fresh_clone: Path, tmp_path: Path) -> None:
    """Only a mirror that is configured and missing is an error, naming the key."""
    proc = dry_run(
        fresh_clone, "results/aime24_table.csv", "--config", f"data={{mirror: {tmp_path}/gone}}"
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config key 'data.mirror'" in out, out[-2000:]


def readme_commands() -> list[str]:
    """The README's code blocks, in order, each one command."""
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    return [b.strip() for b in blocks]


def test_the_readmes_first_two_commands_run_the_default_and_the_tests() -> None:
    """The first code block installs and runs the default, the second installs and runs the
    tests; CI runs the second's install (.ci/run: `-q`, its lint between install and pytest)."""
    default, tests = readme_commands()[:2]
    assert default.startswith("python3.11 -m venv .venv && . .venv/bin/activate && ")
    assert default.endswith(' && pip install -e ".[test]" && snakemake --cores all')
    assert tests.endswith(' && pip install -e ".[test,slurm]" && pytest')
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    start = next(i for i, line in enumerate(ci) if line.startswith("python3.11 -m venv .venv &&"))
    ci_install = " && ".join(ci[start : start + 2]).replace(" -q", "")
    assert tests.removesuffix(" && pytest") == ci_install, (tests, ci_install)


def test_the_readmes_default_command_dry_runs_in_a_fresh_clone(fresh_clone: Path) -> None:
    """The first command's Snakemake part, cut to its dry run (the install is the package's,
    resolved in test_installs), in a fresh clone with nothing beside it: it plans the whole
    default, ending with results/SUMMARY.md."""
    run = readme_commands()[0].rsplit(" && ", 1)[1]
    assert run == "snakemake --cores all"
    proc = dry_run(fresh_clone)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "rule summary:" in proc.stdout and "results/SUMMARY.md" in proc.stdout
