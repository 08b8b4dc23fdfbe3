"""brrm's judge as a Ray Serve application (:mod:`brrm.serve.ray`, ``brrm serve --ray``).

The default tier checks what needs no cluster: the Serve config ``--print-config`` writes (Ray Serve's own schema
accepts it, and its builder makes the application), the flags' mistakes (named before anything starts), and the
digest routing (a request's replica, and how few keys move when a replica dies). The slow tier starts a local
multi-node cluster (a head and two workers, CPU only, 127.0.0.1) with a tiny Qwen3 judge, and checks the contract
across replicas: faults survived with single-process answers, one model call for identical requests through two
ingress replicas, Idempotency-Key replays across them, a deadline and a client's disconnect cancelled on the
replica through the handle, autoscaling 1 -> 2 -> 1, RemoteJudge and ``ray://``.
"""

from __future__ import annotations

import pytest

from brrm.cli import main
from tests.audit_support import TINY_FLAGS

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _print_config(capsys, monkeypatch) -> tuple[str, dict]:
    import yaml

    monkeypatch.setenv("BRRM_API_KEY", "a-secret-key-1234")
    code, out, err = _run(capsys, "serve", "--print-config", "--autoscale", "1:3", "--gpus-per-replica", "1",
                          "--cpus-per-replica", "4", "--ingress-replicas", "2", "--port", "9100", "--max-batch", "16",
                          *TINY_FLAGS)
    assert code == 0, err
    return out, yaml.safe_load(out)


def test_print_config_writes_the_sizes_and_no_secret(capsys, monkeypatch):
    """No cluster and no Ray Serve import (seconds of it): the YAML's content; the slow tier has Ray Serve's own
    schema check it and the builder build it (:func:`test_print_config_is_what_serve_deploy_takes`)."""
    out, config = _print_config(capsys, monkeypatch)
    assert "a-secret-key-1234" not in out and "BRRM_API_KEY" in out  # the key is named, never written
    app = config["applications"][0]
    assert config["http_options"] == {"host": "127.0.0.1", "port": 9100}
    assert (app["name"], app["route_prefix"], app["import_path"]) == ("brrm", "/", "brrm.serve.ray.app:from_args")
    judge, ingress = app["deployments"]
    assert judge["autoscaling_config"]["min_replicas"] == 1 and judge["autoscaling_config"]["max_replicas"] == 3
    assert judge["ray_actor_options"] == {"num_cpus": 4.0, "num_gpus": 1.0}
    assert judge["request_router_config"] == {"request_router_class": "brrm.serve.ray.router.DigestRouter"}
    assert (ingress["name"], ingress["num_replicas"]) == ("BrrmIngress", 2)
    assert app["args"]["limits"]["max_batch"] == 16 and app["args"]["spec"]["kind"] == "brrm"
    assert "api_key" not in app["args"]["limits"]


@pytest.mark.slow  # importing Ray Serve alone takes seconds
def test_print_config_is_what_serve_deploy_takes(capsys, monkeypatch):
    pytest.importorskip("ray.serve", reason="Ray Serve is an optional extra: pip install -e '.[ray]'")
    from ray.serve.schema import ServeDeploySchema

    from brrm.serve.ray import from_args

    _, config = _print_config(capsys, monkeypatch)
    ServeDeploySchema.model_validate(config)  # what `serve deploy` and KubeRay check
    app = config["applications"][0]
    built = from_args(app["args"])
    assert type(built).__name__ == "Application"
    with pytest.raises(Exception, match="unknown limit 'max_batches'"):
        from_args({**app["args"], "limits": {"max_batches": 3}})


