"""`serve --metrics`: the Prometheus endpoint of isohost-web, scraped by a real Prometheus
(Debian's /usr/bin/prometheus) on 127.0.0.1, and its rules: read-only, loopback unless named,
gone with its host, a clear error when it cannot listen."""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import (BINARY, FIXTURES, PYTHON, _is_zombie, children_of, free_port, request,
                      wait_for)

PROMETHEUS = "/usr/bin/prometheus"
WEB_BINARY = BINARY.parent / "isohost-web"


def metrics_url(host):
    return host.wait_log(r"metrics: (http://\S+/metrics)").group(1)


def get(url, method="GET"):
    """(status, headers, body) of one request."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request(method, parts.path or "/")
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


def samples(text, name):
    """{frozenset(labels.items()): value} of the samples of `name` in Prometheus text format."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^%s(\{(.*)\})? (\S+)$" % re.escape(name), line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out[frozenset(labels.items())] = float(m.group(3))
    return out


def sidecar_of(host):
    """The pid of the host's isohost-web child."""
    for pid in children_of(host.proc.pid):
        try:
            if Path("/proc/%d/comm" % pid).read_text().strip() == "isohost-web":
                return pid
        except OSError:
            pass
    raise AssertionError("the host has no isohost-web child")


def write_config(directory):
    config = Path(directory) / "isohost.toml"
    config.write_text("[env.a]\npython = \"%s\"\npath = [\"%s\"]\n" % (PYTHON, FIXTURES))
    return config


class Prometheus:
    """/usr/bin/prometheus scraping `target` (HOST:PORT) every second, on a free loopback port,
    its data and log in `directory`."""

    def __init__(self, directory, target):
        directory = Path(directory)
        self.port = free_port()
        config = directory / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: isohost\n    metrics_path: /metrics\n"
            "    static_configs:\n      - targets: ['%s']\n" % target)
        self.log_path = directory / "prometheus.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [PROMETHEUS, "--config.file=%s" % config,
             "--storage.tsdb.path=%s" % (directory / "prometheus-data"),
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def query(self, promql):
        """The result vector of an instant query; [] while Prometheus is not up yet."""
        if self.proc.poll() is not None:
            raise AssertionError("prometheus exited with %s:\n%s" % (
                self.proc.returncode, self.log_path.read_text()[-3000:]))
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (
            self.port, urllib.parse.urlencode({"query": promql}))
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                answer = json.load(response)
        except OSError:
            return []
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def prometheus(tmp_path):
    started = []

    def start(target):
        p = Prometheus(tmp_path, target)
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()


def test_prometheus_scrapes_pss_and_call_count(served_host, prometheus):
    host = served_host(["--metrics", "127.0.0.1:0"])
    url = metrics_url(host)
    for i in range(7):
        assert host.call("isohost_test_funcs:echo", i) == i
    # The metrics answer's memory comes from a sample at most a second old; a worker started
    # after it has none until the next.
    metrics = wait_for(lambda: (lambda m: "pss" in m["status"]["workers"][0] and m)(
        host.ask("metrics")), 10, "a metrics sample with the worker's PSS")
    worker = metrics["status"]["workers"][0]
    assert metrics["envs"]["a"]["calls"] == 7
    assert worker["pss"] > 0

    prom = prometheus(urllib.parse.urlsplit(url).netloc)
    calls = wait_for(lambda: prom.query('isohost_calls_total{env="a"}'), 90,
                     "Prometheus to answer isohost_calls_total")
    assert float(calls[0]["value"][1]) == 7
    pss = wait_for(lambda: prom.query('isohost_worker_pss_bytes{env="a"}'), 30,
                   "Prometheus to answer isohost_worker_pss_bytes")
    assert len(pss) == 1
    labels = pss[0]["metric"]
    assert labels["pid"] == str(worker["pid"])
    assert labels["generation"] == str(worker["generation"])
    scraped = float(pss[0]["value"][1])
    now = host.ask("ps")["workers"][0]["pss"]
    # The same order: an idle worker's PSS moves only as other processes map or unmap the pages
    # it shares (libc, libpython), by a few hundred kB against some 10 MB.
    assert now / 2 < scraped < now * 2, (scraped, now)
    # A histogram and the state made it through too.
    assert prom.query('isohost_call_duration_seconds_count{env="a"} == 7')
    assert prom.query('isohost_worker_state{env="a",state="ready"} == 1')


