"""End to end in a real browser: Voila serves a notebook holding the Explorer,
Playwright drives Debian's Chromium, and the page must change as it should.

Everything binds to 127.0.0.1 and writes under the test's temp dir; every
process started here is stopped. Screenshots are kept in that temp dir and
named in the test's properties.
"""

import os
import shutil
import sys

import pytest
from jupyter_servers import free_port, private_env, server, write_notebook

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]

NOTEBOOK = """\
import shardviz
shardviz.simulate_devices(8)
from shardviz import examples
app = shardviz.Explorer(examples.mlp, inputs=(8, 16), plan=examples.megatron_plan(), auto_run=False)
app"""


def need_browser():
    if os.path.exists(CHROMIUM):
        return
    message = "Debian's chromium is not installed (make test installs it)"
    if os.environ.get("SHARDVIZ_REQUIRE_BROWSER"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def voila(tmp_path):
    need_browser()
    work = tmp_path / "work"
    work.mkdir()
    write_notebook(work / "explorer.ipynb", NOTEBOOK)
    port = free_port()
    voila_bin = os.path.join(os.path.dirname(sys.executable), "voila")
    args = [voila_bin, "explorer.ipynb", "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1",
            "--Voila.root_dir=."]
    # Wait only until it listens: a GET / would run the notebook.
    with server(args, work, private_env(tmp_path), tmp_path / "voila.log", port):
        yield f"http://127.0.0.1:{port}/"


def test_edit_a_rule_and_run_the_forward_pass_in_a_real_browser(voila, tmp_path, record_property):
    from playwright.sync_api import sync_playwright

    shots = []

    def shot(page, name):
        path = tmp_path / f"{len(shots):02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        shots.append(str(path))

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.goto(voila, timeout=90_000)
            page.wait_for_selector(".shardviz-explorer", timeout=180_000)
            picture = page.locator("img.shardviz-picture")
            picture.wait_for(timeout=30_000)
            shot(page, "loaded")
            src_before = picture.get_attribute("src")

            page.get_by_text("Variables", exact=True).click()
            table = page.locator(".shardviz-variables")
            table.wait_for(timeout=30_000)
            table_before = table.inner_text()
            assert ".*up/kernel" in table_before
            page.get_by_text("Tensor", exact=True).click()

            key = page.locator(".shardviz-rule-key input").first
            key.fill("d1/kernel")
            key.press("Enter")
            page.wait_for_function(
                "document.querySelector('.shardviz-rule-feedback').innerText"
                ".includes('matches nothing')", timeout=30_000)
            shot(page, "rule-edited")

            page.locator("button.shardviz-run").click()
            page.wait_for_function(
                "document.querySelector('.shardviz-run-status').innerText.includes('done in')",
                timeout=120_000)
            page.wait_for_function(
                f"document.querySelector('img.shardviz-picture').src !== {src_before!r}",
                timeout=30_000)
            shot(page, "forward-pass-run")
            assert picture.get_attribute("src") != src_before

            page.get_by_text("Variables", exact=True).click()
            page.wait_for_function(
                "!document.querySelector('.shardviz-variables').innerText.includes('.*up/kernel')",
                timeout=30_000)
            table_after = table.inner_text()
            assert table_after != table_before
            up_kernel = next(line for line in table_after.splitlines() if line.startswith("up/kernel"))
            assert "replicated" in up_kernel
            header = page.locator(".shardviz-header").inner_text()
            assert "forward pass fresh" in header
            page.get_by_text("Communication", exact=True).click()
            page.locator(".shardviz-collectives").wait_for(timeout=30_000)
            assert "all-reduce" in page.locator(".shardviz-collectives").inner_text()
            page.wait_for_function(
                "(() => { const img = document.querySelector('img.shardviz-flow');"
                " return img && img.complete && img.naturalWidth > 0; })()", timeout=30_000)
            shot(page, "communication")
        finally:
            browser.close()
    record_property("screenshots", shots)
    print("screenshots:", *shots, sep="\n  ")
