"""Train the edge classifier on synthetic events made by the pipeline's own kernels.

``python -m alpyka_demo.train [--events N] [--epochs E] [--aot] [--jit]`` writes ``edge_gnn.pt2``
(a ``torch.export`` program, the default), with ``--aot`` ``edge_gnn.aoti.pt2`` (AOTInductor) and with
``--jit`` ``edge_gnn.pt`` (TorchScript, legacy) into the model directory
(``$ALPYKA_MODEL_DIR``, default ``~/.cache/alpyka/models``). Seeded: the same arguments give the
same model (trained on one torch thread: bit for bit). 5-10 s on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

import portable as pk
from portable.cli import CliError, at_least, command_started, run_script

from . import _events as E
from ._layouts import FEATURES, INDEX

N_PARTICLES = 40
PROG = "python -m alpyka_demo.train"
#: how a Triton server hosts the model: one event graph per request, so no batching across events
SERVE_IO = {
    "inputs": ["features:float32:-1,7", "index:int32:-1,2"],
    "outputs": ["score:float32:-1,1"],
}
SERVE_OPTIONS = {**SERVE_IO, "max_batch_size": 0, "dynamic_batching": False}
TRAIN_SEED = 1_000_000  # training events never overlap the demo's seeds (0, 1, 2, ...)


def model_dir() -> Path:
    """``$ALPYKA_MODEL_DIR``, else ``~/.cache/alpyka/models``."""
    if os.environ.get("ALPYKA_MODEL_DIR"):
        return Path(os.environ["ALPYKA_MODEL_DIR"])
    try:
        return Path.home() / ".cache" / "alpyka" / "models"
    except RuntimeError as exc:  # no HOME and no password entry
        raise CliError(f"the demo's model directory: {exc}; set ALPYKA_MODEL_DIR to a writable directory") from None


def writable_model_dir(out: Path | None = None) -> Path:
    """``out`` (``--out``), else :func:`model_dir`, made if missing; a CliError naming the flag or
    ``ALPYKA_MODEL_DIR`` where it cannot be written (checked before minutes of training are spent
    on a model that cannot be saved)."""
    directory = model_dir() if out is None else out
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as exc:
        if out is not None:
            raise CliError(
                f"--out {out} cannot be written ({exc.strerror or exc}); give a writable directory"
            ) from None
        raise CliError(
            f"the demo's model directory {directory} cannot be written ({exc.strerror or exc}); set "
            "ALPYKA_MODEL_DIR to a writable directory (the model is trained and saved there on the first run)"
        ) from None
    return directory


def make_dataset(
    n_events: int, backend: str = "cpu_threads", n_particles: int = N_PARTICLES
) -> list[tuple[np.ndarray, ...]]:
    """Per event, its valid edges: features [E, 7] float32, index [E, 2] int32, target [E]."""
    q = pk.Queue(pk.device(backend))
    out = []
    for k in range(n_events):
        ev = E.allocate(q, n_particles)
        E.produce(q, ev, TRAIN_SEED + k)
        edges = ev.edges.to_dict(q)
        valid = edges["valid"] > 0.5
        feats = np.stack([edges[c][valid] for c in FEATURES], axis=1)
        index = np.stack([edges[c][valid] for c in INDEX], axis=1)
        out.append((feats, index, edges["same"][valid], ev.n_slots))
    return out


def batches(data: list, order: np.ndarray, per_batch: int):
    """Events concatenated into one graph each (fragment indices offset per event)."""
    import torch

    for b in range(0, len(order), per_batch):
        feats, index, target, offset = [], [], [], 0
        for k in order[b : b + per_batch]:
            f, i, t, n_slots = data[k]
            feats.append(f)
            index.append(i + offset)
            target.append(t)
            offset += n_slots
        yield (
            torch.from_numpy(np.concatenate(feats)),
            torch.from_numpy(np.concatenate(index)),
            torch.from_numpy(np.concatenate(target))[:, None],
        )


def train(n_events: int = 300, epochs: int = 10, seed: int = 0, log: bool = True):
    """Train an EdgeGNN; returns the module (eval mode) and the final training loss. At least one
    event and one epoch (``n_events=0`` trained on nothing and returned an untrained model with
    a loss of 0.0)."""
    for what, value in (("n_events (--events)", n_events), ("epochs (--epochs)", epochs)):
        if value < 1:
            raise pk.ArgumentError(f"{what} is at least 1 (a model trained on nothing is untrained), got {value}")
    import torch

    from ._gnn import EdgeGNN

    torch.manual_seed(seed)
    t0 = time.perf_counter()
    data = make_dataset(n_events)
    if log:
        print(f"  {n_events} training events made by the pipeline's kernels ({time.perf_counter() - t0:.1f} s)")
    model = EdgeGNN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = torch.nn.BCELoss()
    # one intra-op thread: with two, torch's parallel sums add in an order the threads' timing
    # decides, and two trainings with the same seed ended at different weights (losses 0.0803 and
    # 0.0774 after 10 epochs); with one the weights are the same every time, and on 2 busy cores
    # the training took a third of the time (8 s against 27-31 s for 100 events, 6 epochs)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _fit(model, opt, loss_fn, data, epochs, seed, t0, log)
    finally:
        torch.set_num_threads(threads)


def _fit(model, opt, loss_fn, data, epochs: int, seed: int, t0: float, log: bool):
    """The epochs of :func:`train`; returns the module (eval mode) and the final training loss."""
    loss_value = float("nan")
    for epoch in range(epochs):
        order = np.random.default_rng(seed + epoch).permutation(len(data))
        total, count = 0.0, 0
        for feats, index, target in batches(data, order, per_batch=10):
            opt.zero_grad()
            loss = loss_fn(model(feats, index), target)
            loss.backward()
            opt.step()
            total += loss.item()
            count += 1
        loss_value = total / max(count, 1)
        if log:
            print(f"  epoch {epoch + 1:2d}/{epochs}: loss {loss_value:.4f} ({time.perf_counter() - t0:.1f} s)")
    model.eval()
    return model, loss_value


#: the file of each model kind in the model directory
FILES = {"exported": "edge_gnn.pt2", "aot": "edge_gnn.aoti.pt2", "jit": "edge_gnn.pt"}


def save(model, directory: Path, aot: bool = False, jit: bool = False) -> dict[str, Path]:
    """Write the ``torch.export`` program (and an AOTInductor package with ``aot``, TorchScript
    with ``jit``) into ``directory``; ``{kind: path}``."""
    import warnings

    import torch

    from inference import export

    directory.mkdir(parents=True, exist_ok=True)
    feats = torch.zeros(1000, 7)
    index = torch.zeros(1000, 2, dtype=torch.int32)
    # `alpyka serve` reads the tensor declarations from the exported program's input specs
    paths = {"exported": Path(export(model, (feats, index), directory / FILES["exported"]))}
    if jit:  # legacy: torch warns that TorchScript is deprecated; the user asked for it
        paths["jit"] = directory / FILES["jit"]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*torch\.jit")
            scripted = torch.jit.script(model)
            tmp = paths["jit"].with_suffix(".pt.tmp")
            # the tensor declarations `alpyka serve` reads, so the file can be hosted as it is
            scripted.save(str(tmp), _extra_files={"alpyka_io.json": json.dumps(SERVE_IO)})
        tmp.replace(paths["jit"])
    if aot:
        from inference import aot as aot_mod

        paths["aot"] = directory / FILES["aot"]
        aot_mod.compile(model, (feats, index), paths["aot"], device="cpu", dynamic_batch=True)
    return paths


def ensure_model(kind: str = "exported", log: bool = True) -> Path:
    """The trained model file of ``kind`` ("exported", "aot" or "jit"), training it first if missing."""
    if kind not in FILES:
        raise ValueError(f"model kind {kind!r}: choose one of {list(FILES)}")
    path = model_dir() / FILES[kind]
    if not path.exists():
        directory = writable_model_dir()
        if log:
            print(f"training the edge classifier (first run; saved to {directory}) ...")
        model, _ = train(log=log)
        save(model, directory, aot=(kind == "aot"), jit=(kind == "jit"))
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m alpyka_demo.train``; a Ctrl-C ends it with one line, killed by SIGINT
    (``portable.cli.run_script``), while it imports too (``portable/_command_start.py``)."""
    command_started()  # Python's handler again: the start's handler ends only the imports
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    parser.add_argument("--events", type=at_least(1), default=300)
    parser.add_argument("--epochs", type=at_least(1), default=10)
    parser.add_argument("--aot", action="store_true", help="also write the AOTInductor package (edge_gnn.aoti.pt2)")
    parser.add_argument("--jit", action="store_true", help="also write TorchScript (edge_gnn.pt, legacy)")
    parser.add_argument("--out", type=Path, default=None, help="model directory")
    args = parser.parse_args(argv)
    try:
        out = writable_model_dir(args.out)  # before the training, not a traceback after it
    except CliError as exc:
        parser.error(str(exc))
    model, loss = train(args.events, args.epochs)
    paths = save(model, out, aot=args.aot, jit=args.jit)
    for kind, p in paths.items():
        print(f"wrote {kind}: {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main, prog=PROG))
