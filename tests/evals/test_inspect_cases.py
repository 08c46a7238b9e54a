"""Cases from Inspect AI datasets and sample files: what is carried, what is refused
(naming the field and the sample), and importing the extra without patching asyncio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.dataset import FieldSpec, MemoryDataset, Sample, csv_dataset, json_dataset
from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    ContentImage,
    ContentText,
)

import dex_agents_ray
from dex_agents_ray.evals import EvalCase, EvalCaseError, EvalSample, contains, exact_match
from dex_agents_ray.evals.inspect import (
    REFUSED_SAMPLE_FIELDS,
    cases_from_inspect,
    read_inspect_cases,
)

REPO_ROOT = Path(dex_agents_ray.__file__).resolve().parent.parent


def _one(sample: Sample) -> EvalCase:
    (case,) = cases_from_inspect(MemoryDataset([sample]))
    return case


def _refused(sample: Sample, *, source: str | None = None) -> EvalCaseError:
    with pytest.raises(EvalCaseError) as caught:
        cases_from_inspect(MemoryDataset([sample]), source=source)
    return caught.value


def test_text_input_target_id_and_metadata_are_carried() -> None:
    case = _one(Sample(input="Where is order 7?", target="shipped", id="o-7", metadata={"k": 1}))
    assert case == EvalCase(
        id="o-7", turns=("Where is order 7?",), expected="shipped", metadata={"k": 1}
    )


def test_an_integer_id_becomes_its_text() -> None:
    assert _one(Sample(input="hi", id=42)).id == "42"


def test_user_messages_become_turns_in_order() -> None:
    case = _one(
        Sample(
            input=[ChatMessageUser(content="look up a"), ChatMessageUser(content="look up b")],
            target="b",
            id="two",
        )
    )
    assert case.turns == ("look up a", "look up b")
    assert case.expected == "b"


def test_a_user_message_of_text_parts_is_one_turn() -> None:
    message = ChatMessageUser(content=[ContentText(text="first"), ContentText(text="second")])
    assert _one(Sample(input=[message], id="parts")).turns == ("first\nsecond",)


def test_a_list_target_is_the_list_of_acceptable_answers() -> None:
    assert _one(Sample(input="colour?", target=["blue", "navy"], id="c")).expected == [
        "blue",
        "navy",
    ]


def test_no_target_is_no_expected_value() -> None:
    assert _one(Sample(input="hi", id="a")).expected is None
    assert _one(Sample(input="hi", target=[], id="b")).expected is None


def test_samples_without_an_id_are_numbered_by_position_as_inspect_does() -> None:
    cases = cases_from_inspect(
        MemoryDataset([Sample(input="one"), Sample(input="two", id="named"), Sample(input="three")])
    )
    assert [c.id for c in cases] == ["1", "named", "3"]


def test_a_numbered_sample_that_meets_an_id_is_a_duplicate() -> None:
    with pytest.raises(EvalCaseError, match="duplicate case id '2'") as caught:
        cases_from_inspect(MemoryDataset([Sample(input="a", id=2), Sample(input="b")]))
    assert caught.value.field == "id" and caught.value.line == 2


def test_a_system_message_is_refused_naming_the_sample() -> None:
    sample = Sample(
        input=[ChatMessageSystem(content="Be terse."), ChatMessageUser(content="hi")], id="sys-1"
    )
    error = _refused(sample, source="suite.jsonl")
    assert error.field == "input" and error.source == "suite.jsonl" and error.line == 1
    assert "sample 'sys-1'" in str(error)
    assert "a system message is refused" in str(error)
    assert "instructions" in str(error)


@pytest.mark.parametrize(
    "message",
    [
        ChatMessageAssistant(content="an earlier reply"),
        ChatMessageTool(content="a tool result", tool_call_id="call-1", function="lookup"),
    ],
    ids=["assistant", "tool"],
)
def test_other_messages_than_the_users_are_refused(message: Any) -> None:
    error = _refused(Sample(input=[ChatMessageUser(content="hi"), message], id="m"))
    assert error.field == "input"
    assert f"message 1 is a {message.role} message" in str(error)
    assert "sample 'm'" in str(error)


def test_an_image_in_a_user_message_is_refused() -> None:
    content = [ContentText(text="what is this"), ContentImage(image="data:image/png;base64,AA==")]
    error = _refused(Sample(input=[ChatMessageUser(content=content)], id="img"))
    assert error.field == "input" and "holds image" in str(error)


def test_empty_input_is_refused() -> None:
    assert _refused(Sample(input="  ", id="blank")).field == "input"
    error = _refused(Sample(input=[], id="none"))
    assert error.field == "input" and "sample 'none'" in str(error)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("choices", ["A", "B"]),
        ("files", {"data.txt": "contents"}),
        ("sandbox", "docker"),
        ("setup", "echo ready"),
    ],
)
def test_sandbox_and_choice_fields_are_refused_naming_field_and_sample(
    field: str, value: Any
) -> None:
    assert field in REFUSED_SAMPLE_FIELDS
    samples = [Sample(input="fine", id="ok"), Sample(input="hi", id="s-9", **{field: value})]
    with pytest.raises(EvalCaseError) as caught:
        cases_from_inspect(MemoryDataset(samples))
    error = caught.value
    assert error.field == field and error.line == 2
    assert f"sample 's-9': {field!r} is refused" in str(error)


def test_a_refused_field_names_a_numbered_sample() -> None:
    error = _refused(Sample(input="hi", choices=["A", "B"]))
    assert "sample '1'" in str(error)


def test_metadata_that_is_not_json_is_refused() -> None:
    error = _refused(Sample(input="hi", id="meta", metadata={"when": object()}))
    assert error.field == "metadata" and "sample 'meta'" in str(error)


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_jsonl_sample_file_through_inspects_reader(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "samples.jsonl",
        [
            {"id": "a", "input": "look up a", "target": "found", "metadata": {"suite": "s"}},
            {
                "input": [
                    {"role": "user", "content": "look up b"},
                    {"role": "user", "content": "and c"},
                ],
                "target": ["found c", "no c"],
            },
        ],
    )
    cases = read_inspect_cases(path)
    assert cases == [
        EvalCase(id="a", turns=("look up a",), expected="found", metadata={"suite": "s"}),
        EvalCase(id="2", turns=("look up b", "and c"), expected=["found c", "no c"]),
    ]
    # The same file through Inspect's own Dataset gives the same cases.
    assert cases_from_inspect(json_dataset(str(path))) == cases


def test_a_json_array_file_and_its_refusals_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "samples.json"
    path.write_text(
        json.dumps(
            [
                {"id": 1, "input": "fine"},
                {"id": 2, "input": "in a box", "sandbox": "docker"},
            ]
        ),
        encoding="utf-8",
    )
    with pytest.raises(EvalCaseError) as caught:
        read_inspect_cases(path)
    assert caught.value.source == str(path) and caught.value.field == "sandbox"
    assert "sample '2'" in str(caught.value)


def test_a_csv_sample_file_with_field_names_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "samples.csv"
    path.write_text(
        "question,answer,qid,suite\n"
        "where is order 7,shipped,q1,support\n"
        "refund it,refunded,q2,billing\n",
        encoding="utf-8",
    )
    fields = FieldSpec(input="question", target="answer", id="qid", metadata=["suite"])
    cases = read_inspect_cases(path, sample_fields=fields)
    assert cases == [
        EvalCase(
            id="q1", turns=("where is order 7",), expected="shipped", metadata={"suite": "support"}
        ),
        EvalCase(id="q2", turns=("refund it",), expected="refunded", metadata={"suite": "billing"}),
    ]
    assert cases_from_inspect(csv_dataset(str(path), fields)) == cases


def test_a_file_of_another_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\.csv, \.json or \.jsonl"):
        read_inspect_cases(tmp_path / "samples.txt")


async def test_text_scorers_take_a_list_target_as_acceptable_answers() -> None:
    case = _one(Sample(input="colour?", target=["Blue", "navy"], id="c"))

    def sample(answer: str) -> EvalSample:
        return EvalSample(case=case, session_id="s", answer=answer)

    context: Any = None
    assert (await contains().score(sample("it is blue"), context)).passed
    assert (await exact_match().score(sample(" navy "), context)).passed
    missed = await contains().score(sample("red"), context)
    assert not missed.passed and missed.reason == "contains: 'blue' or 'navy' not matched"
    # A text given to the scorer wins over the case's list.
    assert not (await contains("green").score(sample("it is blue"), context)).passed


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_importing_the_package_and_its_evals_loads_no_inspect() -> None:
    result = _python(
        "import sys, dex_agents_ray, dex_agents_ray.evals, dex_agents_ray.evals.inspect\n"
        "print([m for m in sys.modules if m.split('.')[0] in ('inspect_ai', 'nest_asyncio2')])\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_without_the_extra_the_import_names_it() -> None:
    result = _python(
        "import sys\nsys.modules['inspect_ai'] = None\nimport dex_agents_ray.evals.inspect\n"
    )
    assert result.returncode != 0
    assert (
        "ImportError: dex_agents_ray.evals.inspect needs Inspect AI: "
        'pip install "dex-agents-ray[inspect]"' in result.stderr
    )
    assert "The above exception was the direct cause" in result.stderr


UNPATCHED_CHECK = r"""
import asyncio, asyncio.events, sys, tempfile

