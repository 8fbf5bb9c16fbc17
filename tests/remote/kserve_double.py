"""A small KServe v2 gRPC server for tests, built on tritonclient's service stubs.

It hosts one model that doubles its input (``x`` -> ``y = 2 x``, FP32, batch axis -1) and can
misbehave on purpose: answer slowly (``delay``), fail the first requests (``fail_first``),
declare wrong metadata (``wrong_dtype``), load slowly (``loading``: not ready for that many
seconds), list no models (``list_models=False``). Runs in-process (:func:`start`) or as a script
(``python kserve_double.py PORT [--delay S]``) for tests that kill it by its pid.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field

import grpc
import numpy as np
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as stubs


@dataclass
class Behaviour:
    model: str = "double"
    delay: float = 0.0  # seconds before each infer response
    fail_first: int = 0  # the first N infer requests fail with UNAVAILABLE
    wrong_dtype: bool = False  # metadata/config declare INT32 instead of FP32
    max_batch_size: int = 8
    loading: float = 0.0  # seconds after start during which the model is LOADING (not ready)
    list_models: bool = True  # False: an empty repository index (as PyTriton's servers)
    requests: int = 0  # infer requests received
    rows: list[int] = field(default_factory=list)  # batch size of each answered request


class DoubleServicer(stubs.GRPCInferenceServiceServicer):
    def __init__(self, behaviour: Behaviour) -> None:
        self.b = behaviour
        self.lock = threading.Lock()
        self.started = time.monotonic()

    def _loaded(self) -> bool:
        return time.monotonic() - self.started >= self.b.loading

    # health
    def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)

    def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=request.name == self.b.model and self._loaded())

    def RepositoryIndex(self, request, context):
        if not self.b.list_models:
            return pb.RepositoryIndexResponse()
        return pb.RepositoryIndexResponse(
            models=[
                pb.RepositoryIndexResponse.ModelIndex(
                    name=self.b.model, version="1", state="READY" if self._loaded() else "LOADING"
                )
            ]
        )

    def _known(self, name, context) -> None:
        if name != self.b.model:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{name}' is not found")

    # description
    def ModelMetadata(self, request, context):
        self._known(request.name, context)
        dt = "INT32" if self.b.wrong_dtype else "FP32"
        return pb.ModelMetadataResponse(
            name=self.b.model,
            versions=["1"],
            platform="double",
            inputs=[pb.ModelMetadataResponse.TensorMetadata(name="x", datatype=dt, shape=[-1, -1])],
            outputs=[pb.ModelMetadataResponse.TensorMetadata(name="y", datatype=dt, shape=[-1, -1])],
        )

    def ModelConfig(self, request, context):
        self._known(request.name, context)
        dt = mc.TYPE_INT32 if self.b.wrong_dtype else mc.TYPE_FP32
        cfg = mc.ModelConfig(
            name=self.b.model,
            max_batch_size=self.b.max_batch_size,
            input=[mc.ModelInput(name="x", data_type=dt, dims=[-1])],
            output=[mc.ModelOutput(name="y", data_type=dt, dims=[-1])],
        )
        return pb.ModelConfigResponse(config=cfg)

    def ModelStatistics(self, request, context):
        return pb.ModelStatisticsResponse()

    # inference
    def ModelInfer(self, request, context):
        self._known(request.model_name, context)
        with self.lock:
            self.b.requests += 1
            fail = self.b.requests <= self.b.fail_first
        if fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "double: failing on purpose")
        if self.b.delay:
            time.sleep(self.b.delay)
        inp = request.inputs[0]
        shape = list(inp.shape)
        x = np.frombuffer(request.raw_input_contents[0], np.float32).reshape(shape)
        if shape and shape[0] > self.b.max_batch_size:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"batch {shape[0]} over max_batch_size {self.b.max_batch_size}"
            )
        with self.lock:
            self.b.rows.append(shape[0])
        out = pb.ModelInferResponse.InferOutputTensor(name="y", datatype="FP32", shape=shape)
        return pb.ModelInferResponse(
            model_name=self.b.model,
            id=request.id,
            outputs=[out],
            raw_output_contents=[(2 * x).astype(np.float32).tobytes()],
        )


class DoubleServer:
    """An in-process server on 127.0.0.1 (a free port); ``stop()`` ends it."""

    def __init__(self, behaviour: Behaviour | None = None, port: int = 0) -> None:
        self.behaviour = behaviour or Behaviour()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        stubs.add_GRPCInferenceServiceServicer_to_server(DoubleServicer(self.behaviour), self.server)
        self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.server.start()

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop(grace=None)

    def __enter__(self) -> DoubleServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--delay", type=float, default=0.0)
    a = p.parse_args(argv)
    srv = DoubleServer(Behaviour(delay=a.delay), a.port)
    print(f"ready {srv.port}", flush=True)
    srv.server.wait_for_termination()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
