"""End to end in JupyterLab, where the Explorer's users live: Lab serves a
notebook, Playwright drives Debian's Chromium, a person's edits are typed
into the widgets (no Enter), and the page must follow.

Everything binds to 127.0.0.1 and writes under the test's temp dir; every
process started here is stopped, on failure too. Screenshots are kept in
that temp dir.
"""


import pytest
from jupyter_servers import free_port, lab_args, lab_ready, private_env, server, write_notebook
from test_browser_e2e import CHROMIUM, CHROMIUM_FLAGS, need_browser

NOTEBOOK = """\
import shardviz
shardviz.simulate_devices(8)
from shardviz import examples
app = shardviz.Explorer(examples.mlp, inputs=(8, 16), plan=examples.megatron_plan())
app"""


@pytest.fixture
def lab(tmp_path):
    need_browser()
    work = tmp_path / "work"
    work.mkdir()
    write_notebook(work / "explorer.ipynb", NOTEBOOK)
    port = free_port()
    with server(lab_args(port, str(work)), work, private_env(tmp_path), tmp_path / "lab.log",
                port, ready=lab_ready):
        yield f"http://127.0.0.1:{port}/lab/tree/explorer.ipynb"


def test_typing_in_the_explorer_in_jupyterlab(lab, tmp_path):
    from playwright.sync_api import sync_playwright

    shots = []

    def shot(page, name):
        path = tmp_path / f"{len(shots):02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        shots.append(path)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(lab, timeout=90_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            # Wait for the kernel, then Run > Run All Cells, as a person would.
            page.wait_for_function(
                "document.body.innerText.includes('Idle')", timeout=120_000)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            page.wait_for_selector(".shardviz-explorer", timeout=240_000)
            page.wait_for_function(
                "document.querySelector('.shardviz-run-status')?.innerText.includes('done in')",
                timeout=180_000)
            shot(page, "ran")
            picture = page.locator("img.shardviz-picture")
            src_before = picture.get_attribute("src")

            # Type a rule key, no Enter: it applies once typing pauses.
            key = page.locator(".shardviz-rule-key input").first
            key.click()
            key.press("Control+a")
            key.type("d1/kernel", delay=40)
            page.wait_for_function(
                "document.querySelector('.shardviz-rule-feedback').innerText"
                ".includes('matches nothing')", timeout=30_000)
            page.wait_for_function(
                f"document.querySelector('img.shardviz-picture').src !== {src_before!r}",
                timeout=60_000)
            shot(page, "rule-typed")

            # The tables follow.
            page.locator(".shardviz-explorer .lm-TabBar-tabLabel").filter(
                has_text="Variables").first.click()
            page.wait_for_function(
                "document.querySelector('.shardviz-variables') && !document.querySelector("
                "'.shardviz-variables').innerText.includes('.*up/kernel')", timeout=30_000)

            # An axis size that needs 16 devices: the pass fails, and says why.
            size = page.locator(".shardviz-axis-size input").nth(1)
            size.click()
            size.press("Control+a")
            size.type("8", delay=40)
            page.wait_for_function(
                "document.querySelector('.shardviz-run-status').innerText.includes('16 devices')",
                timeout=60_000)
            shot(page, "failed")

            # Fixing the plan clears the failure, and the pass runs again by itself.
            size.click()
            size.press("Control+a")
            size.type("4", delay=40)
            page.wait_for_function(
                "!document.querySelector('.shardviz-run-status').innerText.includes('16 devices')"
                " && document.querySelector('.shardviz-header').innerText.includes('fresh')",
                timeout=120_000)
            shot(page, "fixed")

            # Why is the all-reduce there? Choose it in the Communication tab.
            page.locator(".shardviz-explorer .lm-TabBar-tabLabel").filter(
                has_text="Communication").first.click()
            page.locator(".shardviz-why-select select").select_option(index=1)
            page.wait_for_function(
                "document.querySelector('.shardviz-why')?.innerText.includes('price of splitting')",
                timeout=120_000)
            assert page.locator(".shardviz-apply-fix button, button.shardviz-apply-fix")\
                .first.is_disabled()
            shot(page, "why")

            # Plans suggested for the 8 devices, one chosen: its changes are listed.
            page.locator(".shardviz-explorer .lm-TabBar-tabLabel").filter(
                has_text="Suggest").first.click()
            page.locator("button", has_text="Suggest plans").first.click()
            page.wait_for_function(
                "document.body.innerText.includes('plans for 8 devices, best first')",
                timeout=180_000)
            page.wait_for_function(
                "document.body.innerText.includes('Changes to the current plan')",
                timeout=60_000)
            shot(page, "suggest")
        finally:
            browser.close()
    assert len(shots) == 6 and all(path.stat().st_size > 10_000 for path in shots)
