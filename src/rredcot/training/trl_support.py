"""Which TRL releases the trainer supports, checked when it is imported (torch-free).

`CreditGRPOTrainer` overrides private methods of TRL's `GRPOTrainer`
(`_generate_and_score_completions`, `_calculate_rewards`, `_generate_single_turn`,
`_get_per_token_logps_and_entropies`, `_get_train_sampler`), whose signatures and meaning change
between TRL releases; so it runs only on the releases it was written and tested against, and
says so instead of training wrongly. `checkpointing_argument` bridges a transformers rename that
TRL's configs inherit.
"""

from __future__ import annotations

from collections.abc import Collection
from importlib.metadata import PackageNotFoundError, version

SUPPORTED_TRL = ">=1.16.0,<1.17"
"""TRL releases the trainer is tested with (pyproject pins 1.16.0)."""


def installed_trl_version() -> str | None:
    """The installed TRL's version, None when TRL is not installed."""
    try:
        return version("trl")
    except PackageNotFoundError:
        return None


def check_trl_version() -> None:
    """Raise ImportError naming the installed and the supported TRL versions when they differ."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    installed = installed_trl_version()
    try:
        ok = installed is not None and Version(installed) in SpecifierSet(SUPPORTED_TRL)
    except InvalidVersion:
        ok = False
    if not ok:
        raise ImportError(
            f"rredcot's trainer supports trl {SUPPORTED_TRL} (it overrides private GRPOTrainer "
            f"methods), but trl {installed or 'is not installed'}"
            f"{' is installed' if installed else ''}; install a supported release: "
            f"pip install 'trl{SUPPORTED_TRL}'"
        )


def checkpointing_argument(
    enabled: bool, argument_names: Collection[str] | None = None
) -> dict[str, bool]:
    """The TrainingArguments keyword that switches activation checkpointing (config key
    `training.gradient_checkpointing`): `activation_checkpointing` where transformers has it
    (the pinned 5.23, where `gradient_checkpointing` is a deprecated alias), else
    `gradient_checkpointing` (older releases, e.g. the 5.17 of a GPU image, raise TypeError on
    the new name before any work). `argument_names`: the dataclass's field names (default: read
    off the installed `transformers.TrainingArguments`)."""
    if argument_names is None:
        argument_names = training_argument_names()
    if "activation_checkpointing" in argument_names:
        return {"activation_checkpointing": enabled}
    return {"gradient_checkpointing": enabled}


def training_argument_names() -> set[str]:
    """The field names of the installed `transformers.TrainingArguments`."""
    from dataclasses import fields

    from transformers import TrainingArguments

    return {f.name for f in fields(TrainingArguments)}
