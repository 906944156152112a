"""The worker cluster ``boltzlab serve`` starts is closed to every other process.

Whoever can talk to a Dask scheduler, nanny or worker can run code in the workers
(``Client.run``) as the server's user.  ``serve``'s local cluster speaks mutual TLS with
credentials made at start and held in memory, and its HTTP servers answer only ``/health``.
These tests find every port a running ``serve`` and its worker processes listen on and show
that a client without those credentials can neither connect nor run code there, while the
same probe does run code in an open cluster (so the probe itself can fail).
"""

from __future__ import annotations

import asyncio
import http.client
import os
import threading
import urllib.error
import urllib.request

import distributed
import psutil
import pytest
from distributed import Security

from boltzlab.dashboard.cluster import (
    LOCAL_CONNECT_SECONDS,
    InsecureScheduler,
    scheduler_security,
    start_local_cluster,
)
from tests.load.loadtest import serving_pid
from tests.serving import server_output, start_server, stop_server

#: Pages Dask's HTTP servers serve by default: worker logs, call stacks, task state, metrics.
DASK_PAGES = ("/info/main/workers.html", "/info/main/logs.html", "/json/identity.json", "/metrics",
              "/proxy/8786/127.0.0.1/status")


def runs_code(address: str, security: Security | None = None, timeout: float = 20.0) -> bool:
    """A Dask client connects to ``address`` and runs a function in the cluster's workers
    within ``timeout`` seconds.  (A client's own timeout does not cover its handshake: on an
    HTTP port it would wait for an answer forever, so the whole attempt is bounded here.)"""
    async def attempt() -> bool:
        async with distributed.Client(address, asynchronous=True, timeout=timeout, security=security,
                                      set_as_default=False) as client:
            return bool(await client.run(os.getpid))

    answers: list[bool] = []

    def probe() -> None:
        try:
            answers.append(asyncio.run(asyncio.wait_for(attempt(), timeout)))
        except Exception:  # noqa: BLE001 - refused, handshake failed, timed out: all a "no"
            answers.append(False)

    # a thread of its own: the browser tests' Playwright keeps an event loop in this one
    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout + 30)
    return bool(answers and answers[0])


