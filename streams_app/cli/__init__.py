"""The ``streams-app`` command line, and Faust's ``faust.cli`` names for app commands.

``from streams_app.cli import option, argument`` declares an ``@app.command``'s parameters
exactly as ``from faust.cli import option, argument`` does.
"""

from streams_app.app.commands import AppCommand, argument, option

__all__ = ["AppCommand", "argument", "option"]
