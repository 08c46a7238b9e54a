"""The ``dex-agents-ray`` command."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line interface; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="dex-agents-ray", description="Durable AI-agent sessions on Ray."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="run the engine demo on the embedded default (local Ray, SQLite)"
    )
    demo.add_argument(
        "--store",
        default=None,
        help="SQLite file of the run (default: ./.dex-agents-ray/engine.db)",
    )
    args = parser.parse_args(argv)
    if args.command == "demo":
        from dex_agents_ray.cli._demo import run_demo

        return run_demo(store=args.store)
    return 2


if __name__ == "__main__":
    sys.exit(main())
