"""The CLI's common options, broker-free: ``-l`` takes a log level's name (Faust's too) before or
after the subcommand, and refuses anything else (``-l bogus`` used to mean warning)."""

from __future__ import annotations

import pytest

from streams_app.cli.main import build_parser, main


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["-l", "info", "broker", "status"], "info"),
        (["tables", "-l", "DEBUG"], "debug"),
        (["--loglevel", "warn", "broker", "status"], "warning"),
        (["-l", "crit", "broker", "status"], "critical"),
        (["broker", "status"], "warning"),
    ],
)
def test_log_levels_are_read_by_name(argv: list[str], level: str) -> None:
    assert build_parser().parse_args(argv).loglevel == level


@pytest.mark.parametrize("where", ["before", "after"])
def test_an_unknown_log_level_is_refused(where: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["-l", "infoo", "broker", "status"]
    if where == "after":
        argv = ["tables", "-l", "infoo"]
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "invalid log level 'infoo': did you mean 'info'?" in err
    with pytest.raises(SystemExit):
        main(["-l", "bogus", "broker", "status"])
    assert "invalid log level 'bogus'" in capsys.readouterr().err
