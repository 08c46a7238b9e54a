# tests/my_worker.py: the Worker child (the spec's "Testing an adapter" example).
from dex_agents_ray.testing import run_agent_worker
from tests.my_agent import build_flow

if __name__ == "__main__":
    run_agent_worker([build_flow()])
