"""The conda environments (`snakemake --use-conda`) stay in step with pyproject.toml, and every
rule that runs something names one of them.

pyproject.toml is the one source of versions; an env file that drifts from it would run the
rules on other versions than the tests saw.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
ENVS = sorted((REPO / "envs").glob("*.yaml"))
RULE_FILES = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
# Directives that make a rule run a job (a rule with none, like `all`, only names targets).
ACTIONS = ("shell", "run", "script", "notebook", "wrapper", "cwl", "template_engine")


def exact_pin(spec: str) -> tuple[str, str]:
    """(canonical name, version) of a `name==version` requirement; anything else is an error."""
    req = Requirement(spec)
    pins = [s.version for s in req.specifier if s.operator == "=="]
    assert len(req.specifier) == 1 and pins, f"{spec!r} is not an exact `==` pin"
    return canonicalize_name(req.name), pins[0]


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def pyproject_pins() -> dict[str, str]:
    """Every pin of pyproject.toml: dependencies and all optional extras."""
    proj = project()
    specs = [
        *proj["dependencies"],
        *(s for extra in proj["optional-dependencies"].values() for s in extra),
    ]
    return dict(exact_pin(s) for s in specs)


def env_pip_pins(path: Path) -> dict[str, str]:
    """The pip section's pins of a conda env file (option lines such as --extra-index-url aside)."""
    env = yaml.safe_load(path.read_text())
    pip = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip) == 1, f"{path.name}: expected one pip section, found {len(pip)}"
    return dict(exact_pin(s) for s in pip[0] if not s.lstrip().startswith("-"))


def test_env_files_exist() -> None:
    names = {p.name for p in ENVS}
    assert {"rredcot.yaml", "rredcot-gpu.yaml"} <= names, names


@pytest.mark.parametrize("env", ENVS, ids=lambda p: p.name)
def test_env_parses_and_uses_the_projects_python(env: Path) -> None:
    spec = yaml.safe_load(env.read_text())
    assert spec["channels"], env.name
    conda = [d for d in spec["dependencies"] if isinstance(d, str)]
    assert "pip" in conda, f"{env.name}: pip must be a conda dependency for the pip section"
    python = [d.split("=", 1)[1] for d in conda if d.startswith("python=")]
    assert len(python) == 1, f"{env.name}: expected one python=X.Y, found {python}"
    allowed = SpecifierSet(project()["requires-python"])
    assert f"{python[0]}.0" in allowed, f"{env.name}: python {python[0]} not in {allowed}"


@pytest.mark.parametrize("env", ENVS, ids=lambda p: p.name)
def test_env_pins_equal_pyproject(env: Path) -> None:
    ours = pyproject_pins()
    pins = env_pip_pins(env)
    unknown = sorted(set(pins) - set(ours))
    assert not unknown, f"{env.name}: {unknown} are not pinned in pyproject.toml"
    differ = {n: (v, ours[n]) for n, v in pins.items() if v != ours[n]}
    assert not differ, f"{env.name}: (env, pyproject) versions differ: {differ}"
    base = dict(exact_pin(s) for s in project()["dependencies"])
    missing = sorted(set(base) - set(pins))
    assert not missing, f"{env.name}: lacks the project dependencies {missing}"


@pytest.mark.parametrize("extra", ["gpu", "tracking"])
def test_gpu_env_holds_the_gpu_and_tracking_extras(extra: str) -> None:
    pins = env_pip_pins(REPO / "envs" / "rredcot-gpu.yaml")
    wanted = dict(exact_pin(s) for s in project()["optional-dependencies"][extra])
    assert wanted.items() <= pins.items(), f"{extra} extra {wanted} not all in rredcot-gpu.yaml"


def test_the_tracking_extra_holds_every_tracker() -> None:
    from rredcot.training.settings_checks import TRACKERS

    tracking = {exact_pin(s)[0] for s in project()["optional-dependencies"]["tracking"]}
    assert set(TRACKERS) == tracking


def rule_blocks(text: str) -> list[tuple[str, str]]:
    """(name, body) of every `rule name:` in a Snakemake file, at any indentation."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        head = re.fullmatch(r"(\s*)rule (\w+):\s*(#.*)?", line)
        if not head:
            continue
        indent = len(head.group(1))
        body = []
        for nxt in lines[i + 1 :]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            body.append(nxt)
        blocks.append((head.group(2), "\n".join(body)))
    return blocks


def string_constants(texts: list[str]) -> dict[str, str]:
    """Top-level `NAME = "string"` assignments of the workflow's files."""
    found: dict[str, str] = {}
    for text in texts:
        found.update(re.findall(r'^([A-Z_][A-Z0-9_]*)\s*=\s*"([^"]*)"\s*$', text, re.MULTILINE))
    return found


def config_envs() -> set[str]:
    """`conda_env` of the default config and of every config in configs/ (schema default if
    absent)."""
    envs = set()
    for path in [REPO / "config.yaml", *sorted((REPO / "configs").glob("*.yaml"))]:
        envs.add((yaml.safe_load(path.read_text()) or {}).get("conda_env", "envs/rredcot.yaml"))
    return envs


def test_every_rule_runs_in_an_existing_env() -> None:
    assert (
        "CONDA_ENV = f\"../../{config['conda_env']}\""
        in (REPO / "workflow" / "rules" / "common.smk").read_text()
    )
    texts = {path: path.read_text() for path in RULE_FILES}
    constants = string_constants(list(texts.values()))
    checked, problems = [], []
    for path, text in texts.items():
        for name, body in rule_blocks(text):
            if not re.search(rf"^\s*({'|'.join(ACTIONS)}):", body, re.MULTILINE):
                continue
            conda = re.search(r"^\s*conda:\s*(\S*)\s*\n?\s*(\S+)?", body, re.MULTILINE)
            if conda is None:
                problems.append(f"{path.name}: rule {name} has no conda: directive")
                continue
            value = conda.group(1) or conda.group(2)
            if value == "CONDA_ENV":  # f"../../{config['conda_env']}" in common.smk
                targets = [f"../../{env}" for env in config_envs()]
            elif value[0] in "\"'":
                targets = [value.strip("\"'")]
            else:
                targets = [constants[value]] if value in constants else []
            if not targets:
                problems.append(f"{path.name}: rule {name}: conda: {value} is not resolvable")
                continue
            for target in targets:
                env = (path.parent / target).resolve()  # Snakemake: relative to the rule's file
                if not env.is_file() or env.parent != REPO / "envs":
                    problems.append(f"{path.name}: rule {name}: {env} is not a file in envs/")
            checked.append(name)
    assert not problems, "\n".join(problems)
    assert {"train_policy", "generate", "grade"} <= set(checked), checked
