"""`serve --http`: the live page, rendered by headless Chromium (Debian's /usr/bin/chromium)
from isohost-web, checked against what `isohost ps --json` says at the same moment.

The card is simulated (src/probe/simulated_gpu.hpp): workers write what they hold into a JSON
file the host reads as NVML, so VRAM bars have something to show on a machine without a GPU.

ISOHOST_DOCS_SCREENSHOT=1 also writes the screenshot to docs/live-view-page.png, after a
minute of history with some memory coming and going."""

import json
import os
import shutil
import subprocess
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

from conftest import BINARY, REPO, wait_for

CHROMIUM = "/usr/bin/chromium"
MIB = 1 << 20
# How far the page's PSS may be from the PSS `ps` measures a moment later: the page shows the
# last sample isohost-web took (at most a second old) of the host's cached memory figures (at
# most a second older). An idle worker's PSS moves only when other processes map or unmap the
# pages it shares (libc, libpython, and Chromium starting in between maps libc), which is a few
# hundred kB against a worker of some 10 MB: 1 MB or 5 %, whichever is larger, holds that with
# room, and still catches a wrong worker or a wrong unit (the next worker differs by 50 MB).
PSS_MARGIN_BYTES = 1_000_000
PSS_MARGIN_RATIO = 0.05


class Dom(HTMLParser):
    """The footprint table's worker rows, {pid: {"row_env", "row_state", field: (data-bytes,
    text)}}, and the attributes of every element with an id."""

    def __init__(self):
        super().__init__()
        self.workers = {}
        self.ids = {}
        self._row = None
        self._cell = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids[a["id"]] = a
        if tag == "tr" and "worker" in a.get("class", "").split():
            self._row = self.workers.setdefault(int(a["data-pid"]), {
                "row_env": a["data-env"], "row_state": a["data-state"]})
        elif tag == "td" and self._row is not None and "data-field" in a:
            self._cell = [a["data-field"], a.get("data-bytes"), ""]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            field, raw, text = self._cell
            self._row[field] = (int(raw) if raw else None, text.strip())
            self._cell = None
        elif tag == "tr":
            self._row = None


def chromium(profile, *args):
    """Runs headless Chromium with its own profile, without the network it would otherwise
    try (component updates, first-run pages)."""
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update",
         "--disable-dev-shm-usage", "--user-data-dir=%s" % profile, *args],
        capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def api_status(page_url):
    with urllib.request.urlopen(page_url + "api/status", timeout=10) as response:
        return json.load(response)


def ps_json(host):
    result = subprocess.run([str(BINARY), "ps", "--socket", host.socket, "--json"],
                            capture_output=True, text=True, timeout=60, check=True)
    return json.loads(result.stdout)


