"""Ready agents: importable Flows for jobs, notebooks, the CLI and batch evaluation.

- ``actors.support:flow`` — a support desk: read tools, a refund that asks for
  approval and runs at most once, and ``ask_user`` when an order is not named.
- ``actors.research:flow`` — a research agent over MCP servers
  (``mcp-server-time`` from PyPI by default; ``research_flow(servers)`` for others).
- ``actors.pydantic_support:flow`` — the support desk written in Pydantic AI (an
  unchanged ``pydantic_ai.Agent``, ``actors.pydantic_support:agent``), run by
  ``dex_agents_ray.pydantic_ai``.
- ``actors.openai_support:flow`` — the same desk in the OpenAI Agents SDK (an
  unchanged ``agents.Agent``, ``actors.openai_support:agent``), run by
  ``dex_agents_ray.openai_agents``.
- ``actors.grader:flow`` — an LLM judge: scores an answer against what was
  expected and replies with JSON (``parse_grade``).

Each runs on a scripted model unless a model is named (``actors._models``:
``DEX_AGENTS_MODEL`` or the session setting ``model``).
"""