def http_status(url: str) -> int | None:
    """The HTTP status ``url`` answers with; ``None`` if it does not speak HTTP to us."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, http.client.HTTPException):  # reset (a TLS port), refused, not HTTP
        return None


def listening_ports(pid: int) -> dict[int, int]:
    """``{port: pid}`` of every TCP port ``pid`` and its descendants listen on."""
    root = psutil.Process(pid)
    ports = {}
    for proc in [root, *root.children(recursive=True)]:
        for conn in proc.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                ports[conn.laddr.port] = proc.pid
    return ports


def test_the_probe_runs_code_in_an_open_cluster():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        assert runs_code(cluster.scheduler_address)


def test_the_local_cluster_needs_its_own_credentials():
    cluster, backend = start_local_cluster(1)
    try:
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
        assert runs_code(cluster.scheduler_address, cluster.security)  # the server's own client does
        assert not runs_code(cluster.scheduler_address)
        assert not runs_code(cluster.scheduler_address.replace("tls://", "tcp://"))
        assert not runs_code(cluster.scheduler_address, Security.temporary())  # someone else's certificate
    finally:
        backend.close()
        cluster.close()


def test_the_local_cluster_waits_for_a_busy_peer():
    """Every process of the local cluster (the scheduler in this one), and the server's client, wait LOCAL_CONNECT_SECONDS for
    a connection, not Dask's 30 s: on a saturated machine a worker's TLS handshake waits its turn
    (issue 22: a new session's trainers failed to ship)."""
    import dask

    cluster, backend = start_local_cluster(1, warm=False)
    try:
        assert LOCAL_CONNECT_SECONDS > 30
        assert backend.timeout == LOCAL_CONNECT_SECONDS
        assert backend.client.rpc.timeout == LOCAL_CONNECT_SECONDS  # the client's connections to workers
        seen = backend.client.run(lambda: dask.config.get("distributed.comm.timeouts.connect"))
        assert list(seen.values()) == [f"{LOCAL_CONNECT_SECONDS:g}s"]
        # the scheduler, in this process, reads it when it connects to a worker (a scatter's
        # "Timed out trying to connect ... after 30 s" came from there)
        assert cluster.scheduler.rpc.timeout is None
        assert dask.config.get("distributed.comm.timeouts.connect") == f"{LOCAL_CONNECT_SECONDS:g}s"
    finally:
        backend.close()
        cluster.close()


def _http_port(dask_worker) -> int:
    return dask_worker.http_server.port


def test_the_local_clusters_http_servers_answer_only_health():
    """The fast check of the HTTP routes (issue 46 item 5 (j)): the scheduler's and every
    worker's HTTP server of :func:`start_local_cluster` answer ``/health`` and 404 on Dask's
    pages (the slow test above finds the same from outside a running ``serve``)."""
    cluster, backend = start_local_cluster(1, warm=False)
    try:
        ports = [cluster.scheduler.http_server.port, *backend.client.run(_http_port).values()]
        assert len(ports) == 2 and len(set(ports)) == 2, ports
        for port in ports:
            assert http_status(f"http://127.0.0.1:{port}/health") == 200, port
            for page in DASK_PAGES:
                assert http_status(f"http://127.0.0.1:{port}{page}") == 404, (port, page)
    finally:
        backend.close()
        cluster.close()


@pytest.mark.slow
def test_no_port_of_serve_lets_another_process_run_code():
    proc, base = start_server("--workers", "2", env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    try:
        web = int(base.rsplit(":", 1)[1])
        ports = listening_ports(proc.pid)
        assert web in ports
        # the supervisor holds the web port, its server (the scheduler in it) serves on it
        workers = {pid for pid in ports.values() if pid not in (proc.pid, serving_pid(proc.pid))}
        assert len(workers) == 2, (ports, server_output(proc))  # both worker processes were found
        # the scheduler, 2 nannies, 2 workers: each a Dask port, plus their HTTP servers
        others = sorted(set(ports) - {web})
        assert len(others) >= 5, ports
        attacker = Security.temporary()
        http = [port for port in others if http_status(f"http://127.0.0.1:{port}/health") is not None]
        assert len(http) == 3, (ports, http)  # the scheduler's and the workers' HTTP servers ...
        for port in http:  # ... answer /health and nothing else
            assert http_status(f"http://127.0.0.1:{port}/health") == 200
            for page in DASK_PAGES:
                assert http_status(f"http://127.0.0.1:{port}{page}") == 404, (port, page)
        for port in set(others) - set(http):  # the Dask ports: TLS with the server's certificate only
            for address, security in ((f"tcp://127.0.0.1:{port}", None), (f"tls://127.0.0.1:{port}", None),
                                      (f"tls://127.0.0.1:{port}", attacker)):
                assert not runs_code(address, security), (address, server_output(proc))
        assert http_status(base + "/liveness") == 200  # and the server still serves
    finally:
        stop_server(proc)


def test_a_plain_tcp_scheduler_is_refused_unless_insecure(tmp_path, caplog):
    with pytest.raises(InsecureScheduler, match="--dask-insecure"):
        scheduler_security("tcp://10.0.0.5:8786")
    with pytest.raises(InsecureScheduler, match="plain tcp://"):
        scheduler_security("10.0.0.5:8786")  # no protocol: Dask's default, tcp
    with caplog.at_level("WARNING", logger="boltzlab.dashboard.distributed"):
        assert not scheduler_security("tcp://10.0.0.5:8786", insecure=True).require_encryption
    assert "without TLS" in caplog.text
    # TLS from files; a missing one, or none at all, is said before anything connects
    pem = Security.temporary()
    files = {}
    for name, text in (("ca", pem.tls_ca_file), ("cert", pem.tls_client_cert), ("key", pem.tls_client_key)):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_text(text)
    security = scheduler_security("tls://10.0.0.5:8786", ca_file=str(files["ca"]), cert=str(files["cert"]),
                                  key=str(files["key"]))
    assert security.require_encryption and security.tls_client_cert == str(files["cert"])
    with pytest.raises(Exception, match="--dask-tls-key: .* is not a file"):
        scheduler_security("tls://10.0.0.5:8786", ca_file=str(files["ca"]), cert=str(files["cert"]),
                           key=str(tmp_path / "nope.pem"))
    with pytest.raises(Exception, match="needs a CA file and a client certificate"):
        scheduler_security("tls://10.0.0.5:8786")
    with pytest.raises(Exception, match="use tls://"):
        scheduler_security("tcp://10.0.0.5:8786", ca_file=str(files["ca"]), insecure=True)
