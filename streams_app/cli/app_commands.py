"""An app's own ``@app.command`` commands on the command line.

Each command becomes a subcommand (``python app.py produce --max-messages 10``, or
``streams-app -A module produce ...``); its Faust ``option``/``argument`` declarations become
argparse options: click's ``type`` (a callable or a click type), ``default``, ``help``,
``envvar``, ``is_flag``, ``multiple``, ``required``, ``nargs``, and ``--x/--no-x`` switches.
The command runs with a client runtime (a producer, RPC replies), flushed before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable
from typing import Any

from streams_app.app.app import App
from streams_app.app.commands import Argument, Command, Option
from streams_app.topology.contract import current_runtime


def _converter(kind: Any) -> Callable[[str], Any] | None:
    if kind is None:
        return None
    convert = getattr(kind, "convert", None)
    if convert is not None:  # a click ParamType
        return lambda text: convert(text, None, None)
    if callable(kind):
        return kind  # type: ignore[no-any-return]
    return None


def _dest(decls: tuple[str, ...]) -> str:
    names = [d for d in decls if not d.startswith("-")]
    if names:
        return names[0]
    longest = max((d.split("/")[0] for d in decls), key=len)
    return longest.lstrip("-").replace("-", "_")


def add_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    command: Command,
    parents: list[argparse.ArgumentParser],
) -> None:
    names = {command.name, command.name.replace("_", "-")}
    primary = command.name.replace("_", "-")
    parser = sub.add_parser(
        primary,
        parents=parents,
        help=(command.help.strip().splitlines() or [""])[0] or f"app command {command.name}",
        aliases=sorted(names - {primary}),
    )
    dests: list[str] = []
    for param in command.params:
        kwargs = dict(param.kwargs)
        help_text = kwargs.pop("help", None)
        if isinstance(param, Argument):
            dest = _dest(param.decls)
            options: dict[str, Any] = {"help": help_text}
            if (convert := _converter(kwargs.pop("type", None))) is not None:
                options["type"] = convert
            nargs = kwargs.pop("nargs", None)
            if nargs == -1:
                options["nargs"] = "*"
            elif nargs is not None:
                options["nargs"] = nargs
            if "default" in kwargs:
                options["default"] = kwargs.pop("default")
                options.setdefault("nargs", "?")
            parser.add_argument(dest, **options)
            dests.append(dest)
            continue
        assert isinstance(param, Option)
        dest = _dest(param.decls)
        default = kwargs.pop("default", None)
        envvar = kwargs.pop("envvar", None)
        convert = _converter(kwargs.pop("type", None))
        if envvar and os.environ.get(envvar) is not None:
            raw = os.environ[envvar]
            default = convert(raw) if convert is not None else raw
        switches = [d for d in param.decls if "/" in d]
        flags = [d for d in param.decls if d.startswith("-") and "/" not in d]
        if switches:
            on, _, off = switches[0].partition("/")
            parser.add_argument(on, dest=dest, action="store_true", default=default, help=help_text)
            parser.add_argument(off, dest=dest, action="store_false", help=argparse.SUPPRESS)
        elif kwargs.pop("is_flag", False):
            parser.add_argument(
                *flags, dest=dest, action="store_true", default=bool(default), help=help_text
            )
        else:
            options = {"dest": dest, "default": default, "help": help_text}
            if convert is not None:
                options["type"] = convert
            if kwargs.pop("multiple", False):
                options["action"] = "append"
            if kwargs.pop("required", False):
                options["required"] = True
            parser.add_argument(*flags, **options)
        dests.append(dest)
    parser.set_defaults(func=lambda args: run(args.streams_app_target, command, args, dests))


def run(app: App, command: Command, args: argparse.Namespace, dests: list[str]) -> int:
    values = {dest: getattr(args, dest) for dest in dests}
    return asyncio.run(_run(app, command, values))


async def _run(app: App, command: Command, values: dict[str, Any]) -> int:
    from streams_app.runtime.client import ClientRuntime

    client = ClientRuntime(app)
    await client.start()
    token = current_runtime.set(client)
    try:
        result = await command.invoke(app, values)
    finally:
        current_runtime.reset(token)
        await client.stop()
    return result if isinstance(result, int) else 0
