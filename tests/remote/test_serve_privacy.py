"""What the server runs and keeps is closed to other local users: a work directory another user can
change is refused (they could swap the preloaded library, tritonserver or config.json), so is a
library path that LD_PRELOAD would split, and Triton's Python-backend shared memory (the requests'
tensors) is never open to them, not even while the server starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from inference.serving import ServeError, serve
from inference.serving._private_args import LIBRARY, PrivateArgsError, build_preload, private_workdir

from .test_serve_access import identity_works
from .triton_support import pytriton_reason

NOBODY = 65534
needs_triton = pytest.mark.skipif(pytriton_reason() is not None, reason=str(pytriton_reason()))


def _planted_library(path, marker) -> None:
    """A library at ``path`` that, when loaded, writes ``marker`` (what another user could plant)."""
    from inference.serving._private_args import c_compiler

    src = path.with_name("planted.c")
    src.write_text(
        "extern int creat(const char *path, unsigned mode);\n"
        f'__attribute__((constructor)) static void planted(void) {{ creat("{marker}", 0600); }}\n'
    )
    subprocess.run([*c_compiler(), "-shared", "-fPIC", "-o", str(path), str(src)], check=True, timeout=120)


@pytest.mark.parametrize("odd", [" ", ":"])
def test_a_library_path_that_ld_preload_would_split_is_refused(tmp_path, odd):
    """LD_PRELOAD splits at ':' and spaces: under a work directory 'x y', the loader preloaded
    '.../x' (which another user may have planted, in a shared /tmp) and ran it as this user."""
    pytest.importorskip("pytriton.triton")
    marker = tmp_path / "planted-ran"
    _planted_library(tmp_path / "x", marker)
    d = tmp_path / f"x{odd}y" / "private"
    d.mkdir(mode=0o700, parents=True)
    with pytest.raises(PrivateArgsError) as info:
        build_preload(d)
    assert not marker.exists()  # the planted library never ran
    assert "LD_PRELOAD splits" in str(info.value)
    assert not (d / LIBRARY).exists()  # refused before anything was built or run


@pytest.mark.parametrize("case", ["everyone-writes", "group-reads", "other-owner", "open-parent", "link-to-open"])
def test_a_work_directory_another_user_can_change_is_refused(tmp_path, case):
    """Another user who can rename an entry of the work directory swapped the preloaded library
    (and tritonserver, and config.json) for their own: it ran as the serving user with the token
    in its environment. serve refuses such a directory before it writes anything there."""
    wd = tmp_path / "wd"
    if case == "open-parent":
        (tmp_path / "open").mkdir()
        os.chmod(tmp_path / "open", 0o777)  # no sticky bit: anyone renames what is in it
        wd = tmp_path / "open" / "wd"
        wd.mkdir(mode=0o700)
    elif case == "link-to-open":
        (tmp_path / "target").mkdir()
        os.chmod(tmp_path / "target", 0o777)
        wd.symlink_to(tmp_path / "target")
    else:
        wd.mkdir(mode={"everyone-writes": 0o777, "group-reads": 0o750, "other-owner": 0o700}[case])
        os.chmod(wd, {"everyone-writes": 0o777, "group-reads": 0o750, "other-owner": 0o700}[case])
    if case == "other-owner":
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another user (nobody) needs root; CI runs as root")
        os.chown(wd, NOBODY, -1)
    with pytest.raises(ServeError, match="another user"):
        serve(str(tmp_path / "never-read.pt"), inputs=["x:float32:3"], workdir=wd)
    assert not [p for p in wd.iterdir()]  # nothing written there


def test_a_new_work_directory_is_made_private(tmp_path):
    wd = private_workdir(tmp_path / "new" / "wd")
    assert wd.is_absolute() and os.stat(wd).st_mode & 0o777 == 0o700


def test_the_preloaded_process_makes_nothing_readable_by_others(tmp_path):
    """Boost fchmods each Python-backend segment tritonserver makes to 0644 whatever the umask: the
    library's fchmod keeps the owner's bits only, so no segment is ever open to other users."""
    pytest.importorskip("pytriton.triton")
    d = tmp_path / "private"
    d.mkdir(mode=0o700)
    lib = build_preload(d)
    f = tmp_path / "segment"
    f.touch()
    env = dict(os.environ, LD_PRELOAD=str(lib), ALPYKA_TRITON_ACCESS_TOKEN="real-secret-token-1")
    script = f"import os; fd = os.open({str(f)!r}, os.O_RDONLY); os.fchmod(fd, 0o644); print(os.fchmod(fd, 0o755))"
    r = subprocess.run([sys.executable, "-I", "-S", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "None", r.stderr
    assert os.stat(f).st_mode & 0o777 == 0o700


_SHM_WATCH = textwrap.dedent(
    r"""
    import json, os, select, sys, time
    try:
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
    except OSError as exc:
        print(json.dumps({"cannot_switch": str(exc)}))
        sys.exit(0)
    seen, opened = set(), []
    deadline = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < deadline and not select.select([sys.stdin], [], [], 0)[0]:  # until stdin closes
        for name in os.listdir("/dev/shm"):
            if name.startswith("pytrtion") and name not in seen:
                seen.add(name)
                try:
                    os.close(os.open("/dev/shm/" + name, os.O_RDONLY))
                    opened.append(name)
                except OSError:
                    pass
        time.sleep(0.001)
    print(json.dumps({"seen": sorted(seen), "opened": opened}))
    """
)


@needs_triton
@pytest.mark.skipif(os.name != "posix" or not os.path.isdir("/dev/shm"), reason="needs Linux /dev/shm")
def test_another_user_opens_no_segment_while_the_server_starts(tmp_path):
    """Making the segments 0600 once the models are loaded came too late: user nobody, watching
    /dev/shm while the server started, opened them at 0644 and kept reading the requests'
    tensors through its descriptors."""
    if os.geteuid() != 0:
        pytest.skip("switching to another uid (nobody) needs root; CI runs as root")
    torch = pytest.importorskip("torch")

    class Identity(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    torch.jit.script(Identity()).save(str(tmp_path / "m.pt"))
    watch = subprocess.Popen(
        [sys.executable, "-c", _SHM_WATCH, "300"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/"
    )
    try:
        time.sleep(0.5)  # it watches before the server starts
        model = {"path": str(tmp_path / "m.pt"), "inputs": ["x:float32:3"], "outputs": ["y:float32:3"]}
        handle = serve({"identity": model}, max_batch_size=8)
        try:
            identity_works(handle.grpc_url, "grpc").close()
        finally:
            out = watch.communicate(timeout=120)[0]  # closes its stdin: it stops; hang guard
            handle.stop()
    finally:
        if watch.poll() is None:
            watch.kill()
    report = json.loads(out.strip().splitlines()[-1])
    if "cannot_switch" in report:
        pytest.skip(f"this root cannot switch to uid {NOBODY}: {report['cannot_switch']}")
    mine = f"pytrtion{handle.pid}-"  # (other servers on this host are not this test's)
    report = {k: [n for n in v if n.startswith(mine)] for k, v in report.items()}
    assert report["seen"], "the server made no Python-backend segment: nothing was watched"
    assert report["opened"] == [], report
