"""``@app.command``: an app's own command-line commands, declared with Faust's ``option`` and
``argument``.

The declarations are plain data; the CLI (``python app.py <command> ...`` through
``app.main()``, or ``streams-app -A module <command> ...``) turns them into options, starts a
client for the app (a producer, and a reply consumer for RPC) and runs the function. As in
Faust, a command function takes the command object (``self``: ``self.app``, ``self.say``) and
its parameters, or nothing at all.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams_app.app.app import App


@dataclass(frozen=True)
class Option:
    """``option("--max-latency", type=float, default=0.5, envvar=..., help=...)``: click's
    keywords (``type``, ``default``, ``help``, ``envvar``, ``is_flag``, ``multiple``,
    ``required``, ``show_default``), and ``--flag/--no-flag`` switches."""

    decls: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Argument:
    """``argument("name", type=..., nargs=...)``: a positional parameter."""

    decls: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


def option(*decls: str, **kwargs: Any) -> Option:
    return Option(decls, kwargs)


def argument(*decls: str, **kwargs: Any) -> Argument:
    return Argument(decls, kwargs)


@dataclass
class Command:
    name: str
    fun: Callable[..., Awaitable[Any]]
    params: tuple[Option | Argument, ...]
    help: str = ""

    @property
    def takes_self(self) -> bool:
        return bool(inspect.signature(self.fun).parameters)

    async def invoke(self, app: App, values: dict[str, Any]) -> Any:
        if self.takes_self:
            return await self.fun(AppCommand(app), **values)
        return await self.fun()


class AppCommand:
    """What a command function gets as ``self`` (Faust's ``AppCommand``, the useful part)."""

    def __init__(self, app: App) -> None:
        self.app = app

    def say(self, message: Any, file: Any = None, err: Any = None, **kwargs: Any) -> None:
        print(message, file=file or sys.stdout, flush=True)

    def carp(self, message: Any, **kwargs: Any) -> None:
        print(message, file=sys.stderr, flush=True)
