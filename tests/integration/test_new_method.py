"""The recipe for a new method (docs/method/adding_a_method.md, `rredcot.training.method_registry`)
holds: one module and one `MethodSpec` entry are all it takes for the config check, the schema,
the planners and the DAG to accept it. The test writes both into a copy of the repository and
dry-runs the smoke DAG with the new method beside GRPO."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TOY = '''"""A toy credit method: all of a response's credit on its last segment."""

from __future__ import annotations

from typing import ClassVar

import torch

from rredcot.training.methods.base import RolloutBatch, SegmentCredit, SegmentCreditMethod
from rredcot.training.methods.oracle_step import LINES
from rredcot.training.methods.base import segment_completions


class ToyMethod(SegmentCreditMethod):
    name: ClassVar[str] = "toy"

    @classmethod
    def from_settings(cls, settings, task, tokenizer, eos_ids):
        return cls(task, tokenizer, list(eos_ids), settings.credit)

    def segment_credit(self, batch: RolloutBatch, policy: torch.nn.Module) -> SegmentCredit:
        segs, _ = segment_completions(policy, self.tokenizer, batch, LINES, self.eos_ids)
        sigmas = []
        for s, r in zip(segs, batch.rewards.tolist(), strict=True):
            sigma = torch.zeros(len(s.boundaries) - 1, dtype=torch.float64)
            sigma[-1] = r
            sigmas.append(sigma)
        return SegmentCredit(sigmas, [s.boundaries for s in segs], 0, {})
'''

SPEC = """        MethodSpec(
            "toy",
            "rredcot.training.methods.toy:ToyMethod",
            "a toy credit method: the reward on the last segment",
            run_keys=_CREDIT_KEYS,
        ),
"""


def _copy_repo(repo: Path, dest: Path) -> Path:
    """The files a workflow run reads: the Snakefile, the rules, the package, the configs."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "results", ".snakemake")
    for name in ("workflow", "src", "configs", "envs", "profiles"):
        if (repo / name).exists():
            shutil.copytree(repo / name, dest / name, ignore=ignore)
    for name in ("Snakefile", "config.yaml", "pyproject.toml"):
        shutil.copy2(repo / name, dest / name)
    return dest


def test_a_new_method_is_one_module_and_one_spec(repo, tmp_path, run_snakemake, no_mirror_env):
    copy = _copy_repo(repo, tmp_path / "repo")
    methods = copy / "src" / "rredcot" / "training" / "methods"
    (methods / "toy.py").write_text(TOY)
    registry = copy / "src" / "rredcot" / "training" / "method_registry.py"
    text = registry.read_text()
    anchor = '        MethodSpec(\n            "oracle_step",'
    assert anchor in text, "the registry's layout changed: update this test's anchor"
    registry.write_text(text.replace(anchor, SPEC + anchor, 1))
    (copy / "toy.yaml").write_text("training:\n  methods: [grpo, toy]\n")
    work = tmp_path / "work"
    work.mkdir()
    args = ["-n", "--cores", "1", "--configfile", str(copy / "configs" / "smoke.yaml")]
    proc = run_snakemake(copy, work, *args, str(copy / "toy.yaml"), env=no_mirror_env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "method=toy" in out and "method=grpo" in out, out[-3000:]
    # the toy's runs are evaluated and tabled like any method's
    assert "wildcards: method=toy, seed=" in out and "rule summary" in out, out[-3000:]
    # and the unmodified repository still refuses the name: the spec is what made it a method
    plain = run_snakemake(repo, work, *args, str(copy / "toy.yaml"), env=no_mirror_env)
    assert plain.returncode != 0 and "'toy'" in plain.stdout + plain.stderr
