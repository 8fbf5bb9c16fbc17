"""The serve access token stays secret from other local users, and a weak one is refused: another
uid (``nobody``) reads every command line, environment and server file it can, finds no token, and
reaches no restricted endpoint over HTTP or gRPC; ``tritonserver`` really runs with every dangerous
endpoint restricted and every listener on 127.0.0.1, whatever PyTriton's defaults are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from inference.serving import ServeError, TokenError, serve
from inference.serving._access import MUST_RESTRICT, check_token, restricted_endpoints
from inference.serving._private_args import (
    GATE,
    PLACEHOLDER,
    build_preload,
    command_line_problems,
    tritonserver_pid,
)

from .test_serve_access import RESTRICTED_HTTP, evil_load_body, identity_works
from .triton_support import group_pids, pytriton_reason

NOBODY = 65534
#: the endpoints that must need the token (written out: a test of MUST_RESTRICT, not with it)
DANGEROUS = {"model-repository", "shared-memory", "trace", "logging"}

# ---------------------------------------------------------------- tokens are checked


@pytest.mark.parametrize(
    "token,why",
    [
        ("a", "1 character long"),
        ("short-token-15ch", None),  # 16: accepted
        ("fifteen-chars-x", "15 characters long"),
        (" ", "' '"),
        ("abc --http-address 0.0.0.0", "' '"),
        ("a" * 20 + "\t", "'\\t'"),
        ("tok:triton-access-token=x", "':'"),
        ("é" * 20, "'é'"),
        ("a" * 20 + "\x00", "'\\x00'"),
    ],
)
def test_weak_or_odd_tokens_are_refused(token, why):
    if why is None:
        assert check_token(token) == token
        return
    with pytest.raises(TokenError, match="refused") as info:
        check_token(token, "$ALPYKA_SERVE_TOKEN")
    assert why in str(info.value) and "$ALPYKA_SERVE_TOKEN" in str(info.value)
    assert "secrets.token_urlsafe" in str(info.value)  # the fix


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_serve_refuses_a_bad_token_at_once(where, monkeypatch, tmp_path):
    """Before anything starts (no work directory, no server): no 120-s wait for a token Triton
    would have split into arguments."""
    bad = "abc --http-address 0.0.0.0"
    kw = {}
    if where == "argument":
        kw["token"] = bad
    else:
        monkeypatch.setenv("ALPYKA_SERVE_TOKEN", bad)
    t0 = time.monotonic()
    with pytest.raises(TokenError, match="refused: it has ' '"):
        serve(str(tmp_path / "never-read.pt"), workdir=tmp_path / "wd", **kw)
    assert time.monotonic() - t0 < 30  # hang guard: refused before any start
    assert not (tmp_path / "wd").exists()


def test_alpyka_serve_says_one_line_for_a_short_token(tmp_path):
    env = dict(os.environ, ALPYKA_SERVE_TOKEN="a")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH")) if p)
    r = subprocess.run(
        [sys.executable, "-m", "inference.serving", str(tmp_path / "m.pt"), "--input", "x:float32:3"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode != 0
    assert "ALPYKA_SERVE_TOKEN" in r.stderr and "1 character long" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


# ---------------------------------------------- the restriction, whatever PyTriton does

GOOD_ARGV = [
    "/x/tritonserver",
    "--model-repository",
    f"/w/pytriton/model-store{GATE}",
    "--http-address",
    "127.0.0.1",
    "--grpc-address",
    "127.0.0.1",
    "--metrics-address",
    "127.0.0.1",
    "--grpc-restricted-protocol",
    f"shared-memory,model-repository,trace,logging:triton-access-token={PLACEHOLDER}",
    "--http-restricted-api",
    f"shared-memory,model-repository,trace,logging:triton-access-token={PLACEHOLDER}",
]


def _without(argv, option):
    i = argv.index(option)
    return argv[:i] + argv[i + 2 :]


def _replaced(argv, old, new):
    return [a.replace(old, new) for a in argv]


@pytest.mark.parametrize(
    "argv,problem",
    [
        (GOOD_ARGV + ["the-secret-token-value"], "token is on the command line"),
        (_without(GOOD_ARGV, "--http-restricted-api"), "no --http-restricted-api"),
        (_without(GOOD_ARGV, "--grpc-restricted-protocol"), "no --grpc-restricted-protocol"),
        (_replaced(GOOD_ARGV, "shared-memory,", ""), "leaves shared-memory open"),
        (_replaced(GOOD_ARGV, "model-repository,", ""), "leaves model-repository open"),
        (_replaced(GOOD_ARGV, ",logging", ""), "leaves logging open"),
        (_replaced(GOOD_ARGV, f"={PLACEHOLDER}", "=public"), "something else than the token"),
        (GOOD_ARGV + ["--http-address=0.0.0.0"], "--http-address"),
        (_without(GOOD_ARGV, "--grpc-address"), "--grpc-address is not given"),
        (_replaced(GOOD_ARGV, "127.0.0.1", "0.0.0.0"), "--metrics-address"),
        (_replaced(GOOD_ARGV, GATE, ""), "not gated"),
        (GOOD_ARGV + ["--model-repository", "/elsewhere"], "not gated"),
    ],
)
def test_a_command_line_that_exposes_anything_is_refused(argv, problem):
    assert DANGEROUS <= set(MUST_RESTRICT)
    assert command_line_problems(GOOD_ARGV, "the-secret-token-value") == []
    problems = command_line_problems(argv, "the-secret-token-value")
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize("defaults", [[], ["statistics"], ["shared-memory"], ["trace", "logging", "health"]])
def test_the_restricted_endpoints_do_not_follow_pytriton_defaults(monkeypatch, defaults):
    """Were PyTriton to protect fewer endpoints by default, alpyka still restricts its four."""
    triton = pytest.importorskip("pytriton.triton")
    monkeypatch.setattr(triton, "DEFAULT_PROTECTED_ENDPOINTS", defaults)
    chosen = restricted_endpoints()
    assert DANGEROUS <= set(chosen) and "statistics" not in chosen


def test_the_preload_replaces_the_placeholder_and_leaves_the_environment(tmp_path):
    """The mechanism alone: a process started with the library sees the token where its command
    line shows the placeholder; without the token in its environment it does not start."""
    pytest.importorskip("pytriton.triton")
    d = tmp_path / "private"
    d.mkdir(mode=0o700)
    lib = build_preload(d)
    script = (
        "import os,sys;print(sys.argv[1]);print(open('/proc/self/cmdline','rb').read().split(b'\\0')[5]);"
        "print(sorted(k for k in os.environ if 'ALPYKA_TRITON' in k), os.environ.get('LD_PRELOAD'))"
    )
    env = dict(os.environ, LD_PRELOAD=str(lib), ALPYKA_TRITON_ACCESS_TOKEN="real-secret-token-1")
    for rest in ("", "libm.so.6"):  # the caller's own LD_PRELOAD, kept for the process's children
        env.update(ALPYKA_TRITON_PRELOAD_REST=rest, LD_PRELOAD=f"{lib}:{rest}" if rest else str(lib))
        r = subprocess.run(
            [sys.executable, "-I", "-S", "-c", script, f"k={PLACEHOLDER}{GATE}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = r.stdout.splitlines()
        assert lines[:2] == ["k=real-secret-token-1", f"b'k={PLACEHOLDER}{GATE}'"], r.stderr
        assert lines[2] == f"[] {rest or None}"
    env.pop("ALPYKA_TRITON_ACCESS_TOKEN")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", script, f"k={PLACEHOLDER}"], env=env, timeout=120)
    assert r.returncode == 111  # fails closed: never runs with the public placeholder as its token
    os.chmod(d, 0o755)
    with pytest.raises(Exception, match="not a directory private to this user"):
        build_preload(d)


def test_a_token_that_contains_the_gate_reaches_main_whole(tmp_path):
    """The token may contain the repository's gate suffix ('.' and '-' are token characters): it
    reached main without it (a shorter token than the one the clients send)."""
    pytest.importorskip("pytriton.triton")
    d = tmp_path / "private"
    d.mkdir(mode=0o700)
    lib = build_preload(d)
    token = f"real-secret{GATE}-tail"
    env = dict(os.environ, LD_PRELOAD=str(lib), ALPYKA_TRITON_ACCESS_TOKEN=token, ALPYKA_TRITON_PRELOAD_REST="")
    script = "import sys;print(sys.argv[1]);print(sys.argv[2])"
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, f"k={PLACEHOLDER}", f"/repo{GATE}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.stdout.splitlines() == [f"k={token}", "/repo"], r.stderr


def test_the_token_is_in_the_environment_only_while_triton_starts_and_never_logged(caplog, monkeypatch):
    """PyTriton copies this environment for tritonserver (and logs it at debug level): the token is
    there only meanwhile, with the caller's own LD_PRELOAD kept for Triton's children, and
    PyTriton's message with it is held back even when debug logging is on."""
    import logging

    from inference.serving import _private_args

    monkeypatch.setenv("LD_PRELOAD", "/caller/own.so")
    before = dict(os.environ)
    caplog.set_level(logging.DEBUG)
    log = logging.getLogger("pytriton.server.triton_server")
    with _private_args._preloaded("/p/alpyka_private_args.so", "the-secret-token-value"):
        assert os.environ["ALPYKA_TRITON_ACCESS_TOKEN"] == "the-secret-token-value"
        assert os.environ["LD_PRELOAD"] == "/p/alpyka_private_args.so:/caller/own.so"
        assert os.environ["ALPYKA_TRITON_PRELOAD_REST"] == "/caller/own.so"
        log.debug("Environment: %s", dict(os.environ))
    log.debug("after: %s", "visible")
    assert dict(os.environ) == before
    assert "the-secret-token-value" not in caplog.text and "after: visible" in caplog.text


