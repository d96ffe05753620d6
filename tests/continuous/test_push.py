"""samprof.continuous against a receiver built from Pyroscope's source
(support.pyroscope): both wire protocols, every kind of profile, parts
that follow each other with nothing lost, labels, heap deltas, auth and
tenants, and the directory output that samprof top reads."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Dict, List

import pytest
from support import SANITIZED
from support.measure import measure, within
from support.processes import run_samprof
from support.profiles import go_pprof_files
from support.pyroscope import Receiver, Upload, value_of
from support.workloads import burn_python_for

import samprof
from samprof import continuous

# Python-level code: the oldest and the newest Python (tests/support/scope.py).
pytestmark = pytest.mark.bounds


def cpu_work(seconds: float) -> float:
    with samprof.labels(route="/cpu"):
        return burn_python_for(seconds)


def allocate(n: int) -> List[bytearray]:
    return [bytearray(4000) for _ in range(n)]


def check_contiguous(uploads: List[Upload]) -> None:
    """Each part begins where the previous one ended, as its pprof header
    says too: no gap, no overlap."""
    spans = sorted((u.from_ns, u.until_ns) for u in uploads)
    for (_, until), (start, _) in zip(spans, spans[1:]):
        assert until == start, spans
    for u in uploads:
        assert u.profile.time_nanos == u.from_ns
        assert u.profile.time_nanos + u.profile.duration_nanos == u.until_ns


@pytest.mark.accuracy
@pytest.mark.skipif(SANITIZED, reason="timing accuracy is not meaningful under ASan")
def test_ingest_sends_cpu_wall_and_heap_parts_that_add_up(tmp_path):
    """Spread over 20 first attempts (`make spread`, Python 3.11, 2-core
    VM): labelled CPU in the parts over thread CPU |error| at most 0.015
    (of 0.1); this thread's wall time over the parts' span at most 0.021
    (of 0.05); alloc_space over bytes allocated at most 0.073 and
    inuse_space over bytes kept at most 0.058 (of 0.2: heap sampling at
    16 KiB)."""

    def attempt(scale):
        with Receiver() as receiver:
            agent = continuous.start(
                receiver.url,
                "shop.web",
                tags={"region": "eu"},
                profiles=("cpu", "wall", "heap"),
                interval=0.25,
                hz=1000,
                heap_rate=16 * 1024,
            )
            cpu = allocated = 0.0
            kept = []
            end = time.monotonic() + 1.0 * scale
            while time.monotonic() < end:
                cpu += cpu_work(0.05)
                kept.append(allocate(250))  # 1 MB, kept
                allocated += 250 * 4000
            agent.stop()
            stats = agent.stats()
            uploads = list(receiver.uploads)
            assert not receiver.refused, receiver.refused
        by_name: Dict[str, List[Upload]] = {}
        for u in uploads:
            by_name.setdefault(u.name, []).append(u)
        assert sorted(by_name) == ["memory", "process_cpu", "wall"]
        periods = {len(v) for v in by_name.values()}
        assert len(periods) == 1, periods  # every kind, every interval
        (n,) = periods
        assert 4 * scale - 1 <= n <= 4 * scale + 2, n
        assert stats["parts"] == stats["parts_sent"] == 3 * n
        for kind in by_name.values():
            check_contiguous(kind)
        for u in uploads:
            assert u.labels["service_name"] == "shop.web"
            assert u.labels["region"] == "eu"
            assert u.labels["pid"] == str(os.getpid())
            assert u.labels["__delta__"] == "false"
            assert u.labels["pyroscope_spy"] == "samprof"
            keys = {k for labels in u.sample_labels() for k in labels}
            assert not keys & {"thread_id", "thread_name"}, keys
        # CPU: the labelled samples hold the CPU the labelled work used.
        labelled = value_of(by_name["process_cpu"], "cpu", route="/cpu") / 1e9
        within(labelled / cpu, 1.0, 0.1, "labelled CPU in the parts / thread CPU")
        # Wall: this thread was sampled all along the parts' span.
        wall = value_of(by_name["wall"], "wall", "attempt")
        span = sum(u.until_ns - u.from_ns for u in by_name["wall"])
        within(wall / span, 1.0, 0.05, "this thread's wall time / the parts' span")
        # Heap: the allocations of each interval once; what is kept in use.
        alloc = value_of(by_name["memory"], "alloc_space", "allocate")
        within(alloc / allocated, 1.0, 0.2, "alloc_space over the parts / bytes allocated")
        last = max(by_name["memory"], key=lambda u: u.from_ns)
        inuse = value_of([last], "inuse_space", "allocate")
        within(inuse / allocated, 1.0, 0.2, "inuse_space in the last part / bytes kept")
        del kept
        # go tool pprof reads every part, and merges each kind's.
        for name, parts in by_name.items():
            paths = []
            for i, u in enumerate(parts):
                path = tmp_path / f"{name}-{scale}-{i}.pb"
                path.write_bytes(u.raw)
                paths.append(path)
            assert "Showing nodes" in go_pprof_files(paths, "-top")

    measure(attempt)


def test_push_protocol_with_basic_auth_and_a_tenant():
    with Receiver(multitenancy=True, basic_auth=("scott", "tiger")) as receiver:
        agent = continuous.start(
            receiver.url,
            "shop.api",
            profiles="cpu,heap",
            interval=0.2,
            protocol="push",
            basic_auth=("scott", "tiger"),
            tenant="team-a",
            headers={"X-Extra": "yes"},
        )
        cpu_work(0.5)
        agent.stop()
        stats = agent.stats()
    assert not receiver.refused, receiver.refused
    names = sorted({u.name for u in receiver.uploads})
    assert names == ["memory", "process_cpu"]
    assert stats["parts"] == stats["parts_sent"] == len(receiver.uploads)
    # One request per interval, holding both profiles.
    assert stats["uploads"] * 2 == stats["parts"]
    for u in receiver.uploads:
        assert u.protocol == "push"
        assert u.headers["x-scope-orgid"] == "team-a"
        assert u.headers["x-extra"] == "yes"
        assert u.headers["content-encoding"] == "gzip"
        assert u.labels["service_name"] == "shop.api"
        assert u.labels["__delta__"] == "false"
    for name in names:
        check_contiguous(receiver.of(name))
    assert value_of(receiver.of("process_cpu"), "cpu", "cpu_work", route="/cpu") > 0


def test_https_with_a_ca_file(tmp_path):
    """TLS through the standard library: a server whose certificate only
    the given CA file vouches for."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    with Receiver(tls=(str(cert), str(key))) as receiver:
        agent = continuous.start(
            receiver.url, "tls", profiles="cpu", interval=0.2, ca_file=str(cert)
        )
        cpu_work(0.3)
        agent.stop()
        assert agent.stats()["parts_sent"] == len(receiver.uploads) >= 2
        # Without the CA file the certificate is refused, and nothing sent.
        agent = continuous.start(receiver.url, "tls", profiles="cpu", interval=0.1)
        cpu_work(0.2)
        agent.stop(timeout=0.5)
        stats = agent.stats()
    assert stats["parts_sent"] == 0 and "CERTIFICATE_VERIFY_FAILED" in stats["last_error"]


