"""``dex-agents-ray eval``: batch evaluation from a shell.

    dex-agents-ray eval cases.jsonl --agent actors.support:flow --run-id nightly-1 \\
        --concurrency 200 --out evals/nightly-1
    dex-agents-ray eval compare evals/nightly-0 evals/nightly-1
    dex-agents-ray eval status|pause|resume|cancel RUN_ID --address ADDRESS

Exit status: 0; 1 when a case failed (``eval``) or a case both runs have regressed
(``compare``); 2 for bad input, which changes nothing; 143 when ``SIGTERM`` (``ray
job stop``) stopped the run: the finished cases' rows are written, the running
cases' sessions go on in their hosts, and the same command again finishes the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dex_agents_ray.cli._connection import (
    DEFAULT_NAMESPACE,
    ConnectionOptions,
    connection_options,
    connection_parser,
    load_agents,
    quiet_ray_start,
)

CONTROL_COMMANDS = ("status", "pause", "resume", "cancel")


def add_eval_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``eval`` (its own parsers read the rest of the command line)."""
    parser = sub.add_parser(
        "eval",
        help="evaluate an agent on a JSONL file of cases; compare two runs; control a run",
        add_help=False,
    )
    parser.add_argument("rest", nargs=argparse.REMAINDER)


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dex-agents-ray eval",
        parents=[connection_parser()],
        description="Run every case of a JSONL file as a durable session of --agent and "
        "score it. The same --run-id again resumes: scored cases are skipped, unfinished "
        "sessions go on where they are. Also: eval compare A B; eval status|pause|resume|"
        "cancel RUN_ID.",
    )
    parser.add_argument("cases", help="the JSONL file of cases (id, input or turns, ...)")
    parser.add_argument("--run-id", required=True, help="names the run (and its sessions)")
    parser.add_argument("--concurrency", type=int, default=16, help="cases at once (16)")
    parser.add_argument("--out", default=None, help="results directory (default: evals/RUN_ID)")
    parser.add_argument(
        "--scorer",
        action="append",
        default=[],
        metavar="SCORER",
        help="contains, exact, regex:PATTERN, json:FIELD (repeatable; default: contains "
        "when cases have 'expected')",
    )
    parser.add_argument(
        "--judge",
        default=None,
        metavar="MODULE:ATTR",
        help="an LLM judge agent (actors.grader:flow)",
    )
    parser.add_argument(
        "--approve",
        choices=("all", "reject", "none"),
        default="all",
        help="approvals: approve all (default), reject all, or leave them to a person",
    )
    parser.add_argument("--answer", default=None, help="answer every question with this text")
    parser.add_argument("--max-failures", type=int, default=None, help="stop after N failures")
    parser.add_argument(
        "--max-spend-tokens", type=int, default=None, help="the run's spend ceiling in tokens"
    )
    parser.add_argument(
        "--rpm", action="append", default=[], metavar="MODEL=N", help="requests per minute"
    )
    parser.add_argument(
        "--tpm", action="append", default=[], metavar="MODEL=N", help="tokens per minute"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--inspect-log",
        default=None,
        metavar="PATH",
        help="also write the run as an Inspect log, transcripts included (a .eval or .json "
        "file, or a directory; `inspect view` shows it; needs the inspect extra)",
    )
    return parser


def run_eval_command(argv: Sequence[str]) -> int:
    """Run ``eval ...``; returns the exit status."""
    argv = list(argv)
    if argv and argv[0] == "compare":
        return _compare(argv[1:])
    if argv and argv[0] in CONTROL_COMMANDS:
        return _control(argv[0], argv[1:])
    parser = _run_parser()
    args = parser.parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except ValueError as error:  # bad input: nothing was started
        print(f"dex-agents-ray eval: {error}", file=sys.stderr)
        return 2


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    from dex_agents_ray.evals import ModelRateLimit

    per_model: dict[str, dict[str, float]] = {}
    for flag, key in ((args.rpm, "requests_per_minute"), (args.tpm, "tokens_per_minute")):
        for item in flag:
            model, _, number = item.rpartition("=")
            try:
                value = float(number)
            except ValueError:
                value = -1.0
            if not model or value <= 0:
                raise ValueError(f"--{key[:1]}pm {item!r}: expected MODEL=N with N > 0")
            per_model.setdefault(model, {})[key] = value
    return {model: ModelRateLimit(**values) for model, values in per_model.items()}  # type: ignore[arg-type]


def _scorers(args: argparse.Namespace, cases: Sequence[Any]) -> list[Any]:
    from dex_agents_ray.evals import contains, exact_match, json_field, llm_judge, regex

    scorers: list[Any] = []
    for spec in args.scorer:
        kind, _, value = spec.partition(":")
        if kind == "contains":
            scorers.append(contains(value or None))
        elif kind == "exact":
            scorers.append(exact_match(value or None))
        elif kind == "regex" and value:
            scorers.append(regex(value))
        elif kind == "json" and value:
            scorers.append(json_field(value))
        else:
            raise ValueError(
                f"--scorer {spec!r}: expected contains, exact, regex:PATTERN or json:FIELD"
            )
    if args.judge:
        (judge,) = load_agents([args.judge])
        scorers.append(llm_judge(judge))
    if not scorers and any(case.expected is not None for case in cases):
        scorers.append(contains())
    return scorers


