"""Jupyter servers for the browser tests and the browser bench: bound to
127.0.0.1, configured and run under a temp dir, and always stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import nbformat


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(path, source: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def private_env(root) -> dict:
    """The environment, with every Jupyter, IPython, matplotlib and Keras
    directory under ``root``."""
    env = dict(os.environ)
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "IPYTHONDIR",
                 "MPLCONFIGDIR", "KERAS_HOME"):
        path = os.path.join(root, name.lower())
        os.makedirs(path, exist_ok=True)
        env[name] = path
    env.pop("XLA_FLAGS", None)
    return env


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def lab_args(port: int, root: str) -> list[str]:
    """A JupyterLab on 127.0.0.1 with no token, serving ``root``."""
    args = [os.path.join(os.path.dirname(sys.executable), "jupyter"), "lab", "--no-browser",
            f"--port={port}", "--ServerApp.ip=127.0.0.1", "--ServerApp.token=",
            "--ServerApp.password=", f"--ServerApp.root_dir={root}", "--LabApp.news_url="]
    if os.geteuid() == 0:
        args.append("--allow-root")
    return args


@contextlib.contextmanager
def server(args: list[str], cwd, env: dict, log_path, port: int,
           ready: Callable[[int], bool] = _listening, timeout: float = 90) -> Iterator[None]:
    """Run a server until the block ends (SIGTERM, then SIGKILL, on failure
    too); wait for ``ready(port)`` first."""
    log = open(log_path, "w")
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.time() + timeout
        while not ready(port):
            if proc.poll() is not None or time.time() > deadline:
                log.flush()
                raise RuntimeError(f"{os.path.basename(args[0])} did not start:\n"
                                   + open(log_path).read())
            time.sleep(0.3)
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def lab_ready(port: int) -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2)
        return True
    except OSError:
        return False