@pytest.mark.parametrize(("argv", "message"), [
    (["--replicas", "2"], "--replicas applies with --ray"),
    (["--ray", "--replicas", "2", "--autoscale", "1:2"], "give --replicas N or --autoscale MIN:MAX, not both"),
    (["--print-config", "--autoscale", "3:1"], "--autoscale '3:1': MIN must be >= 1 and MAX >= MIN"),
    (["--print-config", "--autoscale", "two"], "--autoscale 'two' is not MIN:MAX"),
    (["--print-config", "--replicas", "0"], "--replicas must be"),
    (["--print-config", "--cpus-per-replica", "0"], "--cpus-per-replica must be"),
    (["--print-config", "--gpus-per-replica", "-1"], "--gpus-per-replica must be"),
    (["--ray", "--factory", "tests.x:y"], "--factory does not apply with --ray"),
])
def test_bad_ray_flags_are_named_before_anything_starts(capsys, argv, message):
    code, out, err = _run(capsys, "serve", *argv)
    assert code == 2 and out == ""
    assert err.startswith("brrm: error: ") and message in err and len(err.strip().splitlines()) == 1



@pytest.mark.parametrize(("option", "value", "field"), [("timeout_s", 0, "timeout_s"), ("retries", -1, "retries"),
                                                       ("concurrency", 0, "concurrency")])
def test_a_ray_judges_bad_client_option_is_named_before_ray_is_contacted(option, value, field):
    """No Ray instance runs in this process here: the option is refused first, not reported as the missing
    cluster."""
    import brrm

    with pytest.raises(brrm.ConfigError, match=field) as caught:
        brrm.load("ray://brrm", **{option: value})
    assert "Ray" not in str(caught.value)

def test_routing_sends_equal_requests_to_one_replica_and_moves_few_keys():
    from brrm.serve.ray.keys import ranked, route_key

    body = b'{"pairs": []}'
    assert route_key("/v1/judge", body, None) == route_key("/v1/judge", body, None) != \
        route_key("/v1/score", body, None)
    assert route_key("/v1/judge", body, "k1") == route_key("/v1/judge", b"other", "k1")  # a retry, by its key
    replicas = ["r1", "r2", "r3"]
    keys = [route_key("/v1/judge", str(i).encode(), None) for i in range(300)]
    first = {k: ranked(k, replicas)[0] for k in keys}
    assert set(first.values()) == set(replicas)  # every replica gets keys
    after = {k: ranked(k, ["r1", "r3"])[0] for k in keys}  # r2 died
    assert all(after[k] == first[k] for k in keys if first[k] != "r2")  # only r2's keys moved
    assert all(ranked(k, replicas)[1:] == [r for r in ranked(k, replicas) if r != first[k]] for k in keys[:5])


# ------------------------------------------------------------------------------------------ on a local cluster
PAIRS = [{"prompt": f"question {i}: which answer is better?", "response_a": f"answer {i}", "response_b": "no idea"}
         for i in range(12)]


NODE = {"node_ip_address": "127.0.0.1", "include_dashboard": False}


@pytest.fixture(scope="module")
def cluster():
    """A head (the Serve controller, proxy and ingress replicas: resource ``brrm_head``) and two CPU workers (the
    judge replicas: resource ``brrm_judge``), every node on 127.0.0.1; Serve's HTTP proxy on the head only. Yields
    ``(cluster, port)``; everything is shut down after the module, a test failing or not."""
    pytest.importorskip("ray.serve", reason="Ray Serve is an optional extra: pip install -e '.[ray]'")
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    from brrm.audit.ray_runner import WORKER_NICENESS
    from tests.ray_support import LOOPBACK_ONLY, started
    from tests.serve_helpers import free_port

    if ray.is_initialized():
        raise RuntimeError("a Ray instance is already running in this test process")
    from ray._private import ray_constants

    made = None
    with pytest.MonkeyPatch.context() as patch:  # every node on the loopback (tests/ray_support.py), while it runs
        patch.setenv(LOOPBACK_ONLY, "0")
        patch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)  # this process has read it already
        patch.delenv("RAY_ADDRESS", raising=False)
        patch.setenv("RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S", "2")  # a shared 2-core box answers probes late
        patch.setenv("RAY_SERVE_MAX_QUEUE_LENGTH_RESPONSE_DEADLINE_S", "5")
        def start() -> Cluster:
            nonlocal made
            made = Cluster(initialize_head=True, head_node_args={
                **NODE, "num_cpus": 1, "resources": {"brrm_head": 8}, "_system_config": dict(WORKER_NICENESS)})
            for _ in range(2):
                made.add_node(**NODE, num_cpus=2, resources={"brrm_judge": 2})
            return made

        def stop() -> None:
            if made is not None:
                made.shutdown()

        try:
            made = started(start, stop)
            ray.init(address=made.address, log_to_driver=False, logging_level="WARNING")
            port = free_port()
            serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
            yield made, port
        finally:
            if ray.is_initialized():
                serve.shutdown()
                ray.shutdown()
            if made is not None:
                made.shutdown()



