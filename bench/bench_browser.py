"""Browser latency of the Explorer in JupyterLab: from an edit to the updated
picture, measured in the page.

Run:  .venv/bin/python bench/bench_browser.py

JupyterLab serves a notebook holding an Explorer over a stack of Dense
layers (200 and 2,000 variables); Playwright drives Debian's Chromium. Each
edit switches rule 0's first dimension between "model" and none from its
dropdown (a change that applies at once, with no typing pause), and the page
times, with ``performance.now()``, how long the Tensor picture takes to
change. Prints the median and the 90th percentile over 15 edits (targets:
median <= 150 ms at 200 variables, <= 600 ms at 2,000). Everything binds to
127.0.0.1 and lives in a temp dir; every process is stopped.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from jupyter_servers import free_port, lab_args, lab_ready, private_env, server, write_notebook  # noqa: E402 (the browser tests' server helpers)

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking"]

CELL = """\
import shardviz
import keras
shardviz.simulate_devices(8)

def build(layers={layers}):
    x = keras.Input((16,), name="x")
    ends = []
    for start in range(0, layers, 200):
        h = x
        for i in range(start, min(layers, start + 200)):
            h = keras.layers.Dense(16, name=f"dense_{{i}}")(h)
        ends.append(h)
    y = ends[0] if len(ends) == 1 else keras.layers.Add(name="sum")(ends)
    return keras.Model(x, y, name="stack")

plan = shardviz.Plan({{"batch": 2, "model": 4}}, {{"dense_0/kernel": ("model", None)}})
app = shardviz.Explorer(build, plan=plan, auto_run=False)
app"""

WATCH = """() => new Promise(resolve => {
  const img = document.querySelector('img.shardviz-picture');
  const before = img.src;
  const start = performance.now();
  const observer = new MutationObserver(() => {
    if (img.src !== before) { observer.disconnect(); resolve(performance.now() - start); }
  });
  observer.observe(img, {attributes: true});
  window.__shardviz_start = start;
  const select = document.querySelector('.shardviz-rule-dim select');
  select.value = select.value === 'model' ? '—' : 'model';
  select.dispatchEvent(new Event('change', {bubbles: true}));
})"""


def measure(page, layers: int, work: str, port: int, edits: int = 15) -> list[float]:
    name = f"stack_{layers}.ipynb"
    write_notebook(os.path.join(work, name), CELL.format(layers=layers))
    page.goto(f"http://127.0.0.1:{port}/lab/tree/{name}", timeout=90_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_function("document.body.innerText.includes('Idle')", timeout=120_000)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    try:
        page.wait_for_function(
            "(document.querySelector('img.shardviz-picture')?.src || '').length > 0",
            timeout=150_000)
    except Exception:
        page.screenshot(path="/tmp/bench_browser_failed.png")
        raise
    times = []
    for _ in range(edits + 2):
        times.append(page.evaluate(WATCH))
        page.wait_for_timeout(300)
    return times[2:]  # the first edits warm caches


def main() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as work:
        port = free_port()
        with server(lab_args(port, work), work, private_env(work), os.path.join(work, "lab.log"),
                    port, ready=lab_ready), sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                for layers, target in ((100, 150), (1000, 600)):
                    times = measure(page, layers, work, port)
                    p90 = statistics.quantiles(times, n=10)[-1]
                    print(f"edit to updated picture in JupyterLab, {2 * layers:,} variables: "
                          f"median {statistics.median(times):.0f} ms, p90 {p90:.0f} ms over "
                          f"{len(times)} edits (target median <= {target} ms)")
            finally:
                browser.close()

if __name__ == "__main__":
    main()
