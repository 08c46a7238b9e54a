#!/usr/bin/env bash
# Start a local Ray head on loopback with the dashboard (for `ray job submit`).
# Stop it with `.venv/bin/ray stop`.
set -euo pipefail
cd "$(dirname "$0")/.."
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-token}"
# The dashboard agent's default port (52365) may be taken by another local Ray.
agent_port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
exec .venv/bin/ray start --head --node-ip-address 127.0.0.1 --num-cpus "${NUM_CPUS:-2}" \
  --dashboard-host 127.0.0.1 --include-dashboard true \
  --dashboard-agent-listen-port "$agent_port" "$@"