@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("serve-ray") / "tiny"))


@pytest.fixture(scope="module")
def spec(model_dir):
    from brrm.types import JudgeSpec
    from tests.audit_support import TINY_OPTS

    return JudgeSpec.from_load(model_dir, **{**TINY_OPTS, "backend": "transformers"})


def _limits():
    from brrm.serve.limits import ServerLimits

    # one item per judge call on both sides, so that a result never depends on what it was batched with
    return ServerLimits(warmup=False, max_batch=1, max_wait_ms=0.0, deadline_s=300.0)


@pytest.fixture(scope="module")
def reference(spec):
    """Each request of :data:`PAIRS` answered by the single-process server (in process, one intra-op thread as
    each replica)."""
    import torch
    from fastapi.testclient import TestClient

    from brrm.serve.app import create_app

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with TestClient(create_app(spec.load(), limits=_limits())) as client:
            return [client.post("/v1/judge", json={"pairs": [p]}).json() for p in PAIRS]
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def single(spec, tmp_path_factory):
    """The single-process server's app (the reference's app) behind a real socket: uvicorn in a thread on
    127.0.0.1, for clients that need a URL. Yields its base URL; stopped after the module."""
    import threading

    import uvicorn

    from brrm.serve.app import create_app
    from tests.serve_helpers import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(spec.load(), limits=_limits()), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    _until(lambda: server.started or not thread.is_alive(), timeout_s=120)
    assert server.started, "the single-process server did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=60)


@pytest.fixture(scope="module")
def app(cluster, spec):
    """The judge app ``brrm``: 2 judge replicas (one per worker), 2 ingress replicas (on the head)."""
    from ray import serve

    from brrm.serve.ray import RaySizing, build_app

    sizing = RaySizing(replicas=2, ingress_replicas=2, judge_resources={"brrm_judge": 1},
                       ingress_resources={"brrm_head": 1})
    serve.run(build_app(spec, limits=_limits(), sizing=sizing), name="brrm", route_prefix="/")
    yield f"http://127.0.0.1:{cluster[1]}"
    serve.delete("brrm")


def _judge_replicas(app_name: str = "brrm") -> list[str]:
    from brrm.serve.ray.fanout import replica_ids
    from brrm.serve.ray.sizing import JUDGE

    return replica_ids(app_name, JUDGE)


def _wait_ready(url: str, replicas: int, timeout_s: float = 300.0) -> dict:
    """Wait until Serve runs ``replicas`` judge replicas of ``brrm`` and ``/ready`` says so (bounded)."""
    import time

    import httpx

    _until(lambda: _running("brrm") == replicas and len(_judge_replicas()) == replicas, timeout_s=timeout_s)
    end, body = time.monotonic() + timeout_s, {}
    while time.monotonic() < end:
        body = httpx.get(f"{url}/ready", timeout=120).json()
        if body.get("ready_replicas") == replicas and body.get("replicas") == replicas:
            return body
        time.sleep(1.0)
    raise AssertionError(f"{replicas} judge replicas were not ready in {timeout_s} s: {body}")


