"""Faust's names for what an app creates, so a Faust deployment's topics line up with ours.

- an agent is named ``<module>.<function>``, with ``__main__`` replaced by the module the
  script would have as an import (``python examples/word_count.py`` -> ``word_count``);
- an agent without a topic owns ``<app id>-<agent name>``;
- ``group_by(..., name=N)`` repartitions through ``<agent name>-<source topic>-N-repartition``
  (without the agent prefix when the source is the agent's own topic, whose name has it);
- a table's changelog is ``<app id>-<table>-changelog``;
- the leader election topic is ``<app id>-__assignor-__leader`` (one partition).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any


def main_module_name() -> str:
    """The import name of the running script (``__main__``), as Faust derives it."""
    main = sys.modules.get("__main__")
    filename = getattr(main, "__file__", None)
    if not filename:
        return "__main__"
    path = Path(filename).absolute()
    parts = [path.with_suffix("").name]
    node = path.parent
    while (node / "__init__.py").is_file():
        parts.insert(0, node.name)
        node = node.parent
    name = ".".join(parts)
    if name.endswith(".__main__"):  # python -m package
        name = name[: -len(".__main__")]
    return name


def unwrap(fun: Any) -> Any:
    """The function behind ``functools.partial`` wrappers."""
    while isinstance(fun, functools.partial):
        fun = fun.func
    return fun


def canonical_name(fun: Any) -> str:
    """``module.name`` of a function (Faust's ``canonshortname``: the name, not the qualified
    name, so a function defined inside another is still ``module.f``), ``__main__`` resolved."""
    target = unwrap(fun)
    if not hasattr(target, "__name__"):
        target = type(target)
    module = getattr(target, "__module__", None) or "__main__"
    qualname = target.__name__
    if module == "__main__":
        module = main_module_name()
    return f"{module}.{qualname}"


def agent_topic(app_id: str, agent_name: str) -> str:
    return f"{app_id}-{agent_name}"


def repartition_topic(agent_name: str, source: str, label: str, *, source_has_prefix: bool) -> str:
    prefix = "" if source_has_prefix else f"{agent_name}-"
    return f"{prefix}{source}-{label}-repartition"


def changelog_topic(app_id: str, table: str) -> str:
    return f"{app_id}-{table}-changelog"


def leader_topic(app_id: str) -> str:
    return f"{app_id}-__assignor-__leader"
