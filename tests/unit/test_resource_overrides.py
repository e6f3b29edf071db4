"""$RREDCOT_RESOURCES: per-rule resources over the config's, checked like the config."""

from __future__ import annotations

import pytest

from rredcot.config import ConfigError, resource_overrides


def test_overrides_are_read_and_checked() -> None:
    env = {"RREDCOT_RESOURCES": "{train_policy: {runtime: 1440, mem_mb: 240000}}"}
    assert resource_overrides(env) == {"train_policy": {"runtime": 1440, "mem_mb": 240000}}
    assert resource_overrides({}) == {}
    with pytest.raises(ConfigError, match=r"RREDCOT_RESOURCES: unknown config key\(s\) \['mem'\]"):
        resource_overrides({"RREDCOT_RESOURCES": "{train_policy: {mem: 1}}"})
    with pytest.raises(ConfigError, match=r"'RREDCOT_RESOURCES.generate.gpu': -1"):
        resource_overrides({"RREDCOT_RESOURCES": "{generate: {gpu: -1}}"})
    with pytest.raises(ConfigError, match="not YAML"):
        resource_overrides({"RREDCOT_RESOURCES": "{a: [b"})
