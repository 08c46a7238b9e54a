"""The session Flow Definition Graph: the document, the drawing, the file and the command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import dex_agents_ray
from dex_agents_ray import session_graph
from dex_agents_ray.session_graph import (
    SESSION_FLOW_GRAPH_GENERATED_AT,
    SESSION_FLOW_STEP_TYPES,
    render_session_flow_graph,
    session_flow_definition_document,
    session_flow_graph_svg,
)
from examples.inspector_agent import flow

# What the dex-agents-session-graph console script runs (pyproject's [project.scripts]).
_CONSOLE_SCRIPT = "import sys; from dex_agents_ray.session_graph import main; sys.exit(main())"


def test_the_document_names_the_flow_and_every_step_of_the_session_flow() -> None:
    document = session_flow_definition_document("SupportAgent", "support-agent.operate")
    assert dex_agents_ray.session_flow_definition_document is session_flow_definition_document
    assert document.flow_type == "SupportAgent"
    assert document.generated_at == SESSION_FLOW_GRAPH_GENERATED_AT
    assert document.generated_at.tzinfo is not None
    content = json.loads(document.content.decode("utf-8"))
    assert content == document.to_json()
    assert content["schemaVersion"].startswith("2.")
    assert content["flow"]["name"] == "SupportAgent"
    # The template is the real session Flow: the same Step types (the SDK keeps them
    # in StepList._definitions), and only real Steps in its transitions.
    real = {type(d.step).__name__ for d in flow.get_steps()._definitions}
    steps = {step["type"] for step in content["flow"]["steps"]}
    assert steps == real == set(SESSION_FLOW_STEP_TYPES)
    assert content["flow"]["startStep"] == "StartAgentSession"
    for transition in content["flow"]["transitions"]:
        assert {transition["from"], transition["to"]} <= steps
    actions = {action["name"]: action for action in content["flow"]["actions"]}
    for name in actions:
        assert callable(getattr(flow, name)), name
    assert actions["resolve_interrupt"]["permission"] == "support-agent.operate"
    assert "permission" not in actions["get_agent_snapshot"]
    # The same inputs give the same bytes: a restart uploads nothing new.
    again = session_flow_definition_document("SupportAgent", "support-agent.operate")
    assert again == document


@pytest.mark.parametrize(
    ("flow_type", "permission"), [("", "p"), ("  ", "p"), ("SupportAgent", ""), (3, "p")]
)
def test_blank_names_are_refused(flow_type: object, permission: str) -> None:
    with pytest.raises(ValueError, match="must be a non-blank string"):
        session_flow_definition_document(flow_type, permission)  # type: ignore[arg-type]


def test_the_drawing_highlights_the_given_steps() -> None:
    svg = session_flow_graph_svg("Support <Agent>", ["AwaitToolApproval"])
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert '<g class="step active" data-step="AwaitToolApproval">' in svg
    assert svg.count('class="step active"') == 1
    assert "Support &lt;Agent&gt;" in svg and "<Agent>" not in svg
    assert 'class="step active"' not in session_flow_graph_svg("SupportAgent")


def test_render_writes_a_file_into_a_directory_or_at_a_path(tmp_path: Path) -> None:
    written = render_session_flow_graph("SupportAgent", tmp_path / "graphs")
    assert written == tmp_path / "graphs" / "SupportAgent.json"
    assert json.loads(written.read_text())["flow"]["name"] == "SupportAgent"
    drawn = render_session_flow_graph("SupportAgent", tmp_path / "graph.svg")
    assert drawn.read_text().startswith("<svg")
    in_dir = render_session_flow_graph("SupportAgent", tmp_path, svg=True)
    assert in_dir == tmp_path / "SupportAgent.svg"
    with pytest.raises(ValueError, match="directory or a .json or .svg file"):
        render_session_flow_graph("SupportAgent", tmp_path / "graph.png")


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["SupportAgent", "-o", str(tmp_path), "--action-permission", "x"]
    assert session_graph.main(argv) == 0
    path = tmp_path / "SupportAgent.json"
    assert capsys.readouterr().out.strip() == str(path)
    assert json.loads(path.read_text())["flow"]["actions"][0]["permission"] == "x"
    with pytest.raises(SystemExit) as refused:
        session_graph.main(["  ", "-o", str(tmp_path)])
    assert refused.value.code == 2
    # As a program (the dex-agents-session-graph console script runs the same main).
    run = subprocess.run(
        [sys.executable, "-c", _CONSOLE_SCRIPT, "Other", "-o", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.strip() == str(tmp_path / "Other.json")


def test_exports_are_pinned() -> None:
    import dex_agents_ray.serve

    assert dex_agents_ray.serve.__all__ == [
        "CONTENT_SECURITY_POLICY",
        "CSRF_HEADER",
        "AuthorizeSession",
        "InspectorAuth",
        "build_inspector_app",
        "generate_token",
    ]
    assert session_graph.__all__ == [
        "SESSION_FLOW_GRAPH_GENERATED_AT",
        "SESSION_FLOW_GRAPH_SCHEMA_VERSION",
        "SESSION_FLOW_STEP_TYPES",
        "FlowDefinitionDocument",
        "main",
        "render_session_flow_graph",
        "session_flow_definition_document",
        "session_flow_graph",
        "session_flow_graph_svg",
    ]
    for module in (dex_agents_ray.serve, session_graph):
        for name in module.__all__:
            assert getattr(module, name) is not None, name
    assert "session_flow_definition_document" in dex_agents_ray.__all__
