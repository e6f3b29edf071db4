"""The repository's script folders: `scripts/` holds the user tools only (benchmarks are in
`bench/`, development probes in `dev/`), and `dev/README.md` names every probe it keeps."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_USER_TOOLS = 12


def files(folder: str) -> list[Path]:
    return sorted(p for p in (REPO / folder).iterdir() if p.is_file())


def test_scripts_holds_only_a_few_user_tools():
    tools = [p.name for p in files("scripts")]
    assert len(tools) <= MAX_USER_TOOLS, f"scripts/ has {len(tools)} files: {tools}"


def test_every_development_probe_is_named_in_its_readme():
    readme = (REPO / "dev" / "README.md").read_text()
    probes = [p.name for p in files("dev") if p.name != "README.md"]
    unnamed = [name for name in probes if f"`{name}`" not in readme]
    assert not unnamed, f"dev/README.md does not name {unnamed}"
