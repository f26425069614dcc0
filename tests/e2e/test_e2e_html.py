"""The HTML report, looked at in a real browser: headless Chromium renders it (a non-blank
screenshot of the asked size) and its DOM holds the heatmaps with exactly the red cell of the
injected fault."""

from __future__ import annotations

import re

from browser import chromium, png_facts
from suite import run_suite


def test_html_report_renders_with_the_red_cell(healthy_sim, tmp_path):
    healthy_sim.remove_authorized_key("node3", from_node="node1")
    r = run_suite(healthy_sim, "-m", "ssh or network", "-k", "trust or reachable")
    assert r.failed == {"test_ssh_trust[node1->node3]"}, r.describe()
    page = r.junit.parent / "cluster_report.html"  # the default: beside the JUnit and JSON files
    assert f"HTML report: {page}" in r.output
    shot = tmp_path / "report.png"
    res = chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1400,2000")
    assert shot.exists(), res.stderr[-2000:]
    width, height, variety = png_facts(shot)
    assert (width, height) == (1400, 2000)
    assert variety > 50 and shot.stat().st_size > 20_000  # text, colours: not a blank page
    dom = chromium(page, tmp_path, "--dump-dom").stdout
    assert '<svg id="heatmap-ssh"' in dom and '<svg id="heatmap-latency"' in dom
    ssh = dom.split('<svg id="heatmap-ssh"', 1)[1].split("</svg>", 1)[0]
    cells = re.findall(r'<rect class="cell (\w+)" data-from="(\w+)" '
                       r'data-to="(\w+)"[^>]*fill="([^"]+)"', ssh)
    assert len(cells) == 9
    assert ([(a, b, fill) for cls, a, b, fill in cells if cls != "passed"]
            == [("node1", "node3", "#d73027")])
    latency = dom.split('<svg id="heatmap-latency"', 1)[1].split("</svg>", 1)[0]
    assert latency.count('class="cell value') == 9  # every pair reached, with an RTT
    assert ("node1 -&gt; node3: public key refused" in dom
            or "node1 -> node3: public key refused" in dom)
    assert "ssh node1 cat ~/.ssh/id_ed25519.pub | ssh node3" in dom


def test_html_report_path_option(healthy_sim, tmp_path):
    page = tmp_path / "sub" / "mine.html"
    r = run_suite(healthy_sim, "-m", "ssh", "-k", "login and not time", "--html-report", str(page))
    assert r.failed == set() and r.passed, r.describe()
    assert f"HTML report: {page}" in r.output
    assert "green" in page.read_text() and not (r.junit.parent / "cluster_report.html").exists()