def test_the_page_shows_what_ps_shows(served_host, tmp_path):
    gpu = tmp_path / "gpu.json"
    gpu.write_text(json.dumps({"devices": [{"index": 0, "name": "simulated", "total_mib": 16384}],
                               "processes": []}))
    host = served_host(["--http", "127.0.0.1:0"],
                       extra_config='simulated_gpu = "%s"\nvram_reserve_mib = 0\n'
                                    '[env.b]\npython = "/usr/bin/python3"\npath = ["%s"]\n'
                                    % (gpu, Path(__file__).parents[1] / "python" / "fixtures_mod"))
    url = host.wait_log(r"page: (http://127\.0\.0\.1:\d+/)\s").group(1)
    host.call("isohost_sim_vram:hold", str(gpu), 900, 300)
    host.call("isohost_test_funcs:allocate_mb", 50, env="b")
    host.call("isohost_sim_vram:hold", str(gpu), 2000, 0, env="b")
    pids = {w["env"]: w["pid"] for w in host.ask("ps")["workers"]}

    def sampled_both():
        workers = (api_status(url)["latest"] or {}).get("status", {}).get("workers", [])
        return {w["env"] for w in workers if w.get("vram")} == {"a", "b"}

    wait_for(sampled_both, 30, "isohost-web to sample both workers with their VRAM")
    held_mib = {"a": 900 + 300, "b": 2000}
    if os.environ.get("ISOHOST_DOCS_SCREENSHOT") == "1":
        held_mib = _make_history(host, url, gpu)

    dom_text = chromium(tmp_path / "profile", "--virtual-time-budget=4000", "--dump-dom", url)
    ps = ps_json(host)
    dom = Dom()
    dom.feed(dom_text)
    assert sorted(dom.workers) == sorted(w["pid"] for w in ps["workers"]), dom_text[-2000:]
    for w in ps["workers"]:
        row = dom.workers[w["pid"]]
        assert row["row_env"] == w["env"] and row["row_state"] == w["state"]
        assert row["pid"] == (None, str(w["pid"]))
        assert row["state"] == (None, w["state"])
        page_pss, text = row["pss"]
        assert text == "%.1f MB" % (page_pss / 1e6)
        margin = max(PSS_MARGIN_BYTES, PSS_MARGIN_RATIO * w["pss"])
        assert abs(page_pss - w["pss"]) <= margin, (w["env"], page_pss, w["pss"])
        # VRAM on the simulated card is what the worker wrote: exact.
        assert row["vram"][0] == w["vram"], (row["vram"], w["vram"])
    for env, mib in held_mib.items():
        assert dom.workers[pids[env]]["vram"] == (mib * MIB, "%d MiB" % mib)
    assert dom.ids["host-pid"] is not None and str(ps["host"]["pid"]) in dom_text
    assert "hidden" in dom.ids["status-error"]
    # The machine's RAM (MemTotal does not move) and the card, as ps gives them.
    assert dom.ids["ram-machine-bar"]["data-total"] == str(ps["system_memory"]["total"])
    (device,) = ps["devices"]
    assert 'data-device="0"' in dom_text and 'data-total="%d"' % device["total"] in dom_text

    shot = tmp_path / "page.png"
    chromium(tmp_path / "profile", "--virtual-time-budget=4000", "--hide-scrollbars",
             "--window-size=1280,900", "--screenshot=%s" % shot, url)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("ISOHOST_DOCS_SCREENSHOT") == "1":
        shutil.copy(shot, REPO / "docs" / "live-view-page.png")


def test_the_page_is_read_only_and_self_contained(served_host):
    host = served_host(["--http", "127.0.0.1:0"])
    url = host.wait_log(r"page: (http://127\.0\.0\.1:\d+/)\s").group(1)
    for method in ["POST", "PUT", "DELETE"]:
        request = urllib.request.Request(url + "api/status", method=method, data=b"{}")
        try:
            urllib.request.urlopen(request, timeout=10)
            raise AssertionError("%s was answered" % method)
        except urllib.error.HTTPError as e:
            assert e.code == 405 and e.headers["Allow"] == "GET, HEAD"
    with urllib.request.urlopen(url, timeout=10) as response:
        page = response.read().decode()
        policy = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "script-src 'self'" in policy
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    for asset in ["app.js", "style.css"]:
        with urllib.request.urlopen(url + asset, timeout=10) as response:
            body = response.read().decode()
        assert "https://" not in body and "import " not in body


def _make_history(host, url, gpu):
    """For the docs screenshot: a minute of samples, with RAM and VRAM coming and going.
    Returns the MiB each environment's worker holds on the card at the end."""
    start = len(api_status(url)["history"])

    def points_since_start(n):
        return lambda: len(api_status(url)["history"]) >= start + n

    wait_for(points_since_start(15), 60, "15 samples")
    host.call("isohost_test_funcs:allocate_mb", 300, env="b")
    host.call("isohost_sim_vram:hold", str(gpu), 6000, 1500, env="b")
    wait_for(points_since_start(35), 60, "35 samples")
    host.ask("release", env="b")
    host.call("isohost_sim_vram:hold", str(gpu), 900, 2500)
    wait_for(points_since_start(55), 60, "55 samples")
    return {"a": 900 + 2500, "b": 6000}
