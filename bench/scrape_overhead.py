#!/usr/bin/env python3
"""What watching costs a caller (issue 15: "no slower than 5%"): the warm call round trip
through a real `isohost serve` host's control socket, with nothing watching and with a
Prometheus-style scrape of `serve --metrics` every second, in alternating blocks so that drift
of the machine falls on both alike. Prints each figure beside the one without scrapes, and the
ratio against the 1.05 limit.

    bench/scrape_overhead.py [--binary build/isohost] [--seconds 60] [--json]
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIMIT = 1.05
BLOCK_SECONDS = 5


class Control:
    """One persistent control connection: a request line out, an answer line back."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.buffer = b""

    def ask(self, body):
        self.sock.sendall((json.dumps(body) + "\n").encode())
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the host closed the control connection")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        answer = json.loads(line)
        if not answer.get("ok"):
            raise RuntimeError("the host answered %s" % answer)
        return answer["value"]


def wait_for_log(path, pattern, proc, limit=60):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        found = re.search(pattern, path.read_text())
        if found:
            return found
        if proc.poll() is not None:
            sys.exit("the host exited (%s):\n%s" % (proc.returncode, path.read_text()[-2000:]))
        time.sleep(0.02)
    sys.exit("no line matching %r in %s within %s s" % (pattern, path, limit))


class Scraper(threading.Thread):
    """GET /metrics once a second, as a Prometheus with scrape_interval 1s does."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.seconds = []

    def run(self):
        while not self.stop.is_set():
            start = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=10) as r:
                r.read()
            self.seconds.append(time.perf_counter() - start)
            self.stop.wait(max(0.0, 1.0 - (time.perf_counter() - start)))


def figure(name, samples_us, base=None):
    samples = sorted(samples_us)
    median = statistics.median(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    out = {"name": name, "unit": "us", "median": median, "p99": p99, "samples": len(samples)}
    if base is not None:
        out.update(limit=base["median"], limit_name=base["name"], ratio=median / base["median"])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(REPO / "build" / "isohost"))
    parser.add_argument("--python", default="/usr/bin/python3", help="the worker's interpreter")
    parser.add_argument("--seconds", type=float, default=60, help="total, both kinds of block")
    parser.add_argument("--json", action="store_true")
    o = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="isohost-scrape-") as directory:
        directory = Path(directory)
        config = directory / "isohost.toml"
        config.write_text('[env.a]\npython = "%s"\n' % o.python)
        log_path = directory / "host.log"
        socket_path = str(directory / "control.sock")
        with open(log_path, "w") as log:
            host = subprocess.Popen([o.binary, "serve", "--config", str(config), "--socket", socket_path,
                                     "--metrics", "127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT)
        try:
            url = wait_for_log(log_path, r"metrics: (http://\S+)", host).group(1)
            wait_for_log(log_path, r"serving on ", host)
            control = Control(socket_path)
            call = {"op": "call", "env": "a", "target": "operator:add", "args": [1, 2]}
            for _ in range(200):  # start the worker and warm both sides
                control.ask(call)
            quiet, watched, scrapes = [], [], []
            blocks = max(2, int(o.seconds / BLOCK_SECONDS))
            for block in range(blocks):
                scraper = Scraper(url) if block % 2 else None
                if scraper:
                    scraper.start()
                samples = watched if scraper else quiet
                end = time.perf_counter() + BLOCK_SECONDS
                while time.perf_counter() < end:
                    start = time.perf_counter_ns()
                    control.ask(call)
                    samples.append((time.perf_counter_ns() - start) / 1000)
                if scraper:
                    scraper.stop.set()
                    scraper.join()
                    scrapes += scraper.seconds
            base = figure("rtt.control_call", quiet)
            figures = [base, figure("rtt.control_call_scraped_1s", watched, base),
                       figure("scrape.metrics", [s * 1e6 for s in scrapes])]
        finally:
            if host.poll() is None:
                host.terminate()
                host.wait(timeout=30)

    if o.json:
        print(json.dumps(figures, indent=2))
        return
    print("%-30s %12s %12s %-4s %12s  %-28s %6s" % ("figure", "median", "p99", "unit", "limit", "limit is", "ratio"))
    for f in figures:
        print("%-30s %12.3f %12.3f %-4s %12s  %-28s %6s" % (
            f["name"], f["median"], f["p99"], f["unit"],
            "%.3f" % f["limit"] if "limit" in f else "-", f.get("limit_name", ""),
            "%.3f" % f["ratio"] if "ratio" in f else "-"))
    ratio = figures[1]["ratio"]
    print("scraped/quiet median ratio %.3f against the limit %.2f: %s" % (
        ratio, LIMIT, "within" if ratio <= LIMIT else "OVER"))


if __name__ == "__main__":
    main()
