"""The compile check of untrusted code: hipcc runs inside bubblewrap, so no spelling of an include
reads a host file or tells whether one exists (issue 15). Each case runs the real hipcc."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from hipbot.agents.hipify import sandbox
from hipbot.agents.hipify.compile_check import CheckResult, check

SECRET_WORD = "hipbot_secret_word_4711"

# Each spelling hipcc's preprocessor reads as an include; a filter on the directive's text misses them.
SPELLINGS = {
    "plain": '#include "{path}"',
    "digraph": '%:include "{path}"',
    "comment": '#/**/include "{path}"',
    "line splice": '#inc\\\nlude "{path}"',
    "trigraph": '??=include "{path}"',
    "macro": "#define P(x) #x\n#define Q(x) P(x)\n#include Q({path})",
    "relative": '#include "../../../..{path}"',
}


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host file outside the snippet's folder whose content would show in hipcc's errors."""
    path = tmp_path / "secret.h"
    path.write_text(f"{SECRET_WORD} x;\n")
    return path


def _everything_shown(result: CheckResult) -> str:
    return json.dumps(result.to_dict()) + result.summary()


@pytest.mark.hipcc
@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_no_include_spelling_reads_a_host_file(spelling: str, secret: Path) -> None:
    snippet = "void f() {\n" + SPELLINGS[spelling].format(path=secret) + "\n}\n"
    result = check(snippet, "gfx90a", timeout=60)
    shown = _everything_shown(result)
    assert SECRET_WORD not in shown
    assert not result.ok
    assert [d.message for d in result.errors] == [
        f"'{result.errors[0].message.split(chr(39))[1]}' file not found"
    ]
    # the answer is the one a missing file gets: whether the file exists is not revealed
    missing = check(snippet.replace(str(secret), str(secret.with_name("absent.h"))), "gfx90a", timeout=60)
    assert (
        shown.replace("secret.h", "absent.h").split('"seconds"')[0]
        == _everything_shown(missing).split('"seconds"')[0]
    )


@pytest.mark.hipcc
def test_has_include_says_no_for_every_host_file(secret: Path) -> None:
    paths = [str(secret), "/etc/hostname", "/etc/passwd", str(Path(__file__).resolve())]
    assert all(Path(p).exists() for p in paths)
    snippet = "".join(
        f'#if __has_include("{p}")\n#error seen {i}\n#else\n#error unseen {i}\n#endif\n'
        for i, p in enumerate(paths)
    )
    result = check(snippet, "gfx90a", timeout=60)
    assert [d.message for d in result.errors] == [f"unseen {i}" for i in range(len(paths))]


@pytest.mark.hipcc
def test_errors_inside_headers_are_reported_at_the_include_without_their_text() -> None:
    # an include inside a function body breaks the toolchain's headers: their lines are not quoted
    result = check("void f() {\n#include <hip/hip_runtime.h>\n}\n", "gfx90a", timeout=60)
    assert not result.ok and result.error is None
    assert {(d.line, d.file) for d in result.diagnostics} == {(2, "input.hip")}
    assert result.errors[0].message == "error inside a header included here (not shown)"
    assert "namespace" not in _everything_shown(result)


@pytest.mark.hipcc  # needs bubblewrap, which the hipcc tests need too
def test_the_sandbox_sees_only_the_toolchain_and_the_named_folders(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "mine.txt").write_text("mine\n")
    (tmp_path / "beside.txt").write_text("beside\n")
    root = set(sandbox.run_sandboxed(["ls", "/"], work).output.split())
    assert {"usr", "tmp", "dev", "lib", "bin"} <= root
    assert not root & {"etc", "root", "home", "work", "proc", "sys", "opt", "var"}
    run = sandbox.run_sandboxed(["ls", str(tmp_path), str(work)], work)
    assert run.returncode == 0  # tmp_path is there as work's parent, holding only work
    assert "mine.txt" in run.output and "beside.txt" not in run.output
    for cmd in (
        ["cat", "/etc/hostname"],
        ["cat", str(tmp_path / "beside.txt")],
        ["touch", str(work / "new")],
    ):
        run = sandbox.run_sandboxed(cmd, work)
        assert run.returncode != 0, cmd
    assert not (work / "new").exists()
    out = tmp_path / "out"
    out.mkdir()
    run = sandbox.run_sandboxed(["touch", str(out / "unit.o")], work, writable=[out])
    assert run.returncode == 0 and (out / "unit.o").exists()


@pytest.mark.hipcc
def test_the_sandbox_has_no_network_and_its_limits_hold(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:  # a host service, reachable from here
        server.settimeout(0)
        connect = (
            f"import socket; socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=2)"
        )
        assert subprocess.run(["python3", "-c", connect], timeout=30).returncode == 0
        server.accept()[0].close()
        run = sandbox.run_sandboxed(["python3", "-c", connect], tmp_path)
        # its own loopback, where nothing listens (bwrap --unshare-net)
        assert run.returncode != 0 and "ConnectionRefusedError" in run.output, run.output
        with pytest.raises(BlockingIOError):  # nothing reached the host's loopback
            server.accept()
    grab = "b = bytearray(600 << 20); print('allocated')"
    run = sandbox.run_sandboxed(
        ["python3", "-c", grab], tmp_path, limits=sandbox.Limits(memory_bytes=256 << 20)
    )
    assert run.returncode != 0 and "MemoryError" in run.output
    run = sandbox.run_sandboxed(["sleep", "30"], tmp_path, limits=sandbox.Limits(seconds=1))
    assert run.timed_out and run.returncode is None and run.seconds < 10
    spin = sandbox.run_sandboxed(
        ["python3", "-c", "while True: pass"], tmp_path, limits=sandbox.Limits(cpu_seconds=1)
    )
    assert not spin.timed_out and spin.returncode != 0 and spin.seconds < 30


def test_without_bubblewrap_the_compile_check_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIPBOT_BWRAP", "/nonexistent/bwrap")
    result = check('#include "/etc/hostname"\n', "gfx90a")
    assert not result.ok and not result.available and not result.diagnostics
    assert "bubblewrap" in result.error and "apt-get install bubblewrap" in result.error
    with pytest.raises(sandbox.SandboxUnavailable, match="bwrap is not installed"):
        sandbox.run_hipcc(["--version"], ".")