def test_metrics_text_format(served_host):
    host = served_host(["--metrics", "127.0.0.1:0"])
    host.call("isohost_test_funcs:echo", 1)
    # An answered call that failed.
    failed = request(host.socket, {"op": "call", "env": "a", "target": "isohost_test_funcs:raises",
                                   "args": ["no"]})
    assert failed["error"]["kind"] == "WorkerException"
    url = metrics_url(host)
    # The worker's memory is in the host's next memory sample, at most a second away.
    status, headers, text = wait_for(
        lambda: (lambda r: "isohost_worker_pss_bytes{" in r[2] and r)(get(url)), 10,
        "a scrape with the worker's PSS")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    pid = str(host.ask("ps")["workers"][0]["pid"])
    for name, kind in [("isohost_worker_pss_bytes", "gauge"), ("isohost_worker_rss_bytes", "gauge"),
                       ("isohost_worker_private_bytes", "gauge"), ("isohost_calls_total", "counter"),
                       ("isohost_call_errors_total", "counter"),
                       ("isohost_worker_starts_total", "counter"),
                       ("isohost_call_duration_seconds", "histogram"),
                       ("isohost_worker_start_duration_seconds", "histogram"),
                       ("isohost_host_pss_bytes", "gauge"), ("isohost_worker_state", "gauge")]:
        assert "# TYPE %s %s" % (name, kind) in text, name
    (labels, value), = samples(text, "isohost_worker_pss_bytes").items()
    assert dict(labels) == {"env": "a", "generation": "1", "pid": pid}
    assert value > 0
    assert samples(text, "isohost_calls_total") == {frozenset({("env", "a")}): 2.0}
    assert samples(text, "isohost_call_errors_total") == {frozenset({("env", "a")}): 1.0}
    assert samples(text, "isohost_worker_starts_total") == {frozenset({("env", "a")}): 1.0}
    buckets = samples(text, "isohost_call_duration_seconds_bucket")
    assert buckets[frozenset({("env", "a"), ("le", "+Inf")})] == 2.0
    states = samples(text, "isohost_worker_state")
    assert states[frozenset({("env", "a"), ("state", "ready")})] == 1.0
    assert sum(states.values()) == 1.0


def test_only_get_and_head(served_host):
    host = served_host(["--metrics", "127.0.0.1:0"])
    url = metrics_url(host)
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]:
        status, headers, body = get(url, method)
        assert status == 405, method
        assert headers["Allow"] == "GET, HEAD"
        assert "nothing on this port changes the pool" in body
    status, _, body = get(url, "HEAD")
    assert status == 200 and body == ""
    assert get(url)[0] == 200
    assert host.ask("ps")["workers"] == []  # no request started or changed anything


def test_a_named_address_that_is_not_loopback_is_warned_about(served_host):
    host = served_host(["--metrics", "0.0.0.0:0"])
    url = metrics_url(host)
    warning = host.wait_log(r".*--metrics 0\.0\.0\.0:0 is not a loopback address.*").group(0)
    assert "anyone who can reach it can read the pool's state" in warning
    assert url.startswith("http://0.0.0.0:")
    assert get(url)[0] == 200


def test_a_port_alone_is_loopback_without_a_warning(served_host):
    host = served_host(["--metrics", "0"])
    assert metrics_url(host).startswith("http://127.0.0.1:")
    assert "not a loopback address" not in host.log_path.read_text()


def test_sigkill_of_the_host_leaves_no_isohost_web(served_host):
    host = served_host(["--metrics", "127.0.0.1:0", "--http", "127.0.0.1:0"])
    metrics_url(host)
    sidecar = sidecar_of(host)
    host.proc.send_signal(signal.SIGKILL)
    host.proc.wait()
    wait_for(lambda: not os.path.exists("/proc/%d" % sidecar) or _is_zombie(sidecar), 10,
             "isohost-web (pid %d) to end with its host" % sidecar)


def test_the_pool_serves_on_when_isohost_web_dies(served_host):
    host = served_host(["--metrics", "127.0.0.1:0"])
    metrics_url(host)
    sidecar = sidecar_of(host)
    os.kill(sidecar, signal.SIGKILL)
    host.wait_log(r"isohost-web \(pid %d\), the live view's server, killed by SIGKILL: "
                  r"/metrics and the page are gone; the pool serves on" % sidecar)
    assert not os.path.exists("/proc/%d" % sidecar)  # reaped by the host
    assert host.call("isohost_test_funcs:echo", 5) == 5