def test_serve_without_a_c_compiler_says_what_to_install(monkeypatch, tmp_path):
    pytest.importorskip("pytriton.triton")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CC", raising=False)
    torch = pytest.importorskip("torch")
    torch.jit.script(torch.nn.Linear(3, 2)).save(str(tmp_path / "m.pt"))
    with pytest.raises(ServeError, match="needs a C compiler.*install one"):
        serve(str(tmp_path / "m.pt"), inputs=["x:float32:3"], workdir=tmp_path / "wd")


# ---------------------------------------------------------------- another local user

needs_triton = pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason()))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    torch = pytest.importorskip("torch")

    class Identity(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

    d = tmp_path_factory.mktemp("secret")
    torch.jit.script(Identity()).save(str(d / "identity.pt"))
    handle = serve(
        {"identity": {"path": str(d / "identity.pt"), "inputs": ["x:float32:3"], "outputs": ["y:float32:3"]}},
        max_batch_size=8,
        http_port=0,  # HTTP too: the most exposed server (the default one serves gRPC only)
    )
    try:
        yield handle
    finally:
        handle.stop()


def _argv(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().decode().split("\0")


@needs_triton
def test_tritonserver_runs_with_every_dangerous_endpoint_restricted(server):
    """The command line Triton really runs with (not what PyTriton's defaults promise)."""
    pid = tritonserver_pid(server.pid)
    assert pid is not None
    argv = _argv(pid)
    assert command_line_problems(argv, server.token) == []
    for option in ("--http-restricted-api", "--grpc-restricted-protocol"):
        value = argv[argv.index(option) + 1]
        apis, guard = value.split(":", 1)
        assert DANGEROUS <= set(apis.split(",")), value
        assert guard == f"triton-access-token={PLACEHOLDER}"
    for option in ("--http-address", "--grpc-address", "--metrics-address"):
        assert argv[argv.index(option) + 1] == "127.0.0.1"
    assert server.token not in "\0".join(argv)
    with open(f"/proc/{pid}/maps") as fh:
        assert "alpyka_private_args.so" in fh.read()  # the token came through the preload
    assert server.token not in server.log_path.read_text(errors="replace")
    stubs = 0
    for entry in group_pids(server.pid):  # Triton's stubs inherit neither the token nor the library
        try:
            if not _argv(entry)[0].endswith("triton_python_backend_stub"):
                continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        stubs += 1
        assert server.token.encode() not in env and b"LD_PRELOAD" not in env and b"ALPYKA_TRITON" not in env
    assert stubs >= 1


#: runs as root only until it has imported what it needs (root's home, with the interpreter and its
#: site-packages, is closed to nobody), then as ``nobody``: reads what it can, tries every token found
_ATTACK = textwrap.dedent(
    r"""
    import base64, encodings.idna, http.client, json, os, re, sys
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    args = json.loads(sys.argv[1])
    token = sys.stdin.readline().strip().encode()  # never on a command line
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{args['grpc_port']}")  # imports grpc's parts now
    try:
        os.setgroups([])
        os.setgid(args["uid"])
        os.setuid(args["uid"])
    except OSError as exc:
        print(json.dumps({"cannot_switch": str(exc)}))
        sys.exit(0)
    report = {"uid": os.getuid(), "cmdlines": 0, "environs": 0, "files": 0, "seen": [], "reached": []}
    texts = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        for leaf, key in (("cmdline", "cmdlines"), ("environ", "environs")):
            try:
                with open(f"/proc/{e}/{leaf}", "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            report[key] += 1
            texts.append((f"/proc/{e}/{leaf}", data))
            if int(e) == args["triton"] and leaf == "cmdline":
                report["triton_cmdline"] = data.decode(errors="replace")
    for top in args["paths"]:
        for root, dirs, files in os.walk(top):
            for name in files:
                path = os.path.join(root, name)
                try:
                    with open(path, "rb") as fh:
                        data = fh.read(1 << 24)
                except OSError:
                    continue
                report["files"] += 1
                texts.append((path, data))
    report["seen"] = [where for where, data in texts if token in data]
    found = set()
    for _, data in texts:
        found.update(m.decode(errors="replace") for m in re.findall(rb"triton-access-token=([^\s\x00]+)", data))
    candidates = [None] + sorted(found)[:40]
    report["candidates"] = len(candidates)
    host, port = "127.0.0.1", args["http_port"]
    evil = base64.b64decode(args["evil"])
    for cand in candidates:
        headers = {"Content-Type": "text/plain"}
        if cand is not None:
            headers["triton-access-token"] = cand
        for method, path in args["http"] + [["POST", "/v2/repository/models/evil/load"]]:
            conn = http.client.HTTPConnection(host, port, timeout=30)
            conn.request(method, path, body=evil if method == "POST" else None, headers=headers)
            status = conn.getresponse().status
            conn.close()
            if status != 403:
                report["reached"].append(["http", method, path, status])
        h = {} if cand is None else {"triton-grpc-protocol-triton-access-token": cand}
        ev = json.loads(evil)["parameters"]
        files = {"file:1/model.py": base64.b64decode(ev["file:1/model.py"])}
        calls = {
            "load": lambda: client.load_model("evil", config=ev["config"], files=files, headers=h),
            "unload": lambda: client.unload_model("identity", headers=h),
            "index": lambda: client.get_model_repository_index(headers=h),
            "shm register": lambda: client.register_system_shared_memory("r", "/x", 64, headers=h),
            "shm status": lambda: client.get_system_shared_memory_status(headers=h),
            "cuda shm status": lambda: client.get_cuda_shared_memory_status(headers=h),
            "trace": lambda: client.get_trace_settings(headers=h),
            "logging": lambda: client.get_log_settings(headers=h),
        }
        for what, call in calls.items():
            try:
                call()
            except InferenceServerException as exc:
                if "restricted" in str(exc):
                    continue
            report["reached"].append(["grpc", what])
    client.close()
    print(json.dumps(report))
    """
)


@needs_triton
@pytest.mark.skipif(os.name != "posix" or not os.path.isdir("/proc"), reason="needs Linux /proc")
def test_another_local_user_finds_no_token_and_reaches_no_restricted_endpoint(server, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("switching to another uid (nobody) needs root; CI runs as root")
    marker = tmp_path / "ran"
    pid = tritonserver_pid(server.pid)
    assert pid is not None
    paths = [str(server.workdir), "/dev/shm"] + [
        os.path.join("/tmp", n) for n in os.listdir("/tmp") if n.startswith(("folder", "python_env"))
    ]
    args = {
        "uid": NOBODY,
        "triton": pid,
        "paths": paths,
        "http_port": server.http_port,
        "grpc_port": server.grpc_port,
        "http": RESTRICTED_HTTP,
        "evil": __import__("base64").b64encode(evil_load_body(marker)).decode(),
    }
    env = {k: v for k, v in os.environ.items() if k != "ALPYKA_SERVE_TOKEN"}
    r = subprocess.run(
        [sys.executable, "-c", _ATTACK, json.dumps(args)],
        input=server.token + "\n",
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd="/",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    if "cannot_switch" in report:
        pytest.skip(f"this root cannot switch to uid {NOBODY}: {report['cannot_switch']}")
    assert report["uid"] == NOBODY
    # it did read: every process's command line, Triton's included (with the placeholder only)
    assert report["cmdlines"] > 3 and "--http-restricted-api" in report.get("triton_cmdline", ""), report
    assert report["seen"] == [], report["seen"]
    assert report["reached"] == [], report["reached"]
    assert not marker.exists()
    assert report["environs"] < report["cmdlines"]  # others' environments are closed to it
    assert PLACEHOLDER in report["triton_cmdline"] and report["candidates"] >= 2  # none, the placeholder
    # Triton's shared memory (the requests' tensors) is this user's only
    for name in os.listdir("/dev/shm"):
        if name.startswith(f"pytrtion{server.pid}-"):
            assert os.stat(os.path.join("/dev/shm", name)).st_mode & 0o077 == 0, name
    identity_works(server.grpc_url, "grpc", shared_memory="system").close()  # the owner still can


@needs_triton
def test_a_tritonserver_without_the_library_never_listens(tmp_path):
    """Were the library not run (LD_PRELOAD ignored), the placeholder would be a public token:
    the gated repository makes such a tritonserver exit before it opens a port."""
    import socket

    from pytriton.utils.distribution import get_root_module_path

    from inference.serving import free_port

    (tmp_path / "model-store").mkdir()
    binary = get_root_module_path() / "tritonserver" / "bin" / "tritonserver"
    port = free_port()
    guard = f"shared-memory,model-repository,trace,logging:triton-access-token={PLACEHOLDER}"
    argv = [str(binary), f"--model-repository={tmp_path / 'model-store'}{GATE}", "--model-control-mode=explicit"]
    argv += ["--http-address=127.0.0.1", f"--http-port={port}", "--allow-grpc=false", "--allow-metrics=false"]
    argv += [f"--http-restricted-api={guard}"]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    opened = False
    try:
        deadline = time.monotonic() + 120  # hang guard
        while proc.poll() is None and not opened and time.monotonic() < deadline:
            with socket.socket() as s:
                opened = opened or s.connect_ex(("127.0.0.1", port)) == 0
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
        out = proc.communicate(timeout=30)[0].decode(errors="replace")
    assert proc.returncode not in (None, 0) and not opened, out[-2000:]
    assert f"model-store{GATE}" in out
