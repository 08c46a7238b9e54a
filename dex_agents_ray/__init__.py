"""Durable AI-agent sessions on Ray.

The engine (:mod:`dex_agents_ray.engine`) runs real ``dex-python-sdk`` Flow
definitions durably on Ray; the session, the built-in loop and the
integrations build on it.
"""

__all__: list[str] = []
