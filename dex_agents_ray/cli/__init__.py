"""The ``dex-agents-ray`` command."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line interface; returns the exit status."""
    rest = list(sys.argv[1:] if argv is None else argv)
    if rest[:1] == ["eval"]:
        # ``eval`` parses its own flags (``eval compare A B`` and the like).
        from dex_agents_ray.cli._eval import run_eval_command

        return run_eval_command(rest[1:])
    parser = argparse.ArgumentParser(
        prog="dex-agents-ray", description="Durable AI-agent sessions on Ray."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demos = {
        "demo": "a support-agent session: a read tool, an approved write, a host crash "
        "mid-write (scripted model unless OPENAI_API_KEY is set)",
        "control-demo": "turn control: a user steers a running turn, then stops one "
        "waiting for approval",
        "engine-demo": "the engine alone: a fan-out to Ray tasks, a durable timer, a host crash",
    }
    for name, help_text in demos.items():
        demo = sub.add_parser(name, help=help_text)
        demo.add_argument(
            "--store",
            default=None,
            help="SQLite file of the runs (default: ./.dex-agents-ray/engine.db)",
        )
    from dex_agents_ray.cli._serve import add_serve_parser

    add_serve_parser(sub)
    from dex_agents_ray.cli._sessions import add_sessions_parser

    add_sessions_parser(sub)
    from dex_agents_ray.cli._eval import add_eval_parser

    add_eval_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "eval":
        from dex_agents_ray.cli._eval import run_eval_command

        return run_eval_command(args.rest)
    if args.command == "sessions":
        from dex_agents_ray.cli._sessions import run_sessions

        return run_sessions(args)
    if args.command == "serve":
        from dex_agents_ray.cli._serve import run_serve

        return run_serve(args)
    if args.command == "demo":
        from dex_agents_ray.cli._session_demo import run_session_demo

        return run_session_demo(store=args.store)
    if args.command == "control-demo":
        from dex_agents_ray.cli._control_demo import run_control_demo

        return run_control_demo(store=args.store)
    if args.command == "engine-demo":
        from dex_agents_ray.cli._demo import run_demo

        return run_demo(store=args.store)
    return 2


if __name__ == "__main__":
    sys.exit(main())
