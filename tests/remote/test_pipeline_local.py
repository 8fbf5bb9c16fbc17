"""Pipelines without a server: declaration, the local call, config derived from layouts, errors."""

from __future__ import annotations

import numpy as np
import pytest

import portable as pk
import soa
from alpyka_testing.errors import raises_type, raises_value
from inference import Pipeline, PipelineError, pipeline
from inference._pipeline import OutputsNotFilled, _wire, derive_config
from inference._tensor_desc import TensorDesc

from . import pipeline_support as S

torch = pytest.importorskip("torch")


def _run_local(pipe, queue, n=37):
    tracks = S.make_tracks(n, queue, seed=3)
    rows = pipe.output_rows([n])
    out = pk.PortableCollection(pipe.outputs[0].layout, rows[0], queue)
    out.zero(queue)
    pipe(queue, tracks, out)
    return out.to_dict(queue)


def test_declaration_names_and_rows():
    assert isinstance(S.chain, Pipeline) and S.chain.name == "chain"
    assert [s.name for s in S.chain.inputs] == ["tracks"] and [s.name for s in S.chain.outputs] == ["scored"]
    assert S.chain.output_rows([10]) == [10]
    assert S.pairs.output_rows([10]) == [5]
    fixed = pipeline(inputs=S.Tracks, outputs=S.Summary, rows=4)(lambda q, t, s: None)
    assert fixed.output_rows([10]) == [4]
    assert S.chain.__doc__ and "make_features" in S.chain.__doc__
    assert S.chain.reference.endswith(":chain")


def test_config_derived_from_layouts():
    cfg = derive_config(S.chain)
    assert cfg["max_batch_size"] == 0
    assert all(isinstance(t, TensorDesc) and not t.batched for t in cfg["inputs"] + cfg["outputs"])
    triples = lambda ts: [(t.name, t.dtype, t.dims) for t in ts]  # noqa: E731
    assert triples(cfg["inputs"]) == [
        ("tracks__x", "float32", (-1,)),
        ("tracks__p", "float32", (-1, 3)),
        ("tracks__cov", "float32", (-1, 2, 2)),
        ("tracks__charge", "int32", (-1,)),
        ("tracks__scale", "float32", (1,)),
    ]
    assert triples(cfg["outputs"]) == [
        ("scored__score", "float32", (-1,)),
        ("scored__e", "float32", (-1, 2)),
        ("scored__tag", "int32", (-1,)),
        ("scored__total", "float32", (1,)),
    ]
    fixed = pipeline(inputs=S.Tracks, outputs={"s": S.Summary}, rows=6)(lambda q, t, s: None)
    assert derive_config(fixed)["outputs"] == [TensorDesc("s__s", np.float32, (6,))]


def test_serve_spec_of_a_pipeline(tmp_path):
    from inference.serving._spec import model_specs

    specs = model_specs(
        {"chain": S.chain, "pairs": "remote.pipeline_support:pairs"},
        name=None,
        workdir=tmp_path,
        inputs=None,
        outputs=None,
        max_batch_size=64,
        instances=2,
    )
    assert [s.kind for s in specs] == ["pipeline", "pipeline"]
    assert specs[0].max_batch_size == 0 and not specs[0].dynamic_batching and specs[0].instances == 2
    assert [(t.name, t.dims) for t in specs[1].outputs] == [("pairs__s", (-1,))]


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(inputs=int, outputs=S.Summary), "must be a soa.Layout subclass"),
        (dict(inputs=None, outputs=S.Summary), "needs inputs= and outputs="),
        (dict(inputs=S.Tracks, outputs=S.Summary, rows="x"), "rows of output"),
        (dict(inputs={"a__b": S.Tracks}, outputs=S.Summary), "without '__'"),
    ],
)
def test_bad_declarations(bad, message):
    with pytest.raises(PipelineError, match=message):
        pipeline(**bad)(lambda q, t, s: None)


def test_call_checks_collections():
    q = pk.Queue(pk.device("cpu_serial"))
    tracks = S.make_tracks(8, q)
    with raises_type("must be a PortableCollection of Scored, got Summary"):
        S.chain(q, tracks, pk.PortableCollection(S.Summary, 8, q))
    with raises_value("output 'scored' has 5 rows, the pipeline declares 8 .*make it of 8 rows"):
        S.chain(q, tracks, pk.PortableCollection(S.Scored, 5, q))
    with raises_type(r"takes \(q, tracks, scored\): 2 collections, got 1; pass the inputs, then the outputs"):
        S.chain(q, tracks)
    with raises_type(r"first argument is the queue \(pk\.Queue\), got PortableCollection"):
        S.chain(tracks, tracks, tracks)


