"""The cluster configurations, checked statically (there is no Kubernetes here and
no machines for ``ray up``): they parse, carry the fields KubeRay and Ray's own
config schema require, and agree with the job they run."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import ray
import yaml

from examples.session_job import parse_args

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((CLUSTER / name).read_text())
    assert isinstance(data, dict), name
    return data


def _containers(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    spec = cluster["spec"]
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def test_ray_up_config_matches_rays_schema() -> None:
    schema_path = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"
    config = _load("ray-up.yaml")
    jsonschema.validate(config, json.loads(schema_path.read_text()))
    commands = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    starts = [c for c in commands if "ray start" in c]
    assert len(starts) == 2 and all("RAY_AUTH_MODE=token" in c for c in starts)
    assert "~/.ray/auth_token" in config["file_mounts"]  # one token on every node


def test_kuberay_raycluster_has_what_kuberay_requires() -> None:
    cluster = _load("kuberay-raycluster.yaml")
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    spec = cluster["spec"]
    assert spec["rayVersion"] == ray.__version__
    assert isinstance(spec["headGroupSpec"]["rayStartParams"], dict)
    names = set()
    for group in spec["workerGroupSpecs"]:
        assert group["groupName"] not in names
        names.add(group["groupName"])
        assert isinstance(group["rayStartParams"], dict)
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    images = {c["image"] for c in _containers(cluster)}
    assert len(images) == 1, f"every node runs the same image: {images}"
    for container in _containers(cluster):
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert env.get("RAY_AUTH_MODE") == "token", f"{container['name']}: auth mode differs"
    # The sessions group offers the custom resource the docs tell hosts to ask for.
    sessions = next(g for g in spec["workerGroupSpecs"] if g["groupName"] == "sessions")
    resources = json.loads(json.loads(sessions["rayStartParams"]["resources"]))
    assert resources == {"sessions": 1000}


def test_kuberay_rayjob_runs_the_session_job_on_that_cluster() -> None:
    job, cluster = _load("kuberay-rayjob.yaml"), _load("kuberay-raycluster.yaml")
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    assert job["spec"]["clusterSelector"] == {"ray.io/cluster": cluster["metadata"]["name"]}
    words = shlex.split(job["spec"]["entrypoint"].replace('"$DEX_AGENTS_RAY_STORE"', "DSN"))
    assert words[:2] == ["python", "examples/session_job.py"]
    assert (ROOT / words[1]).is_file()
    args = parse_args(words[2:])  # the entrypoint's flags are the job's own
    assert (args.agent, args.sessions, args.leave_waiting) == ("actors.support:flow", 100, 5)
    assert args.store == "DSN"
    # The store the entrypoint names is set on the cluster's head.
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert "DEX_AGENTS_RAY_STORE" in {e["name"] for e in head["env"]}
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert "working_dir" in runtime_env
    assert runtime_env["env_vars"]["RAY_AUTH_MODE"] == "token"