def test_a_refused_upload_is_dropped_and_counted():
    with Receiver(multitenancy=True) as receiver:  # and no tenant sent
        agent = continuous.start(receiver.url, "shop", profiles="cpu", interval=0.1, token="t0k")
        cpu_work(0.35)
        agent.stop()
        stats = agent.stats()
    assert not receiver.uploads
    assert {e.status for e in receiver.refused} == {401}
    assert stats["parts_refused"] == stats["parts"] >= 3
    assert stats["retries"] == 0
    assert "HTTP 401" in stats["last_error"] and "no org id" in stats["last_error"]


def test_the_receiver_refuses_what_pyroscope_refuses():
    """The fake is only as good as what it turns away."""
    import urllib.error
    import urllib.request

    data = samprof.CPUProfiler(hz=100).profile(0.05)
    with Receiver() as receiver:

        def post(path: str, body: bytes, **headers: str) -> int:
            req = urllib.request.Request(receiver.url + path, body, headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code

        ok = "/ingest?name=app%7Bk%3Dv%7D&format=pprof"
        assert post(ok, data) == 200
        assert post("/ingest?name=&format=pprof", data) == 400
        assert post("/ingest?name=bad%20app&format=pprof", data) == 400
        assert post("/ingest?name=app%7Bb%21d%3Dv%7D&format=pprof", data) == 400
        assert post("/ingest?name=app&format=pprof", b"not a profile") == 422
        old = (time.time_ns() - 2 * 3600 * 10**9) // 10**9
        stale = samprof.pprof.read(data)
        stale.time_nanos = old * 10**9
        assert post("/ingest?name=app&format=pprof", samprof.pprof.write(stale)) == 422
        push = "/push.v1.PusherService/Push"
        assert post(push, b"", **{"Content-Type": "application/proto"}) == 400
        assert (
            post(
                push,
                continuous.push_request([([("__name__", "x")], [b""])]),
                **{"Content-Type": "application/proto"},
            )
            == 500
        )
        assert (
            post(
                push,
                continuous.push_request([([("service_name", "x")], [data])]),
                **{"Content-Type": "application/proto"},
            )
            == 400
        )
        assert post(push, b"", **{"Content-Type": "text/plain"}) == 415
        assert len(receiver.uploads) == 1


def test_directory_output_is_read_by_samprof_top(tmp_path):
    out = tmp_path / "profiles"
    agent = continuous.start(
        directory=str(out), app_name="batch", profiles="cpu,heap", interval=0.15
    )
    cpu_work(0.6)
    agent.stop()
    files = sorted(os.listdir(out))
    assert len(files) == agent.stats()["files"] >= 8
    prefix = f"batch.{os.getpid()}."
    assert all(f.startswith(prefix) and f.endswith((".cpu.pb.gz", ".heap.pb.gz")) for f in files)
    r = run_samprof(["top", str(out), "-n", "50", "-i", "cpu"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert b"cpu_work" in r.stdout
    # Without -i, the two kinds cannot be merged: the error says what to do.
    r = run_samprof(["top", str(out)], tmp_path)
    assert r.returncode == 1
    assert b"several kinds: samples/cpu" in r.stderr and b"-i TYPE" in r.stderr, r.stderr
    r = run_samprof(["flame", str(out), "-i", "inuse_space", "-o", "heap.html"], tmp_path)
    assert r.returncode == 0, r.stderr


def test_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("SAMPROF_PUSH_URL", "https://pyro.example:4443/base/")
    monkeypatch.setenv("SAMPROF_PUSH_APP", "env.app")
    monkeypatch.setenv("SAMPROF_PUSH_TAGS", "region=eu, zone=b")
    monkeypatch.setenv("SAMPROF_PUSH_PROFILES", "wall,heap")
    monkeypatch.setenv("SAMPROF_PUSH_INTERVAL", "15")
    monkeypatch.setenv("SAMPROF_PUSH_PROTOCOL", "push")
    monkeypatch.setenv("SAMPROF_PUSH_BASIC_AUTH", "user:pa:ss")
    monkeypatch.setenv("SAMPROF_PUSH_TENANT", "t1")
    c = continuous.Config()
    assert c.url == "https://pyro.example:4443/base"
    assert (c.app_name, c.tags, c.profiles) == (
        "env.app",
        {"region": "eu", "zone": "b"},
        ("wall", "heap"),
    )
    assert (c.interval, c.protocol, c.basic_auth, c.tenant) == (
        15.0,
        "push",
        ("user", "pa:ss"),
        "t1",
    )
    # Arguments win over the environment.
    assert continuous.Config(app_name="arg", interval=2).app_name == "arg"


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({}, "nowhere to send"),
        ({"url": "pyroscope:4040"}, "http:// or https://"),
        ({"url": "http://h", "app_name": "my app"}, "app_name"),
        ({"url": "http://h", "tags": {"a-b": "v"}}, "tag name"),
        ({"url": "http://h", "tags": {"a": "x,y"}}, "a value must"),
        ({"url": "http://h", "tags": {"__name__": "x"}}, "tag name"),
        ({"url": "http://h", "profiles": ("cpu", "mutex")}, "unknown profile"),
        ({"url": "http://h", "profiles": ()}, "one or more"),
        ({"url": "http://h", "interval": 0.01}, "interval"),
        ({"url": "http://h", "protocol": "otlp"}, "protocol"),
        ({"url": "http://h", "token": "t", "basic_auth": ("u", "p")}, "not both"),
        ({"url": "http://h", "tenant": "a b"}, "tenant"),
    ],
)
def test_bad_settings_are_refused_with_a_clear_error(kwargs, error):
    with pytest.raises(ValueError, match=error):
        continuous.start(**kwargs)
    assert continuous.current() is None


def test_one_agent_per_process():
    with Receiver() as receiver:
        agent = continuous.start(receiver.url, "one", profiles="heap", interval=1)
        with pytest.raises(samprof.ProfilerError, match="already runs"):
            continuous.start(receiver.url, "two", profiles="heap")
        agent.stop()
        # The CPU profile is the agent's while it runs, as Go's is.
        agent = continuous.start(receiver.url, "one", profiles="cpu", interval=1)
        with pytest.raises(samprof.ProfilerError):
            samprof.CPUProfiler().start()
        agent.stop()
        samprof.CPUProfiler().profile(0.01)


def test_stop_returns_as_soon_as_the_last_part_is_sent():
    """stop() waits for the sender only while it has something to send:
    it once waited out the exit timeout (3 s) whenever the sender looked
    at the cutter before the cutter had ended."""
    with Receiver() as receiver:
        for i in range(10):
            agent = continuous.start(receiver.url, "stop", profiles="cpu", interval=60)
            t0 = time.monotonic()
            agent.stop()
            took = time.monotonic() - t0
            assert took < 1, f"stop {i} took {took:.2f} s"
        assert len(receiver.uploads) == 10


def test_labels_follow_threads_and_tasks_into_pyroscope_series():
    import asyncio

    async def request(route: str, seconds: float) -> None:
        with samprof.labels(route=route):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                burn_python_for(0.005)
                await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(request("/a", 0.3), request("/b", 0.3))

    with Receiver() as receiver:
        agent = continuous.start(
            receiver.url, "async", profiles="cpu", interval=0.2, hz=500, token="s3cret"
        )
        t = threading.Thread(target=cpu_work, args=(0.3,))
        t.start()
        asyncio.run(main())
        t.join()
        agent.stop()
    cpu = receiver.of("process_cpu")
    assert {u.headers["authorization"] for u in cpu} == {"Bearer s3cret"}
    routes = {labels.get("route") for u in cpu for labels in u.sample_labels()}
    assert {"/a", "/b", "/cpu"} <= routes
    # Each task's samples carry its own route, not its neighbour's.
    a = value_of(cpu, "cpu", "request", route="/a")
    b = value_of(cpu, "cpu", "request", route="/b")
    assert a > 0 and b > 0 and value_of(cpu, "cpu", "cpu_work", route="/a") == 0


def test_the_threads_of_a_stack_are_one_sample():
    """A server that starts a thread per request must not send a sample
    per thread: Pyroscope makes no series of them, and refuses a profile
    of more than 16,000 samples."""

    def threaded_work() -> None:
        burn_python_for(0.01)

    with Receiver() as receiver:
        agent = continuous.start(receiver.url, "threads", profiles="cpu", interval=60, hz=1000)
        for _ in range(40):
            t = threading.Thread(target=threaded_work)
            t.start()
            t.join()
        agent.stop()
    [upload] = receiver.uploads
    stacks = [
        tuple(s.location_ids)
        for s in upload.profile.samples
        if any(f.function.endswith("threaded_work") for f in upload.profile.stack_of(s))
    ]
    assert len(stacks) == len(set(stacks)) > 0
    assert value_of([upload], "samples", "threaded_work") >= 40 * 5
