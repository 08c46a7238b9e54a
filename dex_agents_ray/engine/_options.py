"""Engine-side option and value types that extend the Dex SDK's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dex import RecoveryErrorInfo, StepOptions

__all__ = [
    "EngineRecoveryErrorInfo",
    "RayTaskOptions",
    "RemoteStepOptions",
    "StepAttemptProgress",
]


class StepAttemptProgress(StrEnum):
    """How far the attempts of a failed Step execution got.

    ``NOT_STARTED``: no attempt ever reached user code, so the Step's effects
    cannot have happened. ``NOT_COMPLETED``: some attempt reached user code and
    did not complete, so its effects may have happened.
    """

    UNSPECIFIED = "unspecified"
    NOT_STARTED = "not_started"
    NOT_COMPLETED = "not_completed"


@dataclass(frozen=True)
class EngineRecoveryErrorInfo(RecoveryErrorInfo):
    """``context.recovery_error`` on this engine: the SDK's fields plus progress.

    Attributes:
        attempt_progress: Whether any attempt of the failed execution reached
            user code (``NOT_COMPLETED``) or none did (``NOT_STARTED``).
    """

    attempt_progress: StepAttemptProgress = StepAttemptProgress.UNSPECIFIED


@dataclass(frozen=True, kw_only=True)
class RayTaskOptions:
    """Ray options for a Step that runs as a Ray task.

    The engine owns attempts, so Ray's own task retries are always off
    (``max_retries=0``) whatever is set here.
    """

    num_cpus: float = 0.1
    """CPUs reserved per task. The default fits I/O-bound tools: ``0`` would
    start a worker process per concurrent task, ``1`` caps concurrency at the
    node's CPU count."""
    num_gpus: float = 0.0
    """GPUs reserved per task."""
    memory: int | None = None
    """Bytes of memory reserved per task; ``None`` reserves none."""
    resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources, e.g. ``{"browser": 1}``."""
    runtime_env: dict[str, Any] | None = None
    """A Ray runtime environment for the task; ``None`` inherits the job's."""

    def __post_init__(self) -> None:
        if self.num_cpus < 0:
            raise ValueError(f"RayTaskOptions.num_cpus must be >= 0, got {self.num_cpus}")
        if self.num_gpus < 0:
            raise ValueError(f"RayTaskOptions.num_gpus must be >= 0, got {self.num_gpus}")
        if self.memory is not None and self.memory <= 0:
            raise ValueError(f"RayTaskOptions.memory must be positive, got {self.memory}")
        for name, amount in self.resources.items():
            if amount < 0:
                raise ValueError(f"RayTaskOptions.resources[{name!r}] must be >= 0")

    def to_json(self) -> str:
        """Encode for the store."""
        return json.dumps(
            {
                "num_cpus": self.num_cpus,
                "num_gpus": self.num_gpus,
                "memory": self.memory,
                "resources": self.resources,
                "runtime_env": self.runtime_env,
            },
            sort_keys=True,
        )

    @staticmethod
    def from_json(text: str) -> RayTaskOptions:
        """Decode what :meth:`to_json` wrote."""
        data = json.loads(text)
        return RayTaskOptions(
            num_cpus=float(data["num_cpus"]),
            num_gpus=float(data["num_gpus"]),
            memory=data["memory"],
            resources=dict(data["resources"]),
            runtime_env=data["runtime_env"],
        )

    def ray_options(self) -> dict[str, Any]:
        """The keyword arguments for ``ray.remote(...).options``."""
        options: dict[str, Any] = {
            "num_cpus": self.num_cpus,
            "num_gpus": self.num_gpus,
            "max_retries": 0,
            "retry_exceptions": False,
        }
        if self.memory is not None:
            options["memory"] = self.memory
        if self.resources:
            options["resources"] = dict(self.resources)
        if self.runtime_env is not None:
            options["runtime_env"] = self.runtime_env
        return options


@dataclass(frozen=True)
class RemoteStepOptions(StepOptions):
    """``StepOptions`` that also run the Step's handlers as a Ray task.

    Return it from ``Step.get_step_options()`` to run every execution of the
    Step remotely, or pass it as one movement's options
    (``StepMovement.of(Step, input, options=RemoteStepOptions(...))``) to run
    only that execution remotely. All SDK fields keep their meaning.

    Attributes:
        ray: The task's Ray options (CPUs, GPUs, memory, resources, runtime_env).
    """

    ray: RayTaskOptions = field(default_factory=RayTaskOptions)
