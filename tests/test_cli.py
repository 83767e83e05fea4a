"""The ``sapo-env`` command's answers to mistakes."""

from __future__ import annotations

import pytest

from sapo_experiments import cli


@pytest.mark.parametrize("argv,usage,unknown", [
    (["demo", "--roundz", "3"], "usage: sapo-env demo", "--roundz 3"),
    (["bench-ratio", "--quik"], "usage: sapo-env bench-ratio", "--quik"),
    (["reproduce", "--seedz", "1"], "usage: sapo-env reproduce", "--seedz 1"),
])
def test_a_mistyped_option_shows_its_subcommands_usage(argv, usage, unknown, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith(usage) and f"error: unrecognized arguments: {unknown}\n" in err


def test_a_missing_subcommand_shows_the_top_level_usage(capsys):
    with pytest.raises(SystemExit):
        cli.main([])
    assert capsys.readouterr().err.startswith("usage: sapo-env [-h]")
