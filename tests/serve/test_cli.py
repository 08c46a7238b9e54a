"""``dex-agents-ray serve`` and the connection flags every engine subcommand shares."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from dex_agents_ray.cli import main
from dex_agents_ray.cli._connection import connection_options, connection_parser, load_agents
from dex_agents_ray.evals import CaseResult, CaseStatus, EvalCase, write_run_record
from dex_agents_ray.evals._results import ResultsWriter
from examples.inspector_agent import flow
from tests.serve.sessions import TOKEN, start_example_sessions

ROOT = Path(__file__).resolve().parents[2]
_CLI = "import sys; from dex_agents_ray.cli import main; sys.exit(main())"
_CASES = [EvalCase(id="a", turns=("hi",)), EvalCase(id="b", turns=("ho",))]
_ROW = CaseResult(case_id="a", session_id="eval:nightly:a", status=CaseStatus.SCORED, passed=True)


def test_the_connection_flags_are_one_parser() -> None:
    import argparse

    parser = argparse.ArgumentParser(parents=[connection_parser()])
    args = parser.parse_args(
        ["--address", "auto", "--namespace", "n", "--store", "x.db", "--agent", "a:b"]
        + ["--agent", "c:d"]
    )
    options = connection_options(args)
    assert options.address == "auto" and options.namespace == "n" and options.store == "x.db"
    assert options.agents == ("a:b", "c:d")
    defaults = connection_options(
        argparse.ArgumentParser(parents=[connection_parser()]).parse_args(["--agent", "a:b"])
    )
    assert defaults.address is None and defaults.namespace == "dex-agents-ray"
    assert defaults.store is None
    with pytest.raises(SystemExit):
        main(["serve"])  # --agent is required


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("examples.inspector_agent", "expected MODULE:ATTR"),
        ("no_such_module_here:flow", "cannot import"),
        ("examples.inspector_agent:nope", "has no attribute"),
        ("examples.inspector_agent:FLOW_TYPE", "expected an AgentSessionFlow, got str"),
    ],
)
def test_bad_agents_are_refused_by_name(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_agents([spec])


def test_agents_load_once_per_flow_type() -> None:
    assert load_agents(["examples.inspector_agent:flow"]) == [flow]
    with pytest.raises(ValueError, match="given twice"):
        load_agents(["examples.inspector_agent:flow", "examples.inspector_agent:flow"])


async def test_serve_from_the_command_line(
    engine_factory: Any, namespace: str, store_path: Path, tmp_path: Path
) -> None:
    import ray

    await start_example_sessions(engine_factory)
    # A run folder as run_eval writes it (its record and one row), for the eval pages.
    write_run_record(
        tmp_path / "evals" / "nightly", run_id="nightly", agent="SupportDesk", cases=_CASES
    )
    ResultsWriter(tmp_path / "evals" / "nightly").append(_ROW)
    address = ray.get_runtime_context().gcs_address
    command = [
        *("serve", "--address", address, "--namespace", namespace, "--store", str(store_path)),
        *("--agent", "examples.inspector_agent:flow", "--port", "0", "--token", TOKEN),
        *("--evals", str(tmp_path / "evals")),
    ]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CLI,
        *command,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    try:
        printed = []
        async with asyncio.timeout(120):
            while True:
                line = (await process.stdout.readline()).decode()
                assert line, f"serve exited: {''.join(printed)}"
                printed.append(line)
                if "open http://" in line:
                    break
        url = line.split("open ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith(f"/?token={TOKEN}")
        base = url.split("/?", 1)[0]
        async with httpx.AsyncClient(base_url=base, timeout=30, follow_redirects=True) as http:
            assert (await http.get("/api/sessions")).status_code == 401
            assert (await http.get(url)).status_code == 200  # the redirect sets the cookie
            listed = (await http.get("/api/sessions?waiting=true")).json()["sessions"]
            assert sorted(row["session_id"] for row in listed) == ["refund-a1", "which-order"]
            (run,) = (await http.get("/api/evals/runs")).json()["runs"]
            assert run["run_id"] == "nightly" and run["agent"] == "SupportDesk"
            assert run["cases"] == 2 and run["rows"] == 1 and run["status"] == "interrupted"
            assert "/evals" in (await http.get("/")).text  # the sessions page links the runs
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                async with asyncio.timeout(60):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
    assert process.returncode == 0, "".join(printed)


def test_serve_with_a_bad_agent_exits_2_before_starting_anything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "--agent", "examples.inspector_agent:nope"]) == 2
    assert "has no attribute 'nope'" in capsys.readouterr().err