def test_clean_shutdown_ends_isohost_web(served_host):
    host = served_host(["--metrics", "127.0.0.1:0"])
    metrics_url(host)
    sidecar = sidecar_of(host)
    host.close()
    assert not os.path.exists("/proc/%d" % sidecar)  # reaped by the host, not left a zombie
    assert re.search(r"isohost-web \(pid %d\) stopped: killed by SIGTERM" % sidecar,
                     host.log_path.read_text())


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_a_terminal_or_termination_signal_to_the_host_ends_isohost_web(served_host,
                                                                       signal_number):
    # serve shuts down on each as on `isohost shutdown`: its sidecar goes with it, reaped.
    host = served_host(["--metrics", "127.0.0.1:0"])
    metrics_url(host)
    sidecar = sidecar_of(host)
    host.proc.send_signal(signal_number)
    assert host.proc.wait(timeout=30) == 0
    assert not os.path.exists("/proc/%d" % sidecar)  # reaped by the host, not left a zombie
    assert re.search(r"isohost-web \(pid %d\) stopped: killed by SIGTERM" % sidecar,
                     host.log_path.read_text())


def test_a_busy_port_stops_serve_with_the_reason(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        sock = tmp_path / "control.sock"
        result = subprocess.run(
            [str(BINARY), "serve", "--config", str(write_config(tmp_path)), "--socket", str(sock),
             "--metrics", "127.0.0.1:%d" % port],
            capture_output=True, text=True, timeout=60, env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "cannot listen on 127.0.0.1:%d: Address already in use" % port in last, result.stderr
    assert "the live view did not start; shutting the pool down" in result.stderr
    assert not sock.exists()  # the pool shut down cleanly and removed its socket


def test_a_missing_isohost_web_stops_serve_naming_it(tmp_path):
    alone = tmp_path / "bin"
    alone.mkdir()
    shutil.copy(BINARY, alone / "isohost")
    result = subprocess.run(
        [str(alone / "isohost"), "serve", "--config", str(write_config(tmp_path)),
         "--socket", str(tmp_path / "control.sock"), "--http", "0"],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "cannot start isohost-web" in last and str(alone / "isohost-web") in last, result.stderr
    assert "No such file or directory" in last


def test_a_bad_address_is_a_usage_error(tmp_path):
    result = subprocess.run(
        [str(BINARY), "serve", "--config", str(write_config(tmp_path)),
         "--socket", str(tmp_path / "control.sock"), "--metrics", "127.0.0.1:99999"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--metrics '127.0.0.1:99999': the port must be a number from 0 to 65535" in result.stderr


def test_isohost_web_alone_ends_when_the_host_is_gone(served_host, tmp_path):
    host = served_host()
    web = subprocess.Popen([str(WEB_BINARY), "--socket", host.socket, "--metrics", "0"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        listening = web.stdout.readline()
        assert re.match(r"listening metrics http://127\.0\.0\.1:\d+/metrics\n", listening)
        assert web.stdout.readline() == "ready\n"
        url = listening.split()[2]
        assert get(url)[0] == 200
        host.close()
        # A scrape while the host is gone is a 503 with the reason, not a crash.
        status, _, body = get(url)
        assert status == 503 and "cannot reach a host" in body, (status, body)
        assert web.wait(timeout=30) == 0
        assert "no host listens on %s any more" % host.socket in web.stderr.read()
    finally:
        if web.poll() is None:
            web.kill()
            web.wait()


def test_isohost_web_start_errors_exit_2(tmp_path):
    for args, message in [
            (["--socket", str(tmp_path / "none.sock"), "--metrics", "0"], "cannot reach a host"),
            (["--socket", str(tmp_path / "none.sock")], "nothing to serve"),
            (["--socket", str(tmp_path / "none.sock"), "--http", "[::1"], "write an IPv6 address")]:
        result = subprocess.run([str(WEB_BINARY), *args], capture_output=True, text=True,
                                timeout=30)
        assert result.returncode == 2, (args, result)
        assert message in result.stderr, (args, result.stderr)
        assert result.stdout == ""