def state():
    policy = type(asyncio.get_event_loop_policy())
    return {
        "asyncio.run": asyncio.run,
        "asyncio.Task": asyncio.Task,
        "asyncio.tasks.Task": asyncio.tasks.Task,
        "asyncio.Future": asyncio.Future,
        "asyncio.get_event_loop": asyncio.get_event_loop,
        "asyncio.events.get_event_loop": asyncio.events.get_event_loop,
        "policy": policy,
        "policy.get_event_loop": policy.get_event_loop,
        "run_until_complete": asyncio.BaseEventLoop.run_until_complete,
        "run_forever": asyncio.BaseEventLoop.run_forever,
        "_run_once": asyncio.BaseEventLoop._run_once,
        "_nest_patched": getattr(asyncio, "_nest_patched", None),
        "excepthook": sys.excepthook,
    }

def changed(before):
    after = state()
    return sorted(name for name in before if before[name] is not after[name])

before = state()
import inspect_ai, inspect_ai.dataset, inspect_ai.log
from dex_agents_ray.evals import CaseResult, CaseStatus, EvalReport
from dex_agents_ray.evals.inspect import cases_from_inspect, write_inspect_log
print("imported", changed(before))

async def main():
    loop = type(asyncio.get_running_loop())
    methods = (loop.run_until_complete, loop.run_forever, loop._run_once)
    sample = inspect_ai.dataset.Sample(input="hi", id="a")
    cases = cases_from_inspect(inspect_ai.dataset.MemoryDataset([sample]))
    row = CaseResult(case_id="a", session_id="eval:r:a", status=CaseStatus.SCORED, answer="hi")
    report = EvalReport(run_id="r", results=(row,))
    path = write_inspect_log(report, tempfile.mkdtemp(), cases=cases)
    print("loop", (loop.run_until_complete, loop.run_forever, loop._run_once) == methods)
    return path

path = asyncio.run(main())
print("used", changed(before))
# The check can fail: Inspect's synchronous reader, called inside a running loop,
# enters it through nest_asyncio, which patches asyncio.
async def read():
    inspect_ai.log.read_eval_log(str(path))
asyncio.run(read())
print("after Inspect's sync reader", changed(before))
"""


def test_importing_and_using_inspect_through_us_leaves_asyncio_unpatched() -> None:
    result = _python(UNPATCHED_CHECK)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == ["imported []", "loop True", "used []"], result.stdout
    patched = lines[3]
    assert patched.startswith("after Inspect's sync reader [") and "asyncio.run" in patched
