"""The options ``alpyka aot`` and ``alpyka export`` share are declared once (issue 42 item 6)."""

from __future__ import annotations

import argparse

import pytest

from inference import _export, aot


def _action(parser: argparse.ArgumentParser, option: str) -> argparse.Action:
    return next(a for a in parser._actions if option in a.option_strings)


def test_both_commands_take_input_shape_from_one_declaration():
    one = argparse.ArgumentParser()
    aot.add_input_shape(one)
    want = _action(one, "--input-shape")
    for parser in (aot.build_parser(), _export.build_parser()):
        got = _action(parser, "--input-shape")
        assert (got.type, got.help, got.required, got.dest) == (want.type, want.help, want.required, want.dest)
        args = parser.parse_args(["m:f", "-o", "x.pt2", "--input-shape", "64x3", "--input-shape", "5"])
        assert args.input_shape == [(64, 3), (5,)]


@pytest.mark.parametrize("bad", ["0,3", "a,b", ""])
def test_both_commands_refuse_a_bad_shape_alike(bad, capsys):
    messages = []
    for parser in (aot.build_parser(), _export.build_parser()):
        with pytest.raises(SystemExit):
            parser.parse_args(["m:f", "-o", "x.pt2", "--input-shape", bad])
        messages.append(capsys.readouterr().err.splitlines()[-1].split(": ", 1)[1])
    assert messages[0] == messages[1]
