"""The ``cacheless`` console script the package installs is the ``cacheless`` binary's command
line: each behaviour here is held to the binary itself (built by the Rust half of the test
command), run the same way."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "cacheless"
BINARY = Path(os.environ.get("CACHELESS_BINARY", Path(__file__).resolve().parents[3] / "target" / "release" / "cacheless"))


@pytest.fixture(scope="module", autouse=True)
def both():
    assert SCRIPT.exists(), f"no console script at {SCRIPT}: the package installs one"
    assert BINARY.exists(), f"no cacheless binary at {BINARY} to compare with (set CACHELESS_BINARY)"


def run(exe, *args, env=None, cwd=None):
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, env=env, cwd=cwd, timeout=120)


def same(*args, env=None, cwd=None):
    """Runs both; their statuses, outputs and messages must be equal (the program's name, which
    clap's usage shows, aside)."""
    a, b = run(SCRIPT, *args, env=env, cwd=cwd), run(BINARY, *args, env=env, cwd=cwd)
    assert a.returncode == b.returncode, (args, a, b)
    assert a.stdout == b.stdout, (args, a.stdout, b.stdout)
    assert a.stderr == b.stderr, (args, a.stderr, b.stderr)
    return a


def test_version_help_and_usage_errors_are_the_binarys():
    assert same("--version").stdout.startswith(b"cacheless ")
    assert same("--help").returncode == 0
    assert same("no-such-command").returncode == 2
    assert same("cp", "--no-such-option", "a", "b").returncode == 1


def test_a_copy_and_its_errors_are_the_binarys(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 << 20) + b"tail")
    os.chmod(src, 0o640)
    r = same("cp", "/no/such/file", tmp_path / "x")
    assert r.returncode == 1 and b"No such file" in r.stderr
    for name, exe in (("a", SCRIPT), ("b", BINARY)):
        p = run(exe, "cp", "-p", src, tmp_path / name)
        assert p.returncode == 0, p
    a, b = tmp_path / "a", tmp_path / "b"
    assert a.read_bytes() == b.read_bytes() == src.read_bytes()
    sa, sb = a.stat(), b.stat()
    assert (sa.st_mode, sa.st_mtime_ns) == (sb.st_mode, sb.st_mtime_ns) == (src.stat().st_mode, src.stat().st_mtime_ns)
    # Output to standard output, flushed before the interpreter exits.
    assert same("hash", src).stdout.endswith(b"  " + bytes(src) + b"\n")


def test_run_through_a_link_named_cp_it_is_gnu_cp(tmp_path):
    (tmp_path / "f").write_bytes(b"data")
    results = []
    for name, exe in (("s", SCRIPT), ("b", BINARY)):
        link = tmp_path / name / "cp"
        link.parent.mkdir()
        link.symlink_to(exe)
        bad = run(link, "--no-such-option", "f", "g", cwd=tmp_path)
        # GNU cp names itself as it was run.
        results.append((bad.returncode, bad.stderr.replace(bytes(link), b"CP")))
        assert run(link, "f", f"copy-{name}", cwd=tmp_path).returncode == 0
        assert (tmp_path / f"copy-{name}").read_bytes() == b"data"
    assert results[0] == results[1], results
    assert results[0][0] == 1 and results[0][1].startswith(b"CP: unrecognized option"), results


def test_a_misspelt_switch_is_refused_in_the_binarys_words():
    env = dict(os.environ, CACHELESS_DISABLE="no-such-feature")
    r = same("info", env=env)
    assert r.returncode == 2 and b"no-such-feature" in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_blocked_command_ends_on_a_signal_as_the_binary_does(tmp_path, sig):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    codes = []
    for exe in (SCRIPT, BINARY):
        # The child gets the signal's default action, as a shell's foreground job does.
        p = subprocess.Popen(
            [str(exe), "cat", str(fifo)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        time.sleep(0.5)
        assert p.poll() is None, "it waits for a writer"
        p.send_signal(sig)
        p.communicate(timeout=10)
        codes.append(p.returncode)
    assert codes[0] == codes[1], codes
    assert codes[0] in (-sig, 128 + sig), codes