def test_local_call_is_the_body(queue):
    """The pipeline enqueues exactly its body: the same columns as calling the body directly."""
    got = _run_local(S.chain, queue)
    tracks = S.make_tracks(37, queue, seed=3)
    out = pk.PortableCollection(S.Scored, 37, queue)
    out.zero(queue)
    S.chain.fn(queue, tracks, out)
    want = out.to_dict(queue)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    assert float(got["total"]) == 3.0 and np.all(got["tag"] % 3 == 1 % 3)


def test_rows_callable_local():
    q = pk.Queue(pk.device("cpu_serial"))
    got = _run_local(S.pairs, q, n=10)
    x = S.make_tracks(10, q, seed=3).to_dict(q)["x"]
    np.testing.assert_allclose(got["s"], x[0::2] + x[1::2], rtol=1e-6)


def test_wire_round_trip_vector_matrix_scalar():
    q = pk.Queue(pk.device("cpu_serial"))
    tracks = S.make_tracks(5, q, seed=1)
    slot = S.chain.inputs[0]
    arrays = _wire.pack(slot, tracks)
    assert arrays["tracks__cov"].shape == (5, 2, 2) and arrays["tracks__scale"].shape == (1,)
    back = _wire.collection_from(slot, arrays, q)
    q.wait()
    a, b = tracks.to_dict(q), back.to_dict(q)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("field, dtype", [("x", np.float64), ("charge", np.int64), ("cov", np.float16)])
def test_wire_refuses_a_tensor_of_another_dtype(field, dtype):
    """A request tensor of the wrong dtype is a clear error naming it, on the server's input
    path too, never a silent cast into the collection (numpy's assignment would convert it)."""
    from inference.serving._pipelines import PipelineRunner

    q = pk.Queue(pk.device("cpu_serial"))
    slot = S.chain.inputs[0]
    arrays = _wire.pack(slot, S.make_tracks(5, q, seed=1))
    arrays[f"tracks__{field}"] = arrays[f"tracks__{field}"].astype(dtype)
    want = rf"tensor 'tracks__{field}' is {np.dtype(dtype).name} .*Tracks\.{field} needs "
    with pytest.raises(pk.ArgumentError, match=want + r".*; send it so \(the server does not cast\)") as info:
        _wire.collection_from(slot, arrays, q)
    assert isinstance(info.value, ValueError)
    with pytest.raises(RuntimeError, match="ArgumentError: input 'tracks': " + want):
        PipelineRunner(S.chain, "cpu").run(arrays)


def test_debug_poison_finds_unfilled_outputs():
    q = pk.Queue(pk.device("cpu_serial"))
    pipe = Pipeline(S.half_done.fn, S.Tracks, S.Scored, debug=True, name="half_done")
    tracks = S.make_tracks(6, q)
    pipe(q, tracks, pk.PortableCollection(S.Scored, 6, q))
    with pytest.raises(
        Exception,
        match=r"did not fill output column\(s\) \['scored.e', 'scored.tag', "
        r"'scored.total'\]",
    ) as info:
        q.wait()
    assert isinstance(info.value.__cause__, OutputsNotFilled)


def test_serve_refuses_what_is_not_a_pipeline():
    from inference.serving import serve

    with raises_type("plain function, not a pipeline; decorate it with @inference.pipeline"):
        serve(S.not_a_pipeline)
    with raises_type(r"is not a pipeline; use @inference\.pipeline"):
        serve("remote.pipeline_support:MODEL")
    with pytest.raises(ImportError, match="pipeline module 'no_such_pkg.mod' does not import: ModuleNotFoundError"):
        serve("no_such_pkg.mod:merge")


def test_ctrl_c_while_a_pipeline_module_imports_reaches_the_caller(tmp_path):
    """The server's loader let Ctrl-C through as an import error of the pipeline (it caught
    BaseException); the one loader (portable.cli.load_reference) lets it through as it is."""
    from inference.serving import serve
    from inference.serving._pipelines import load_reference

    module = tmp_path / "alpyka_pipe_ctrl_c.py"
    module.write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_reference(f"{module}:merge")
    with pytest.raises(KeyboardInterrupt):
        serve(f"{module}:merge")


def test_cli_reports_a_module_that_does_not_import(capsys):
    from inference.serving.__main__ import main

    assert main(["no_such_pkg.mod:merge", "--device", "cpu_serial"]) == 2
    err = capsys.readouterr().err
    assert "does not import" in err and "Traceback" not in err


class _Other(soa.Layout):
    y = soa.column(np.float64)


def test_not_a_layout_slot_in_remote_check():
    """A declared pipeline and a server with other layouts: the clear mismatch message."""
    from inference.remote import MetadataMismatch, RemotePipeline, TensorSpec
    from inference.remote._transport import ModelInfo

    rp = RemotePipeline.__new__(RemotePipeline)
    rp.name, rp.declaration = "chain", S.chain
    other = pipeline(inputs={"tracks": _Other}, outputs={"scored": S.Scored})(lambda q, t, s: None)
    cfg = derive_config(other)
    assert TensorSpec is TensorDesc  # the public name of the client's tensor descriptions
    info = ModelInfo("chain", cfg["inputs"], cfg["outputs"], 0)
    with pytest.raises(
        MetadataMismatch,
        match=r"server's inputs do not match the declared layouts .*"
        r"declared but not served as declared \['tracks__x'",
    ):
        rp._check_server(info)


