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


def test_an_example_without_its_batch_axis_is_named_with_the_fix(tmp_path):
    """``Linear(3, 2)`` traced on ``torch.randn(3)`` (``--input-shape 3``: the rows' shape without
    the batch axis) was torch's 20-line ConstraintViolation ("batch = 3"), a traceback from
    ``alpyka export`` and ``alpyka aot``: an ArgumentError naming the fix, before any compile."""
    import torch

    import portable as pk

    said = r"fixes the first axis of the example input\(s\) \(3,\), which is the batch"
    with pytest.raises(pk.ArgumentError, match=said):
        _export.export(torch.nn.Linear(3, 2), (torch.randn(3),), tmp_path / "x.pt2")
    with pytest.raises(pk.ArgumentError, match="--input-shape 64,3"):
        aot.compile(torch.nn.Linear(3, 2), (torch.randn(3),), tmp_path / "x.pt2")
    assert not list(tmp_path.iterdir())


def test_a_path_under_a_file_is_refused_before_the_work(tmp_path):
    """``-o /etc/passwd/x.pt2`` was OSError's "File exists: '/etc/passwd'" (for ``aot``, after the
    compile): an ArgumentError naming the path, before torch is asked anything."""
    import torch

    import portable as pk

    a_file = tmp_path / "file"
    a_file.write_text("")
    for call in (_export.export, aot.compile):
        with pytest.raises(pk.ArgumentError, match=r"cannot write .*file/x.pt2.*cannot be made"):
            call(torch.nn.Linear(3, 2), (torch.randn(8, 3),), a_file / "x.pt2")


def test_an_onnx_export_refuses_an_example_without_its_batch_axis_too(tmp_path):
    """The ONNX exporter wrote such a module with an input of shape [3], no batch axis, and said
    nothing: it is refused as the .pt2 export is, and a good example keeps its 'batch' axis."""
    pytest.importorskip("onnxscript", reason="ONNX export needs onnxscript (pip install -e '.[onnx]')")
    ort = pytest.importorskip("onnxruntime", reason="reading the model back needs onnxruntime")
    import torch

    import portable as pk

    with pytest.raises(pk.ArgumentError, match="which is the batch axis"):
        _export.export(torch.nn.Linear(3, 2), (torch.randn(3),), tmp_path / "x.onnx")
    path = _export.export(torch.nn.Linear(3, 2), (torch.randn(8, 3),), tmp_path / "y.onnx")
    assert ort.InferenceSession(path).get_inputs()[0].shape == ["batch", 3]
