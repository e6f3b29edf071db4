"""The settings a method reads (`MethodSettings`), derived from a run's `TrainingSettings`
(`rredcot.training.methods.build_method` makes a method from them).

`MethodSettings` holds the `TrainingSettings` fields named in `METHOD_FIELDS` with the same
types and defaults (it is generated from them, so it cannot drift): a test or a TRL script
builds one from the blocks it sets, and a run passes its whole `TrainingSettings` (the same
attributes) to `Method.from_settings`.
"""

from __future__ import annotations

import dataclasses

from rredcot.training.settings import TrainingSettings

METHOD_FIELDS: tuple[str, ...] = (
    "segmentation",
    "credit",
    "rredcot",
    "reference",
    "mc",
    "mc_batch_size",
    "oppo",
    "resets",
    "misconception",
)
"""The `TrainingSettings` fields a method's `from_settings` may read."""


def _method_settings() -> type:
    """A frozen dataclass of `METHOD_FIELDS`, each as `TrainingSettings` declares it."""
    declared = {f.name: f for f in dataclasses.fields(TrainingSettings)}
    cls = dataclasses.make_dataclass(
        "MethodSettings",
        [
            (
                name,
                declared[name].type,
                dataclasses.field(
                    default=declared[name].default,
                    default_factory=declared[name].default_factory,
                ),
            )
            for name in METHOD_FIELDS
        ],
        frozen=True,
    )
    cls.__module__ = __name__  # where pickle and repr look for it
    return cls


MethodSettings = _method_settings()
MethodSettings.__doc__ = """The setting blocks the methods read, with `TrainingSettings`'
defaults (`METHOD_FIELDS`); the misconception may be a `Misconception` or its mapping."""
