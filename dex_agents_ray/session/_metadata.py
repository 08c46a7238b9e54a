"""What a model call reports about itself (the runner contract's ``ModelCallMetadata``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ModelCallMetadata:
    """What a model call reports about itself, for the ``chat`` span.

    The session never stores it. Each field is ``None`` when the client does
    not know it.
    """

    request_model: str | None = None
    """The model the call asked for."""
    response_model: str | None = None
    """The model the provider says answered."""
    provider_name: str | None = None
    """The provider, as ``gen_ai.provider.name`` spells it where it has a name."""
    response_id: str | None = None
    """The provider's ID of the response."""
    finish_reasons: Sequence[str] | None = None
    """Why the response ended, such as ``("stop",)`` or ``("tool_calls",)``."""

    def __post_init__(self) -> None:
        if self.finish_reasons is None:
            return
        if isinstance(self.finish_reasons, str) or not all(
            isinstance(reason, str) for reason in self.finish_reasons
        ):
            raise TypeError("ModelCallMetadata.finish_reasons must be a sequence of str")
        object.__setattr__(self, "finish_reasons", tuple(self.finish_reasons))
