"""The README's first example and its engine quick start, run as the scripts a reader saves.

The code is taken from README.md itself, so the README cannot drift from what
runs. Each script runs in a subprocess, as a reader would run it: its
``FlowEngine.start`` starts a local Ray of its own (Ray picks free ports) and
writes the default store, ``./.dex-agents-ray/engine.db``, under the test's
``tmp_path`` (the subprocess's working directory), never into the repository.
The first example's ``LiteLLMModelClient("openai/gpt-5-mini")`` reaches the
loopback provider through the environment variables LiteLLM reads, which the
Ray processes the script starts inherit.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fake_provider import RESPONSES_PATH, FakeProviderServer, responses_stream

README = Path(__file__).resolve().parent.parent / "README.md"
SCRIPT_TIMEOUT_S = 300.0

LOOKUP_CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_lookup_1",
    "name": "lookup_order",
    "arguments": '{"order_id":"A1"}',
    "status": "completed",
}
ANSWER_TEXT = "Order A1 has shipped."
ANSWER = {
    "type": "message",
    "id": "msg_2",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": ANSWER_TEXT, "annotations": []}],
}
USAGE = {"input_tokens": 40, "output_tokens": 8, "total_tokens": 48}


@dataclass(frozen=True, kw_only=True)
class CodeBlock:
    """One fenced code block of a markdown file."""

    heading: str | None
    """The nearest heading above it (its text, without the ``#`` marks); ``None`` before any."""
    language: str
    """The fence's info string's first word; empty when the fence has none."""
    code: str
    line: int
    """The line of the opening fence, from 1."""


def code_blocks(markdown: str) -> list[CodeBlock]:
    """Every fenced code block (``` or ~~~, CommonMark's closing rule) in document order.

    Lines starting with ``#`` inside a fence are code, not headings, which is
    why the file is parsed rather than searched.
    """
    blocks: list[CodeBlock] = []
    heading: str | None = None
    fence: str | None = None
    language = ""
    start = 0
    body: list[str] = []
    for number, line in enumerate(markdown.splitlines(), start=1):
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if fence is None:
            if indent <= 3 and stripped.startswith(("```", "~~~")):
                marker = stripped[0]
                fence = stripped[: len(stripped) - len(stripped.lstrip(marker))]
                info = stripped[len(fence) :].strip()
                language = info.split()[0] if info else ""
                start, body = number, []
            elif indent <= 3 and stripped.startswith("#"):
                heading = stripped.lstrip("#").strip()
        elif indent <= 3 and stripped.startswith(fence) and not stripped.rstrip().lstrip(fence[0]):
            blocks.append(
                CodeBlock(
                    heading=heading, language=language, code="\n".join(body) + "\n", line=start
                )
            )
            fence = None
        else:
            body.append(line)
    assert fence is None, f"README.md: the code fence opened on line {start} is never closed"
    return blocks


def readme_python(*, under: str | None = None) -> CodeBlock:
    """The README's first python block, or the first under a heading starting with ``under``."""
    for block in code_blocks(README.read_text(encoding="utf-8")):
        if block.language != "python":
            continue
        if under is None or (block.heading or "").startswith(under):
            return block
    where = "anywhere" if under is None else f"under a heading starting {under!r}"
    raise AssertionError(f"README.md has no python code block {where}")


def script_environment(**extra: str) -> dict[str, str]:
    """The test's environment (the repository on PYTHONPATH, Ray's auth mode) plus ``extra``.

    ``RAY_ADDRESS=local`` keeps the script from joining a ``ray start`` head that
    another run left on this machine: it starts its own local Ray, as it would
    on a reader's machine with none.
    """
    env = {
        **os.environ,
        "RAY_ADDRESS": "local",
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "DEX_AGENTS_MODEL"):
        env.pop(name, None)
    env.update(extra)
    return env


async def run_script(block: CodeBlock, directory: Path, env: dict[str, str]) -> str:
    """Run ``block`` as ``directory/readme_<line>.py`` from ``directory``; its output.

    Fails with the output so far when the script exits non-zero or outlives
    ``SCRIPT_TIMEOUT_S`` (then it is killed; the local Ray it started goes with it).
    """
    script = directory / f"readme_line_{block.line}.py"
    script.write_text(block.code, encoding="utf-8")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        cwd=directory,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    output = bytearray()

    async def collect() -> None:
        assert process.stdout is not None
        while chunk := await process.stdout.read(65536):
            output.extend(chunk)

    reader = asyncio.create_task(collect())
    try:
        await asyncio.wait_for(process.wait(), SCRIPT_TIMEOUT_S)
    except TimeoutError:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()
        await reader
        raise AssertionError(
            f"README.md line {block.line}: the script ran past {SCRIPT_TIMEOUT_S:g} s; "
            f"output:\n{output.decode(errors='replace')}"
        ) from None
    await reader
    text = output.decode(errors="replace")
    assert process.returncode == 0, (
        f"README.md line {block.line}: the script exited {process.returncode}; output:\n{text}"
    )
    return text


def _tool_output(body: dict[str, Any], call_id: str) -> str:
    outputs = [
        item.get("output")
        for item in body.get("input", [])
        if isinstance(item, dict)
        and item.get("type") == "function_call_output"
        and item.get("call_id") == call_id
    ]
    assert len(outputs) == 1, f"expected one output of {call_id} in the request, got {outputs!r}"
    output = outputs[0]
    assert isinstance(output, str), output
    return output


async def test_readme_first_example_runs_a_tool_calling_turn_and_prints_the_answer(
    provider: FakeProviderServer, tmp_path: Path
) -> None:
    block = readme_python()
    assert 'LiteLLMModelClient("openai/gpt-5-mini")' in block.code
    provider.enqueue(
        RESPONSES_PATH,
        responses_stream(output=[LOOKUP_CALL], usage=USAGE),
        responses_stream(output=[ANSWER], usage=USAGE),
    )
    env = script_environment(
        OPENAI_API_KEY="sk-test-readme",
        OPENAI_BASE_URL=provider.openai_api_base,
        OPENAI_API_BASE=provider.openai_api_base,
    )

    output = await run_script(block, tmp_path, env)

    printed = [line.strip() for line in output.splitlines()]
    assert ANSWER_TEXT in printed, output
    bodies = provider.bodies(RESPONSES_PATH)
    assert len(bodies) == 2, f"expected 2 model calls, got {len(bodies)}; output:\n{output}"
    first = json.dumps(bodies[0])
    assert "Where is order A1?" in first and "lookup_order" in first
    # The second call carries what lookup_order returned: the tool ran, in its own Step.
    result = json.loads(_tool_output(dict(bodies[1]), "call_lookup_1"))
    assert result == {"order_id": "A1", "status": "shipped"}
    assert (tmp_path / ".dex-agents-ray" / "engine.db").is_file()


async def test_readme_engine_quick_start_runs_its_flow_to_completion(tmp_path: Path) -> None:
    block = readme_python(under="Quick start")

    output = await run_script(block, tmp_path, script_environment())

    assert "fetched https://example.com on attempt 1" in output, output
    assert (tmp_path / ".dex-agents-ray" / "engine.db").is_file()


def test_the_readme_stays_a_front_door() -> None:
    """At most 250 lines: the history of figures lives in docs/benchmarks.md."""
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines"