def _policy(args: argparse.Namespace) -> Any:
    from dex_agents_ray.evals import answer_with, approve_all, reject_all

    policies = []
    if args.answer is not None:
        policies.append(answer_with(args.answer))
    if args.approve == "all":
        policies.append(approve_all())
    elif args.approve == "reject":
        policies.append(reject_all())
    return policies


def _read_cases(path: str) -> list[Any]:
    """The cases in ``path``; a ``ValueError`` of one line for a file that cannot be
    read or holds no case (before anything is started or written)."""
    from dex_agents_ray.evals import EvalCase

    try:
        cases = EvalCase.from_jsonl(path)
    except OSError as error:
        raise ValueError(f"cannot read the cases file {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ValueError(f"cannot read the cases file {path}: it is not UTF-8 text") from None
    if not cases:
        raise ValueError(f"the cases file {path} holds no cases (one JSON object per line)")
    return cases


async def _run(args: argparse.Namespace) -> int:
    from dex_agents_ray.evals import run_eval

    options = connection_options(args)
    (flow,) = load_agents(options.agents[:1])
    if len(options.agents) > 1:
        raise ValueError("eval takes one --agent (the agent under test)")
    cases = _read_cases(args.cases)
    if args.inspect_log is not None:
        _inspect_extra()
    scorers = _scorers(args, cases)
    limits = _limits(args)
    out = Path(args.out) if args.out else Path("evals") / args.run_id
    stop = _StopOnSigterm(options.address, options.namespace)
    bar = None if args.no_progress else _ProgressBar(len(cases))
    try:
        with quiet_ray_start():  # the bar is on the terminal already
            stop.install()
            report = await run_eval(
                flow,
                cases,
                run_id=args.run_id,
                concurrency=args.concurrency,
                scorers=scorers,
                interrupts=_policy(args),
                model_limits=limits or None,
                max_failures=args.max_failures,
                max_spend_tokens=args.max_spend_tokens,
                out=out,
                store=options.store,
                namespace=options.namespace,
                ray_address=options.address,
                progress=None if bar is None else bar.update,
            )
    except asyncio.CancelledError:
        if not stop.received:
            raise
        stop.uncancel()
        print(
            f"dex-agents-ray eval: stopped by SIGTERM; the finished cases' rows are in "
            f"{out}, and the running cases' sessions go on: run the same command "
            f"(--run-id {args.run_id}) again to finish the run",
            file=sys.stderr,
            flush=True,
        )
        return 128 + signal.SIGTERM
    finally:
        stop.remove()
        if bar is not None:
            bar.close()
    _print_table(report)
    summary = report.summary()
    print(f"results in {out}: " + json.dumps(summary["counts"]), flush=True)
    if args.inspect_log is not None:
        path = await _write_inspect_log(report, flow, options, args.inspect_log)
        print(f"Inspect log: {path}", flush=True)
    if report.stopped:
        print(f"stopped: {report.stopped}", flush=True)
    return 1 if summary["counts"]["failed"] else 0


def _inspect_extra() -> None:
    """Refuse ``--inspect-log`` before anything starts when the extra is missing."""
    try:
        import dex_agents_ray.evals.inspect  # noqa: F401 - cheap: loads no inspect_ai
    except ImportError as error:
        raise ValueError(f"--inspect-log: {error}") from None


async def _write_inspect_log(report: Any, flow: Any, options: ConnectionOptions, path: str) -> Path:
    """The run as an Inspect log at ``path``, with each case's transcript (read from the
    sessions on the run's engine)."""
    from dex_agents_ray import AgentSessionClient
    from dex_agents_ray.engine import FlowEngine
    from dex_agents_ray.evals.inspect import read_transcripts, write_inspect_log

    engine = await FlowEngine.start(
        [flow], store=options.store, namespace=options.namespace, ray_address=options.address
    )
    try:
        transcripts = await read_transcripts(AgentSessionClient(engine.client, flow), report)
    finally:
        await engine.shutdown(stop_hosts=False)
    written: Path = await asyncio.to_thread(
        write_inspect_log, report, path, transcripts=transcripts
    )
    return written


class _StopOnSigterm:
    """``SIGTERM`` (``ray job stop`` sends it, then ``SIGKILL`` 3 s later) cancels the
    run's task, so ``run_eval`` stops driving, writes the finished rows and closes the
    run, instead of Ray's own handler exiting wherever the driver is.

    ``ray.init`` installs that handler (``sys.exit``) over any earlier one, so a
    cluster to join (``--address``, or ``$RAY_ADDRESS`` as in a Ray job) is joined
    first, as the engine would join it. A run that starts its own local Ray keeps
    Ray's handler; its exit cancels the run's task all the same (``asyncio.run``
    cancels every task on the way out).
    """

    def __init__(self, address: str | None, namespace: str) -> None:
        self.address = address or os.environ.get("RAY_ADDRESS")
        self.namespace = namespace
        self.received = False
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> None:
        import ray

        if not ray.is_initialized():
            if not self.address:
                return
            ray.init(address=self.address, namespace=self.namespace, include_dashboard=False)
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self._loop.add_signal_handler(signal.SIGTERM, self._stop)

    def _stop(self) -> None:
        self.received = True
        if self._task is not None:
            self._task.cancel()

    def uncancel(self) -> None:
        if self._task is not None:
            self._task.uncancel()

    def remove(self) -> None:
        if self._loop is not None:
            self._loop.remove_signal_handler(signal.SIGTERM)
            self._loop = None


class _ProgressBar:
    """A tqdm bar (terminal or notebook) with done / failed / waiting / steps/s / tokens."""

    def __init__(self, total: int) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, unit="case", desc="eval", dynamic_ncols=True)
        self.done = 0

    def update(self, progress: Any) -> None:
        rate = progress.steps / progress.elapsed_s if progress.elapsed_s > 0 else 0.0
        self.bar.set_postfix(
            failed=progress.failed,
            waiting=progress.needs_person,
            steps_s=f"{rate:.1f}",
            tokens=progress.input_tokens + progress.output_tokens,
            refresh=False,
        )
        # tqdm redraws at most every ``mininterval`` (0.1 s), not once per case;
        # ``close`` draws the last figures.
        self.bar.update(progress.done - self.done)
        self.done = progress.done

    def close(self) -> None:
        self.bar.close()


