"""Shared fixtures: scratch folders on a real disk, feature requirements, page-cache helpers."""

import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import cacheless

REPO = Path(__file__).resolve().parents[3]


def disk_folder():
    """A new scratch folder on a disk filesystem (under target/, as the Rust tests use), not
    tmpfs; the caller removes it."""
    base = Path(os.environ.get("CACHELESS_TEST_DIR", REPO / "target" / "pytest-tmp"))
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=base))


@pytest.fixture
def disk():
    """A scratch folder on a disk filesystem, removed after the test."""
    d = disk_folder()
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def sigint():
    """Python's own Ctrl-C handler for the test, restored after: a shell starts a background job
    with SIGINT ignored, and Python then installs no handler, so no KeyboardInterrupt would come."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def ctrl_c_once():
    """A progress callback that presses Ctrl-C at its first call only: one SIGINT per test, so that
    no second one, sent by a later call before the first ended the job, lands outside the test's
    `pytest.raises`."""
    sent = []

    def press(done, total):
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)

    return press


def required(feature):
    return feature in [f.strip() for f in os.environ.get("CACHELESS_REQUIRE", "").split(",")]


def require(feature, available, reason):
    """Skips the test (with the reason shown by pytest -rs) when a feature it needs is missing,
    or fails it when CACHELESS_REQUIRE names the feature. Every skip of the suite goes through here."""
    if available:
        return
    if required(feature):
        pytest.fail(f"{feature} is required by CACHELESS_REQUIRE but unavailable: {reason}")
    pytest.skip(f"{feature} unavailable: {reason}", allow_module_level=True)


def require_module(name, reason):
    """The module `name`, imported; else a skip (or a failure when CACHELESS_REQUIRE names it)."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        require(name, False, f"{reason} ({e})")


def require_direct(folder):
    fs = cacheless.info(folder)["fs"]
    direct = fs["direct"]
    require("direct", "Ok" in direct, str(direct.get("Err", direct)))


def fraction_cached(path):
    r = cacheless.residency(path)
    return r["cached_pages"] / max(r["total_pages"], 1)


def fincore_fraction(path):
    """The same figure from util-linux fincore (mincore-based), when it is installed."""
    if shutil.which("fincore") is None:
        return None
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES,SIZE", str(path)], capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]) / max(int(out[1]), 1)


def run_python(code, env=None, timeout=120):
    """Runs code in a fresh interpreter (fresh capability probes), returning the completed process."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=timeout)


def s3_servers():
    """The S3 stores the test command started: (name, endpoint, environment for its keys)."""
    out = []
    if "CACHELESS_TEST_S3" in os.environ:
        env = {
            "AWS_ACCESS_KEY_ID": os.environ["CACHELESS_TEST_S3_KEY"],
            "AWS_SECRET_ACCESS_KEY": os.environ["CACHELESS_TEST_S3_SECRET"],
            "AWS_REGION": "us-east-1",
        }
        out.append(("s3", os.environ["CACHELESS_TEST_S3"], env))
    if "CACHELESS_TEST_MOTO" in os.environ:
        out.append(("moto", os.environ["CACHELESS_TEST_MOTO"], {"AWS_ACCESS_KEY_ID": "any", "AWS_SECRET_ACCESS_KEY": "any", "AWS_REGION": "us-east-1"}))
    return out


def s3_store(kind, monkeypatch):
    """The endpoint of the S3 store `kind` ("s3" or "moto"), its environment set (or the test
    skipped, or failed where CACHELESS_REQUIRE names it)."""
    found = {name: (endpoint, env) for name, endpoint, env in s3_servers()}
    require(kind, kind in found, f"CACHELESS_TEST_{kind.upper()} is not set (scripts/test starts the servers)")
    endpoint, env = found[kind]
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    return endpoint


class LastCall(Exception):
    """What `raises_on_last_call`'s callback raises."""


def raises_on_last_call():
    """A progress callback that records its calls and raises LastCall on its last one (done ==
    total), and the list of its calls."""
    calls = []

    def progress(done, total):
        calls.append((done, total))
        if total and done == total:
            raise LastCall()

    return progress, calls
