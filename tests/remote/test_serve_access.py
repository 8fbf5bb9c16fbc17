"""Who may use a served Triton: inference, health, metadata, config and statistics are open; the
model repository (load/unload: code execution), shared-memory registration, trace and logging
need the server's access token in a header, over HTTP and gRPC; alpyka's client finds the token."""

from __future__ import annotations

import base64
import http.client
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from inference.remote import InferenceFailed, RemoteModel

from .triton_support import pytriton_reason

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason()))

HEADER = "triton-access-token"

#: restricted HTTP endpoints: (method, path)
RESTRICTED_HTTP = [
    ("POST", "/v2/repository/index"),
    ("POST", "/v2/repository/models/identity/load"),
    ("POST", "/v2/repository/models/identity/unload"),
    ("GET", "/v2/systemsharedmemory/status"),
    ("POST", "/v2/systemsharedmemory/region/r/register"),
    ("POST", "/v2/systemsharedmemory/unregister"),
    ("GET", "/v2/cudasharedmemory/status"),
    ("GET", "/v2/trace/setting"),
    ("POST", "/v2/trace/setting"),
    ("GET", "/v2/logging"),
    ("POST", "/v2/logging"),
]
OPEN_HTTP = [
    "/v2/health/live",
    "/v2/health/ready",
    "/v2",
    "/v2/models/identity",
    "/v2/models/identity/ready",
    "/v2/models/identity/config",
    "/v2/models/identity/stats",
    "/v2/models/stats",
]


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from inference.serving import serve

    d = tmp_path_factory.mktemp("access")
    torch.jit.script(Identity()).save(str(d / "identity.pt"))
    handle = serve(
        {"identity": {"path": str(d / "identity.pt"), "inputs": ["x:float32:3"], "outputs": ["y:float32:3"]}},
        max_batch_size=8,
        http_port=0,  # HTTP is off unless asked for: these tests reach its restricted endpoints
    )
    try:
        yield handle
    finally:
        handle.stop()


def http_request(server, method: str, path: str, body: bytes = b"{}", headers: dict | None = None):
    """One request as a web page's simple request is sent (``Content-Type: text/plain``); returns
    (status, headers, body)."""
    host, port = server.http_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            method,
            path,
            body=body if method != "GET" else None,
            headers={"Content-Type": "text/plain", **(headers or {})},
        )
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def evil_load_body(marker) -> bytes:
    """A repository load of a Python-backend model whose code writes ``marker`` when loaded."""
    code = (
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    )
    config = {
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}],
    }
    return json.dumps(
        {"parameters": {"config": json.dumps(config), "file:1/model.py": base64.b64encode(code.encode()).decode()}}
    ).encode()


def identity_works(url: str, protocol: str, **kw) -> RemoteModel:
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    model = RemoteModel(url, "identity", protocol=protocol, timeout=20, retries=0, **kw)
    np.testing.assert_array_equal(model.infer({"x": x})["y"], x)
    return model


def test_a_page_cannot_load_code_or_unload_the_model_over_http(server, tmp_path):
    """The POSTs a web page can send without a preflight: the load of Python code and the unload
    of the served model are refused; nothing ran, the model still serves."""
    marker = tmp_path / "ran"
    status, _, body = http_request(server, "POST", "/v2/repository/models/evil/load", evil_load_body(marker))
    assert status == 403, body
    status, _, body = http_request(server, "POST", "/v2/repository/models/identity/unload")
    assert status == 403, body
    assert not marker.exists()
    identity_works(server.http_url, "http").close()


@pytest.mark.parametrize("method,path", RESTRICTED_HTTP)
def test_restricted_http_endpoints_need_the_token_in_its_header(server, method, path):
    status, _, body = http_request(server, method, path)
    assert status == 403, (path, body)
    # not in a form a simple request can carry: a query parameter, a safelisted header
    status, _, _ = http_request(server, method, f"{path}?{HEADER}={server.token}")
    assert status == 403
    safelisted = {"Accept": server.token, "Content-Language": server.token}
    status, _, _ = http_request(server, method, path, headers=safelisted)
    assert status == 403
    if method == "GET":  # the token in its header opens it (alpyka's client sends it)
        status, _, body = http_request(server, method, path, headers={HEADER: server.token})
        assert status == 200, (path, body)


