"""The execution profiles: the default one where Snakemake finds it by itself, and none of its
keys contradicting the SLURM profile it is layered over."""

from __future__ import annotations

import yaml


def test_the_default_profile_lies_beside_the_snakefile(repo):
    """Snakemake looks for `profiles/default/` in the working directory and beside the
    Snakefile (not under workflow/, where this repository's Snakefile is not)."""
    assert (repo / "Snakefile").is_file()
    assert (repo / "profiles" / "default" / "profile.yaml").is_file()
    assert not (repo / "workflow" / "profiles" / "default").exists()


def test_the_default_profile_does_not_contradict_the_slurm_profile(repo):
    """Under `--profile workflow/profiles/slurm` the default profile is loaded too and wins key
    by key: a key both set must have one value."""
    default = yaml.safe_load((repo / "profiles/default/profile.yaml").read_text())
    slurm = yaml.safe_load((repo / "workflow/profiles/slurm/profile.yaml").read_text())
    shared = set(default) & set(slurm)
    assert {k: default[k] for k in shared} == {k: slurm[k] for k in shared}
    assert "executor" not in default and "jobs" not in default