def _calls(url: str) -> float:
    """Judge calls made so far, summed over the replicas (the app's aggregated /metrics)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    for _ in range(5):  # every replica's count, or ask again
        samples = [s for f in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=120).text)
                   for s in f.samples]
        counts = {s.name: s.value for s in samples if s.name in ("brrm_replicas", "brrm_replicas_ready")}
        if counts["brrm_replicas"] == counts["brrm_replicas_ready"]:
            return sum(s.value for s in samples if s.name == "brrm_batch_seconds_count")
    raise AssertionError(f"not every judge replica answered /metrics: {counts}")


@pytest.mark.slow  # a local Ray cluster: the slow tier (pyproject.toml, README)
@pytest.mark.timeout(900)
def test_a_killed_replica_and_a_lost_node_cost_no_request(cluster, app, reference):
    """Under a steady load of 4 clients, one judge replica is killed (``ray.kill``) and then a worker node is
    removed: every request answers 200 with the single-process server's answer."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    import ray

    _wait_ready(app, 2)
    done, killed, lost = [0], threading.Event(), threading.Event()
    lock = threading.Lock()

    def one(pair: dict) -> httpx.Response:
        with httpx.Client(timeout=600) as client:
            reply = client.post(f"{app}/v1/judge", json={"pairs": [pair]})
        with lock:
            done[0] += 1
        return reply

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(one, p) for p in PAIRS]
        _until(lambda: done[0] >= 2)
        victim = _judge_replicas()[0]
        ray.kill(ray.get_actor(f"SERVE_REPLICA::brrm#BrrmJudge#{victim}", namespace="serve"), no_restart=False)
        killed.set()
        _until(lambda: done[0] >= 5)
        cluster[0].remove_node(sorted(cluster[0].worker_nodes, key=lambda n: n.unique_id)[0])
        lost.set()
        replies = [f.result(timeout=600) for f in futures]
    assert [r.status_code for r in replies] == [200] * len(PAIRS), [r.text[:300] for r in replies]
    assert [r.json() for r in replies] == reference
    cluster[0].add_node(**NODE, num_cpus=2, resources={"brrm_judge": 2})  # the lost node replaced, for what follows


def _until(condition, timeout_s: float = 300.0, what: str = "the load to progress") -> None:
    import time

    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_single_flight_idempotency_and_clients_across_ingress_replicas(app, reference):
    """Identical concurrent requests through both ingress replicas make one judge call; an Idempotency-Key retry
    answered by the other ingress replica is a replay (no call); RemoteJudge over HTTP and ``brrm.load("ray://")``
    through the handle give the same typed results, equal to the single-process server's."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    import brrm
    from brrm.serve.ray.ingress import INGRESS_HEADER

    _wait_ready(app, 2)
    before = _calls(app)
    body = {"pairs": [{"prompt": "the same question", "response_a": "yes", "response_b": "no"}]}
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: httpx.post(f"{app}/v1/judge", json=body, timeout=600), range(8)))
    assert {r.status_code for r in replies} == {200} and len({r.text for r in replies}) == 1
    assert len({r.headers[INGRESS_HEADER] for r in replies}) == 2  # both ingress replicas took some
    assert _calls(app) - before == 1

    key = {"Idempotency-Key": "retry-across-ingress-0001"}
    first = httpx.post(f"{app}/v1/judge", json={"pairs": [PAIRS[0]]}, headers=key, timeout=600)
    calls = _calls(app)
    for _ in range(40):  # until the retry reaches the other ingress replica (Serve's proxy picks one)
        retry = httpx.post(f"{app}/v1/judge", json={"pairs": [PAIRS[0]]}, headers=key, timeout=600)
        assert retry.headers.get("idempotent-replayed") == "true" and retry.json() == first.json()
        if retry.headers[INGRESS_HEADER] != first.headers[INGRESS_HEADER]:
            break
    else:
        raise AssertionError("no retry reached the other ingress replica")
    assert _calls(app) == calls and first.json() == reference[0]

    conversations = [p["prompt"] for p in PAIRS[:3]]
    a, b = [p["response_a"] for p in PAIRS[:3]], [p["response_b"] for p in PAIRS[:3]]
    with brrm.load(app, backend="serve") as remote, brrm.load("ray://brrm") as in_cluster:
        assert repr(in_cluster).startswith("RayJudge('ray://brrm', model=")
        over_http, over_handle = remote.judge_pairs(conversations, a, b), in_cluster.judge_pairs(conversations, a, b)
    assert over_http == over_handle
    assert [j.p_a for j in over_http] == [r["judgments"][0]["p_a"] for r in reference[:3]]


def _cancelled(url: str, reason: str) -> float:
    """Jobs dropped for ``reason`` (``deadline``, ``disconnect``) so far, summed over the judge replicas."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=120).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "brrm_cancelled_total" and s.labels.get("reason") == reason)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_deadline_and_a_disconnect_cancel_the_job_on_its_replica(app):
    """A request whose own deadline passes answers its replica's typed 504; a client that leaves mid-request
    cancels its ingress call, and through the handle its job on the judge replica (counted there as dropped for a
    disconnect). Each request holds 12 pairs, judged one per call: neither can finish within 0.1 s or 1 s, and a
    busier machine only makes them slower, so both outcomes are certain however loaded the box is."""
    import httpx

    _wait_ready(app, 2)
    pairs = [{"prompt": f"cancel {i}: which is better?", "response_a": f"a{i}", "response_b": "b"} for i in range(12)]
    before = _cancelled(app, "deadline")
    late = httpx.post(f"{app}/v1/judge", json={"pairs": pairs, "timeout_s": 0.1}, timeout=600)
    assert late.status_code == 504, late.text
    error = late.json()["error"]
    assert "deadline" in error["message"] and "Ray" not in late.text and "actor" not in late.text, late.text
    _until(lambda: _cancelled(app, "deadline") >= before + 1, 120, "a replica to count the job dropped at its deadline")

    before = _cancelled(app, "disconnect")
    gone = {"pairs": [{**p, "prompt": "gone " + p["prompt"]} for p in pairs]}
    with pytest.raises(httpx.ReadTimeout):  # the client leaves after 1 s: its connection is closed
        httpx.post(f"{app}/v1/judge", json=gone, timeout=httpx.Timeout(600, read=1.0))
    _until(lambda: _cancelled(app, "disconnect") >= before + 1, 120, "a replica to drop the job of the client gone")