def test_a_preflight_for_the_token_header_is_not_allowed(server):
    """A page's request with the header needs the browser's CORS preflight first: Triton's
    answer allows no origin and no header, so the browser never sends the request."""
    status, headers, _ = http_request(
        server,
        "OPTIONS",
        "/v2/repository/models/evil/load",
        headers={
            "Origin": "http://evil.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": HEADER,
        },
    )
    assert not any(h.startswith("access-control-allow") for h in headers), (status, headers)


@pytest.mark.parametrize("path", OPEN_HTTP)
def test_health_metadata_config_and_statistics_are_open_over_http(server, path):
    status, _, body = http_request(server, "GET", path)
    assert status == 200, (path, body)


def test_restricted_grpc_protocols_need_the_token(server, tmp_path):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from inference.serving._access import access_headers

    marker = tmp_path / "ran"
    client = grpcclient.InferenceServerClient(server.grpc_url)
    evil = json.loads(evil_load_body(marker))["parameters"]
    files = {"file:1/model.py": base64.b64decode(evil["file:1/model.py"])}
    calls = {
        "load": lambda **h: client.load_model("evil", config=evil["config"], files=files, **h),
        "unload": lambda **h: client.unload_model("identity", **h),
        "index": lambda **h: client.get_model_repository_index(**h),
        "shm register": lambda **h: client.register_system_shared_memory("r", "/alpyka-no-such-region", 64, **h),
        "shm status": lambda **h: client.get_system_shared_memory_status(**h),
        "cuda shm status": lambda **h: client.get_cuda_shared_memory_status(**h),
        "trace": lambda **h: client.get_trace_settings(**h),
        "logging": lambda **h: client.get_log_settings(**h),
    }
    try:
        for what, call in calls.items():
            with pytest.raises(InferenceServerException, match="restricted"):
                call()
            if what in ("index", "shm status", "logging"):
                call(headers=access_headers(server.token, "grpc"))  # opens it
        assert not marker.exists()
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("identity")
        assert client.get_model_metadata("identity").name == "identity"
        assert client.get_model_config("identity").config.max_batch_size == 8
        assert any(s.name == "identity" for s in client.get_inference_statistics("identity").model_stats)
    finally:
        client.close()
    identity_works(server.grpc_url, "grpc").close()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_alpyka_client_registers_shared_memory_with_the_token(server, protocol):
    url = server.grpc_url if protocol == "grpc" else server.http_url
    with identity_works(url, protocol, shared_memory="system") as model:
        assert model.statistics().client.shm_requests == 1


def test_another_process_of_this_user_finds_the_token(server):
    """A client in another process (as beside ``alpyka serve``) reads it from the server's
    ``access.json``, a file only this user can read."""
    access = server.workdir / "access.json"
    assert access.stat().st_mode & 0o777 == 0o600 and server.workdir.stat().st_mode & 0o077 == 0
    assert (server.workdir / "config.json").stat().st_mode & 0o077 == 0
    script = textwrap.dedent(f"""
        import numpy as np
        from inference.remote import RemoteModel
        with RemoteModel({server.grpc_url!r}, "identity", shared_memory="system", timeout=20) as m:
            y = m.infer({{"x": np.ones((2, 3), np.float32)}})["y"]
            print(y.sum(), m.statistics().client.shm_requests)
    """)
    env = {k: v for k, v in os.environ.items() if k != "ALPYKA_SERVE_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["6.0", "1"]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_wrong_token_is_refused_and_says_so(server, protocol):
    url = server.grpc_url if protocol == "grpc" else server.http_url
    with pytest.raises(InferenceFailed, match="refused to register shared memory.*access token, which was wrong"):
        identity_works(url, protocol, shared_memory="system", token="not-the-token")
    with identity_works(url, protocol, shared_memory="auto", token="not-the-token") as model:
        assert model.statistics().client.shm_requests == 0  # auto: the bytes go in the request