def _print_table(report: Any) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # without the evals extra: plain lines
        for row in report.results:
            print(f"{row.case_id}\t{row.status.value}\t{row.passed}\t{dict(row.scores)}")
        return
    table = Table(title=f"eval {report.run_id}")
    for column in ("case", "status", "passed", "scores", "turns", "tokens", "latency s", "error"):
        table.add_column(column)
    for row in report.results:
        table.add_row(
            row.case_id,
            row.status.value,
            "" if row.passed is None else str(row.passed),
            ", ".join(f"{k}={v:.2f}" for k, v in row.scores.items()),
            str(row.turns),
            str(row.input_tokens + row.output_tokens),
            "" if row.latency_s is None else f"{row.latency_s:.2f}",
            (row.error or "")[:60],
        )
    Console().print(table)


def _compare(argv: Sequence[str]) -> int:
    from dex_agents_ray.evals import EvalReport, compare_reports

    parser = argparse.ArgumentParser(
        prog="dex-agents-ray eval compare",
        description="Per-case differences from run A to run B (their --out directories).",
    )
    parser.add_argument("before", help="run A's results directory")
    parser.add_argument("after", help="run B's results directory")
    parser.add_argument("--json", action="store_true", help="print the changes as JSON lines")
    args = parser.parse_args(list(argv))
    try:
        comparison = compare_reports(EvalReport.load(args.before), EvalReport.load(args.after))
    except (OSError, ValueError) as error:
        print(f"dex-agents-ray eval compare: {error}", file=sys.stderr)
        return 2
    for change in comparison.changes:
        if args.json:
            print(
                json.dumps(
                    {"case_id": change.case_id, "change": change.change, "detail": change.detail}
                )
            )
        else:
            print(f"{change.change:10} {change.case_id}: {change.detail}")
    print(
        f"pass rate {_rate(comparison.pass_rate_before)} -> "
        f"{_rate(comparison.pass_rate_after)} over the "
        f"{len(comparison.shared_case_ids)} shared cases; "
        f"{len(comparison.regressions)} regressed, {len(comparison.improvements)} improved; "
        f"{len(comparison.added)} added, {len(comparison.removed)} removed"
    )
    return 1 if comparison.regressions else 0


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _control(command: str, argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"dex-agents-ray eval {command}",
        parents=[connection_parser(agents_required=False)],
        description=f"{command} a running eval (its driver reads the state before each case).",
    )
    parser.add_argument("run_id", help="the run")
    args = parser.parse_args(list(argv))
    try:
        status = asyncio.run(_control_run(command, args))
    except ValueError as error:
        print(f"dex-agents-ray eval {command}: {error}", file=sys.stderr)
        return 2
    print(json.dumps(status, sort_keys=True))
    return 0


async def _control_run(command: str, args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from dex_agents_ray.evals import EvalControl, RunState

    if not ray.is_initialized():
        with quiet_ray_start():
            ray.init(address=args.address or "auto", namespace=args.namespace or DEFAULT_NAMESPACE)
    control = EvalControl(args.run_id, namespace=args.namespace, create=False)
    states = {"pause": RunState.PAUSED, "resume": RunState.RUNNING, "cancel": RunState.CANCELLED}
    if command in states:
        await control.set_state(states[command])
    return await control.status()
