"""``dex-agents-ray eval`` run as a person runs it, in a process of its own: a cases
file it cannot use ends in one line and changes nothing; a run that starts its own
local Ray keeps Ray's start-up notes out of the progress bar."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_CLI = "import sys; from dex_agents_ray.cli import main; sys.exit(main())"
TIMEOUT = 240

_RAY_LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(INFO|WARNING)\b")
"""A line of Ray's driver logger ("2026-01-01 10:00:00,123	INFO worker.py:...")."""


async def _eval(cwd: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``dex-agents-ray eval ARGS`` in a new process: exit status, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CLI, "eval", *args,
        cwd=cwd,
        env=env or {**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), TIMEOUT)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.jsonl", None, "cannot read the cases file {path}: No such file or directory"),
        ("a-directory", b"", "cannot read the cases file {path}: Is a directory"),
        ("latin1.jsonl", b'{"id": "a", "input": "caf\xe9"}\n', "it is not UTF-8 text"),
        ("empty.jsonl", b"", "the cases file {path} holds no cases"),
        ("blank.jsonl", b"\n  \n\n", "the cases file {path} holds no cases"),
    ],
)
async def test_a_cases_file_it_cannot_use_ends_in_one_line_and_changes_nothing(
    tmp_path: Path, name: str, content: bytes | None, message: str
) -> None:
    path = tmp_path / name
    if name == "a-directory":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    store, out = tmp_path / "store" / "engine.db", tmp_path / "out"

    code, stdout, stderr = await _eval(
        tmp_path,
        name,
        *("--agent", "actors.support:flow", "--run-id", "r1"),
        *("--store", str(store), "--out", str(out)),
    )

    assert code == 2
    assert stdout == ""
    assert stderr.splitlines() == [stderr.strip()], stderr  # one line, no traceback
    assert stderr.startswith("dex-agents-ray eval: ")
    assert message.format(path=name) in stderr
    # Nothing started or written: no store, no results, no default directory.
    assert not store.parent.exists() and not out.exists()
    assert not (tmp_path / ".dex-agents-ray").exists() and not (tmp_path / "evals").exists()


async def test_a_run_that_starts_a_local_ray_prints_no_ray_notes_into_the_bar(
    tmp_path: Path,
) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        json.dumps({"id": "where", "input": "Where is order A2?", "expected": "shipped"}) + "\n"
    )
    # Its own Ray, as on a laptop: no RAY_ADDRESS, a temp dir where no `ray start`
    # head of another run is found (short: Ray's socket paths must fit), and the
    # authentication mode left to Ray, whose start-up note about it a user sees.
    ray_dir = tempfile.mkdtemp(prefix="r", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env.update(PYTHONPATH=str(ROOT), RAY_TMPDIR=ray_dir)
    try:
        code, stdout, stderr = await _eval(
            tmp_path,
            str(cases),
            *("--agent", "actors.support:flow", "--run-id", "local-1"),
            *("--store", str(tmp_path / "engine.db"), "--out", str(tmp_path / "out")),
            env=env,
        )
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)

    assert code == 0, stderr
    assert "Token authentication" not in stderr
    assert "Started a local Ray instance" not in stderr
    assert not _RAY_LOG_LINE.search(stderr), stderr
    frames = re.split(r"[\r\n]+", stderr.strip())
    assert all(frame.startswith("eval:") for frame in frames), frames  # the bar alone
    assert "1/1" in frames[-1]
    assert "eval local-1" in stdout
    assert "results in " in stdout and '"scored": 1' in stdout
