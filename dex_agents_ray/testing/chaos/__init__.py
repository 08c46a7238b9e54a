"""A chaos campaign users point at their own flow, and an invariant checker.

``ChaosCampaign(engine=..., flow=..., turns=[...], faults=50, seed=7).run()``
drives sessions through scripted turns while seeded faults hit (SIGKILL of
session hosts, tool executors and the scheduler; a PostgreSQL crash-restart;
dropped store connections; a worker node of a multi-node cluster killed and one
added back), then checks what the store holds with
:func:`check_invariants`: DESIGN.md's six invariants, no stuck session, no
lost or doubled user message / approval / answer, no error surfacing to a
caller, and exactly one result per tool call. ``str(report)`` prints the
faults injected, the violations and the seed.
"""

from dex_agents_ray.testing.chaos._campaign import (
    DEFAULT_FAULT_WEIGHTS,
    ChaosCampaign,
    ChaosReport,
)
from dex_agents_ray.testing.chaos._checker import (
    check_invariants,
    repeated_events,
    uncommitted_results,
)
from dex_agents_ray.testing.chaos._nodes import (
    ClusterNodes,
    LoopbackClusterNodes,
    wait_until_dead,
)
from dex_agents_ray.testing.chaos._record import (
    CampaignRecord,
    FaultKind,
    FaultRecord,
    ResolutionRecord,
    SessionRecord,
    ToolInvocation,
    Violation,
)

__all__ = [
    "DEFAULT_FAULT_WEIGHTS",
    "CampaignRecord",
    "ChaosCampaign",
    "ChaosReport",
    "ClusterNodes",
    "FaultKind",
    "FaultRecord",
    "LoopbackClusterNodes",
    "ResolutionRecord",
    "SessionRecord",
    "ToolInvocation",
    "Violation",
    "check_invariants",
    "repeated_events",
    "uncommitted_results",
    "wait_until_dead",
]