def _running(app_name: str) -> int:
    from ray import serve

    from brrm.serve.ray.sizing import JUDGE

    states = serve.status().applications[app_name].deployments[JUDGE].replica_states
    return int(states.get("RUNNING", 0))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_autoscaling_goes_from_1_to_2_replicas_under_load_and_back_when_idle(cluster, spec):
    """4 in-cluster clients (``ray://scaling``, no HTTP route) keep a 1:2 autoscaled judge busy: Serve adds the
    second replica; when they stop it removes it; every judgment made meanwhile is ok."""
    import threading

    from ray import serve

    import brrm
    from brrm.serve.ray import RaySizing, build_app

    sizing = RaySizing(autoscale=(1, 2), target_ongoing=1, upscale_delay_s=0, downscale_delay_s=2,
                       judge_resources={"brrm_judge": 1}, ingress_resources={"brrm_head": 1},
                       autoscaling={"metrics_interval_s": 0.5, "look_back_period_s": 2})
    serve.run(build_app(spec, limits=_limits(), sizing=sizing), name="scaling", route_prefix=None)
    try:
        assert _running("scaling") == 1
        stop, statuses = threading.Event(), []
        with brrm.load("ray://scaling", timeout_s=300) as judge:

            def client(n: int) -> None:
                i = 0
                while not stop.is_set():
                    i += 1
                    result = judge.judge_pairs([f"client {n} question {i}"], ["yes"], ["no"])
                    statuses.append(result[0].status)

            threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
            for t in threads:
                t.start()
            try:
                _until(lambda: _running("scaling") == 2, timeout_s=400)
            finally:
                stop.set()
                for t in threads:
                    t.join(timeout=400)
            _until(lambda: _running("scaling") == 1, timeout_s=120)
        assert statuses and set(statuses) == {"ok"}
    finally:
        serve.delete("scaling")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_openrlhf_nemo_gym_and_verl_clients_run_unchanged_against_the_ray_app(app, single, model_dir):
    """The peers' own clients, unchanged, get from the Ray app what they get from the single-process server:
    OpenRLHF's ``SingleTurnAgentExecutor`` posting to ``/get_reward`` (where OpenRLHF installs), NeMo Gym's
    ``/compare`` request and response models, and verl's remote reward (``VerlScorer`` with ``url=``)."""
    import asyncio

    import httpx
    import torch
    from transformers import AutoTokenizer

    from brrm.rlhf.verl import VerlRewardConfig, VerlScorer
    from tests.openrlhf_support import openrlhf_execute
    from tests.serve_helpers import compare_body
    from tests.test_serve_nemo_gym import GenRMCompareRequest, GenRMCompareResponse

    _wait_ready(app, 2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the single-process server as each replica runs: one intra-op thread
    try:
        body = compare_body(["13", "fourteen", "17"], "Name a prime number above 10.")
        GenRMCompareRequest.model_validate(body)
        compared = {url: httpx.post(f"{url}/compare", json=body, timeout=600) for url in (app, single)}
        assert {r.status_code for r in compared.values()} == {200}, [r.text[:300] for r in compared.values()]
        ray_reply, single_reply = (GenRMCompareResponse.model_validate(r.json()) for r in compared.values())
        assert ray_reply == single_reply and len(ray_reply.rewards) == 3

        def verl(url: str) -> list[dict[str, object]]:
            scorer = VerlScorer(VerlRewardConfig(url=url, kind="brrm", timeout_s=600.0))
            try:
                return [asyncio.run(scorer.score(text, "Hi!", {"prompt": "Say hello."}))
                        for text in ("Hello there!", "Goodbye.")]
            finally:
                scorer.close()

        timed = "judge_seconds"  # the only field that is a measurement, not a result
        over_ray, alone = ([{k: v for k, v in r.items() if k != timed} for r in verl(url)] for url in (app, single))
        assert [r["status"] for r in over_ray] == ["ok", "ok"] and over_ray == alone
        tok = AutoTokenizer.from_pretrained(model_dir)
        outs = [openrlhf_execute(f"{url}/get_reward", tok, "4") for url in (app, single)]
        assert outs[0]["reward"] == outs[1]["reward"] and len(outs[0]["reward"]) == 1, outs
        assert outs[0]["extra_logs"] == outs[1]["extra_logs"] == {"brrm_failed": [0.0]}, outs
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_replica_scaled_down_drains_the_requests_it_holds(app, spec, reference):
    """The module's last test (it leaves the app at 1 replica). 12 clients' single-pair requests, sent at once, are
    routed over the 2 judge replicas by their keys (one pair per judge call, so each replica holds several); sent
    again, as soon as the first is answered the app is redeployed with 1 replica. Serve stops routing to the
    replica it removes, which finishes what it holds: every request answers 200 with the single-process server's
    answer, from the same replica as the first time (one stopped without draining would leave its requests to be
    judged again by the survivor)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from ray import serve

    from brrm.serve.ray import RaySizing, build_app
    from brrm.serve.ray.replica import REPLICA_HEADER

    def send_all(after_first=lambda: None) -> list[httpx.Response]:
        first = threading.Event()

        def one(pair: dict) -> httpx.Response:
            reply = httpx.post(f"{app}/v1/judge", json={"pairs": [pair]}, timeout=600)
            first.set()
            return reply

        with ThreadPoolExecutor(len(PAIRS)) as pool:
            futures = [pool.submit(one, p) for p in PAIRS]
            assert first.wait(600), "no request was answered"
            after_first()
            return [f.result(timeout=600) for f in futures]

    def scale_down() -> None:
        sizing = RaySizing(replicas=1, ingress_replicas=2, judge_resources={"brrm_judge": 1},
                           ingress_resources={"brrm_head": 1})
        serve.run(build_app(spec, limits=_limits(), sizing=sizing), name="brrm", route_prefix="/")

    _wait_ready(app, 2)
    routed = [r.headers[REPLICA_HEADER] for r in send_all()]
    assert len(set(routed)) == 2, routed  # both replicas hold some
    replies = send_all(scale_down)
    assert [r.status_code for r in replies] == [200] * len(PAIRS), [r.text[:300] for r in replies]
    assert [r.json() for r in replies] == reference
    assert [r.headers[REPLICA_HEADER] for r in replies] == routed, "a request the removed replica held was judged again"
    assert len(_judge_replicas()) == 1
