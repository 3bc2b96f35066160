"""deploy/compose.yaml and its Dockerfile: checked as data here (no Docker engine on the build
machines), and with `docker compose config` where Compose is installed."""

import re
import shutil
import subprocess

import pytest
import yaml
from conftest import ROOT

DEPLOY = ROOT / "deploy"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def command(service: dict) -> str:
    return " ".join(service["command"])


def test_a_three_node_qdrant_cluster_bootstraps_from_the_first_node(compose):
    services = compose["services"]
    nodes = sorted(name for name in services if name.startswith("qdrant-"))
    assert nodes == ["qdrant-1", "qdrant-2", "qdrant-3"]
    for name in nodes:
        node = services[name]
        assert node["image"].startswith("qdrant/qdrant:")
        assert node["environment"]["QDRANT__CLUSTER__ENABLED"] == "true"
        assert node["environment"]["QDRANT__CLUSTER__P2P__PORT"] == "6335"
        assert f"--uri http://{name}:6335" in command(node)
        assert node["volumes"] == [f"{name}:/qdrant/storage"], "each node keeps its own data"
        if name != "qdrant-1":
            assert "--bootstrap http://qdrant-1:6335" in command(node)
            assert "qdrant-1" in node["depends_on"]
    assert "--bootstrap" not in command(services["qdrant-1"])
    assert {"6333:6333", "6334:6334"} <= set(services["qdrant-1"]["ports"])
    assert set(nodes) <= set(compose["volumes"])


def test_archivist_serves_both_graphs_against_the_cluster_and_ollama(compose):
    services = compose["services"]
    archivist = services["archivist"]
    env = archivist["environment"]
    assert re.fullmatch(r"http://qdrant-[123]:6333", env["QDRANT_URL"])
    assert env["OLLAMA_HOST"] == "http://ollama:11434"
    assert int(env["ARCHIVIST_QDRANT_SHARDS"]) >= 3
    assert 2 <= int(env["ARCHIVIST_QDRANT_REPLICATION_FACTOR"]) <= 3
    assert int(env["ARCHIVIST_QDRANT_WRITE_CONSISTENCY_FACTOR"]) >= 1
    assert command(archivist).startswith("langgraph dev --host 0.0.0.0 --port 2024")
    assert "2024:2024" in archivist["ports"]
    assert archivist["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert {"ollama", "qdrant-1", "qdrant-2", "qdrant-3"} <= set(archivist["depends_on"])
    assert services["ollama"]["environment"]["OLLAMA_NUM_PARALLEL"].startswith("${OLLAMA_NUM")
    assert "11434:11434" in services["ollama"]["ports"]


def test_the_scale_profile_shards_ingest_over_two_ollama_hosts(compose):
    services = compose["services"]
    workers = [services["ingest-1"], services["ingest-2"]]
    assert [w["profiles"] for w in workers] == [["scale"], ["scale"]]
    for i, worker in enumerate(workers, start=1):
        assert command(worker).startswith("archivist ingest /data/docs --store docs")
        assert f"--shard {i}/2" in command(worker)
    hosts = {w["environment"]["OLLAMA_HOST"] for w in workers}
    assert hosts == {"http://ollama:11434", "http://ollama-2:11434"}
    assert all(w["environment"]["QDRANT_URL"] == "http://qdrant-1:6333" for w in workers)
    assert services["ollama-2"]["profiles"] == ["scale"]


def test_the_image_installs_the_project_with_its_server_extra():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.1[1-9]", dockerfile, re.M)
    assert 'pip install ".[server]"' in dockerfile
    copied = " ".join(re.findall(r"^COPY (.+)$", dockerfile, re.M))
    for needed in ("pyproject.toml", "langgraph.json", "agent", "tools", "ingest"):
        assert needed in copied
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^server = \["langgraph-cli\[inmem\]', pyproject, re.M)


def _compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    return probe.returncode == 0


@pytest.mark.skipif(
    not _compose_available(), reason="Docker Compose is not installed: `docker compose` missing"
)
def test_docker_compose_accepts_the_file():
    done = subprocess.run(
        ["docker", "compose", "-f", str(DEPLOY / "compose.yaml"), "--profile", "scale", "config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "qdrant-3" in done.stdout
