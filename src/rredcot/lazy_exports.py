"""A package's exported names loaded on first use (PEP 562), one implementation for every
`__init__` that needs it.

The Snakefile imports light submodules (config blocks, planners) while it builds the DAG; a
package `__init__` that imported its heavy siblings eagerly would bring torch and transformers
into every `snakemake` invocation, a dry run included (seconds each). With `lazy_exports` an
`__init__` names where each export lives and imports it only when it is first read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level `__getattr__` and `__dir__` of the package whose globals are
    `namespace`: each name of `homes` is imported from its submodule (`homes[name]`, relative
    to the package) when first read, then cached in `namespace`; other names are an
    AttributeError, as for any module."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return __getattr__, __dir__
