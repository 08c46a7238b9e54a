"""The ``dex-agents-ray`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Run the command line interface."""
    parser = argparse.ArgumentParser(prog="dex-agents-ray")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the engine demo on the embedded default")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from dex_agents_ray.examples_demo import run_demo

        return run_demo()
    return 2


if __name__ == "__main__":
    sys.exit(main())