_MYPIPE = """
import numpy as np
import portable as pk
import soa
from inference import pipeline


class Numbers(soa.Layout):
    x = soa.column(np.float32)


@pk.kernel
def twice(acc, out, inp, n):
    for i in acc.uniform_elements(n):
        out.x[i] = inp.x[i] * 2


@pipeline(inputs=Numbers, outputs=Numbers)
def double(q, inp, out):
    pk.exec(q, pk.valid_workdiv(q.device, max(inp.size, 1)), twice, out.view(), inp.const_view(), inp.size)
"""


@pytest.mark.slow
def test_serve_finds_a_pipeline_module_as_python_m_does(tmp_path):
    """``alpyka serve mypipe:double ../elsewhere/otherpipe.py:triple`` in mypipe's folder with no
    PYTHONPATH: the console script does not put the working directory on the path (``python -P``
    here does the same), yet the module form is found there as ``python -m`` finds it, and the
    file form by its path from another folder; the server process must import both too. (One
    server for both forms.)"""
    import os
    import sys

    from inference import RemotePipeline

    from .triton_support import pytriton_reason, serve_cli

    if pytriton_reason() is not None:
        pytest.skip(pytriton_reason())
    folder, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "mypipe.py").write_text(_MYPIPE)
    (elsewhere / "otherpipe.py").write_text(_MYPIPE.replace("def double(", "def triple(").replace("* 2", "* 3"))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root}
    refs = ("mypipe:double", str(elsewhere / "otherpipe.py") + ":triple")
    with serve_cli(
        *refs,
        "--device",
        "cpu_serial",
        "--grpc-port",
        "0",
        "--http-port",
        "0",
        env=env,
        cwd=str(folder),
        python_flags=("-P",),
    ) as (cli, lines, url):
        from .triton_support import server_child, torch_loaded

        # a pipeline without models: neither the command nor its server process loads torch
        assert not torch_loaded(cli.pid) and not torch_loaded(server_child(cli.pid))
        for where, module, name, factor in ((folder, "mypipe", "double", 2), (elsewhere, "otherpipe", "triple", 3)):
            sys.path.insert(0, str(where))
            try:
                mod = __import__(module)
            finally:
                sys.path.remove(str(where))
            q = pk.Queue(pk.device("cpu_serial"))
            data = np.arange(7, dtype=np.float32)
            inp = pk.PortableCollection.from_dict(mod.Numbers, {"x": data}, q)
            out = pk.PortableCollection(mod.Numbers, 7, q)
            with RemotePipeline(url, name, timeout=30) as remote:
                remote(q, inp, out)
                q.wait()
            np.testing.assert_array_equal(out.to_dict(q)["x"], data * factor)
            sys.modules.pop(module, None)


def test_pipeline_files_of_one_name_in_two_folders_and_dotted_file_names(tmp_path, monkeypatch):
    """Two folders' pipe.py, and a file named pipe.v2.py: each loads (the first under its own
    name, the others under names of alpyka's own that their reference turns back into the path)."""
    import sys

    from inference.serving._pipelines import load_reference

    monkeypatch.setattr(sys, "path", list(sys.path))  # what the loads add is taken back after
    before = set(sys.modules)
    paths = []
    for folder, fname in (("exp1", "pipe.py"), ("exp2", "pipe.py"), ("exp3", "pipe.v2.py")):
        d = tmp_path / folder
        d.mkdir()
        (d / fname).write_text(_MYPIPE.replace("Numbers", f"Numbers_{folder}"))
        paths.append(d / fname)
    pipes = [load_reference(f"{p}:double") for p in paths]
    assert len({id(p) for p in pipes}) == 3
    for p, pipe in zip(paths, pipes):
        ref_path = pipe.reference.rpartition(":")[0]
        assert load_reference(pipe.reference) is pipe, pipe.reference  # the server process's way in
        assert ref_path == "pipe" or ref_path == str(p)
    for name in set(sys.modules) - before:
        if name == "pipe" or name.startswith("alpyka_file_pipe"):
            del sys.modules[name]


def test_a_served_pipeline_on_a_device_index_that_does_not_exist():
    """was a RuntimeError; now the device error pk.device raises, naming the indices there are"""
    from inference.serving._pipelines import PipelineRunner

    n = len(pk.devices("cpu_serial"))
    want = rf"index {n} does not exist: serve the pipeline on cpu_serial:0\.\.{n - 1}"
    with pytest.raises(pk.NoSuchDevice, match=want):
        PipelineRunner(S.chain, f"cpu_serial:{n}")
