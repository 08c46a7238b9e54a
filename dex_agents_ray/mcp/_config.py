"""Where the MCP servers are: configured on the Worker, never from Flow input.

A stdio server's command runs with the Worker's privileges, so configurations
come from the Worker's own code or settings, never from Flow input, a user
message, or a browser.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

__all__ = [
    "EnvironmentSecret",
    "McpServerConfig",
    "McpStdioServerConfig",
    "McpStreamableHttpServerConfig",
    "resolve_headers",
]


@dataclass(frozen=True, kw_only=True)
class EnvironmentSecret:
    """A header value read from an environment variable where the tool Step runs.

    A Flow is stored by value, so a literal token in its definition lands in the
    store; this reference stores only the variable's name (and ``template``).

    Example::

        headers={"Authorization": EnvironmentSecret(name="TICKETS_TOKEN", template="Bearer {}")}
    """

    name: str
    """The environment variable."""
    template: str = "{}"
    """The header value, with ``{}`` where the variable's value goes."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "=" in self.name:
            raise ValueError(f"EnvironmentSecret.name must be a variable name, got {self.name!r}")
        if not isinstance(self.template, str) or self.template.count("{}") != 1:
            raise ValueError(
                f"EnvironmentSecret.template must hold one '{{}}', got {self.template!r}"
            )

    def resolve(self) -> str:
        """The value now; ``LookupError`` naming the variable when it is unset or empty."""
        value = os.environ.get(self.name)
        if not value:
            raise LookupError(f"environment variable {self.name} is not set (EnvironmentSecret)")
        return self.template.replace("{}", value)


HeaderValue: TypeAlias = str | EnvironmentSecret
"""A literal header value (stored with the Flow) or an environment reference (not)."""


def resolve_headers(headers: Mapping[str, HeaderValue]) -> dict[str, str]:
    """The headers to send, each ``EnvironmentSecret`` read from the environment now."""
    return {k: v.resolve() if isinstance(v, EnvironmentSecret) else v for k, v in headers.items()}


def _check_name(owner: str, name: object) -> None:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{owner}.name must be a non-empty string, got {name!r}")


def _check_trust(owner: str, value: object) -> None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{owner}.trusts_tool_annotations must be a bool or None, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class McpStdioServerConfig:
    """An MCP server run as a process per request, speaking MCP over its stdin and stdout.

    Example::

        McpStdioServerConfig(name="files", command="mcp-server-files", args=["/srv/reports"])
    """

    name: str
    """The server's name: the prefix of its tool names (``<name>__<tool>``); unique per source."""
    command: str
    """The program to run (a path, or a name looked up on ``PATH``)."""
    args: Sequence[str] = ()
    """Its arguments; empty for none."""
    env: Mapping[str, str] | None = field(default=None, repr=False)
    """Variables added to the MCP SDK's minimal default environment (``PATH``,
    ``HOME`` and a few more); ``None`` adds none. The Worker's other variables
    are not passed on."""
    cwd: str | None = None
    """The working directory; ``None`` keeps the Worker's."""
    trusts_tool_annotations: bool | None = None
    """Whether this server's annotations and Dex ``_meta`` keys set effects;
    ``None`` uses the source's ``trusts_tool_annotations``."""

    def __post_init__(self) -> None:
        _check_name("McpStdioServerConfig", self.name)
        if not isinstance(self.command, str) or not self.command.strip():
            raise ValueError(
                f"McpStdioServerConfig.command must be a non-empty string ({self.name})"
            )
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise TypeError(f"McpStdioServerConfig.args must be a sequence of str ({self.name})")
        object.__setattr__(self, "args", tuple(self.args))
        if self.env is not None:
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
                raise TypeError(f"McpStdioServerConfig.env must map str to str ({self.name})")
            object.__setattr__(self, "env", dict(self.env))
        _check_trust("McpStdioServerConfig", self.trusts_tool_annotations)

    @property
    def transport(self) -> Literal["stdio"]:
        """``"stdio"``."""
        return "stdio"


@dataclass(frozen=True, kw_only=True)
class McpStreamableHttpServerConfig:
    """An MCP server reached over Streamable HTTP, with a new connection per request.

    Example::

        McpStreamableHttpServerConfig(
            name="tickets",
            url="https://tickets.example.com/mcp",
            headers={
                "Authorization": EnvironmentSecret(name="TICKETS_TOKEN", template="Bearer {}")
            },
        )
    """

    name: str
    """The server's name: the prefix of its tool names (``<name>__<tool>``); unique per source."""
    url: str
    """The MCP endpoint, ``http://`` or ``https://``."""
    headers: Mapping[str, HeaderValue] = field(default_factory=dict, repr=False)
    """Headers sent with every request, such as ``Authorization``; empty for none.
    A literal value is stored with the Flow (it is pickled by value); give
    credentials as an ``EnvironmentSecret``, read where the tool Step runs.
    Left out of ``repr`` because they often hold credentials."""
    trusts_tool_annotations: bool | None = None
    """Whether this server's annotations and Dex ``_meta`` keys set effects;
    ``None`` uses the source's ``trusts_tool_annotations``."""

    def __post_init__(self) -> None:
        _check_name("McpStreamableHttpServerConfig", self.name)
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise ValueError(
                f"McpStreamableHttpServerConfig.url must start with http:// or https:// "
                f"({self.name}), got {self.url!r}"
            )
        if not all(
            isinstance(k, str) and isinstance(v, str | EnvironmentSecret)
            for k, v in self.headers.items()
        ):
            raise TypeError(
                "McpStreamableHttpServerConfig.headers must map str to str or "
                f"EnvironmentSecret ({self.name})"
            )
        object.__setattr__(self, "headers", dict(self.headers))
        _check_trust("McpStreamableHttpServerConfig", self.trusts_tool_annotations)

    @property
    def transport(self) -> Literal["streamable_http"]:
        """``"streamable_http"``."""
        return "streamable_http"


McpServerConfig: TypeAlias = McpStdioServerConfig | McpStreamableHttpServerConfig
"""Either server configuration."""
