"""Re-make docs/explorer.png, the README's picture of the Explorer.

Run:  .venv/bin/python docs/make_screenshot.py   (needs Debian's chromium)

It serves a one-cell notebook with Voila on 127.0.0.1, drives it with
Playwright (run the forward pass, open the Communication tab) and saves a
screenshot of the app. Everything else it writes goes to a temp dir.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import nbformat
from playwright.sync_api import sync_playwright

HERE = os.path.dirname(os.path.abspath(__file__))
CELL = """\
import shardviz
shardviz.simulate_devices(8)
from shardviz import examples
shardviz.Explorer(examples.transformer_block, inputs=(8, 16, 64),
                  plan=examples.transformer_plan(), auto_run=False)"""


def main():
    with tempfile.TemporaryDirectory() as tmp:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
        nbformat.write(nb, os.path.join(tmp, "explorer.ipynb"))
        env = dict(os.environ)
        for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "IPYTHONDIR",
                     "MPLCONFIGDIR", "KERAS_HOME"):
            env[name] = os.path.join(tmp, name.lower())
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        voila = os.path.join(os.path.dirname(sys.executable), "voila")
        proc = subprocess.Popen([voila, "explorer.ipynb", "--no-browser", f"--port={port}",
                                 "--Voila.ip=127.0.0.1"], cwd=tmp, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.3)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run"])
                page = browser.new_page(viewport={"width": 1280, "height": 1800})
                page.goto(f"http://127.0.0.1:{port}/", timeout=90_000)
                page.wait_for_selector(".shardviz-explorer", timeout=180_000)
                page.locator("button.shardviz-run").click()
                page.wait_for_function("document.querySelector('.shardviz-run-status')"
                                       ".innerText.includes('done in')", timeout=120_000)
                page.locator(".shardviz-picker select").select_option("attn/query/kernel")
                time.sleep(1)
                page.wait_for_function("(() => { const i = document.querySelector("
                                       "'img.shardviz-picture'); return i && i.complete"
                                       " && i.naturalHeight > 0; })()", timeout=30_000)
                time.sleep(1)
                box = page.locator(".shardviz-explorer").bounding_box()
                page.screenshot(path=os.path.join(HERE, "explorer.png"), full_page=True, clip=box)
                browser.close()
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
    print("wrote", os.path.join(HERE, "explorer.png"))


if __name__ == "__main__":
    main()
