"""A real standalone chitin node for the tests: the binary from
target/debug/chitin (or CHITIN_BIN), SQLite in a temporary directory, on
free loopback ports."""

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, api: str, metrics: str, log: Path):
        self.api, self.metrics, self.log = api, metrics, log


@pytest.fixture(scope="session")
def node(tmp_path_factory):
    binary = Path(os.environ.get("CHITIN_BIN", ROOT / "target" / "debug" / "chitin"))
    if not binary.exists():
        pytest.fail(f"no chitin binary at {binary}; build it (cargo build -p chitin) or set CHITIN_BIN")
    d = tmp_path_factory.mktemp("node")
    api, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    (d / "chitin.toml").write_text(
        f'[node]\ndata_dir = "{d / "data"}"\n\n[api]\nlisten = "{api}"\n\n[metrics]\nlisten = "{metrics}"\n'
    )
    log = d / "node.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(binary), "node", "--settings", str(d / "chitin.toml")], stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the node exited ({proc.returncode}):\n{log.read_text()}")
            try:
                if urllib.request.urlopen(f"http://{metrics}/readyz", timeout=1).status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the node was not ready within 60 s:\n{log.read_text()}")
            time.sleep(0.1)
        yield Node(api, metrics, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def dead() -> str:
    """An address nothing listens on."""
    return f"127.0.0.1:{free_port()}"
