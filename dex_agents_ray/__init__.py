"""Durable AI-agent sessions on Ray.

The engine (:mod:`dex_agents_ray.engine`) runs real ``dex-python-sdk`` Flow
definitions durably on Ray; the session (:mod:`dex_agents_ray.session`), the
built-in loop and the integrations build on it. The session's public names
are re-exported here, as the spec's ``dex_agents`` exports them::

    from dex_agents_ray import AgentSessionClient, AgentSessionFlow, AgentSessionOptions
"""

from dex_agents_ray.session import *  # noqa: F403 - the session's public names
from dex_agents_ray.session import __all__ as _session_all

__all__: list[str] = list(_session_all)
