"""`llmhost` command line: the sandbox guest and local model builds, for the embedded default."""

from __future__ import annotations

import argparse
import json
import sys

from llmhost import sandbox


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmhost", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sbx = sub.add_parser("sandbox", help="the local Debian 12 LXC guest")
    sbx.add_argument("action", choices=["up", "down", "status", "reboot"])
    args = parser.parse_args(argv)
    try:
        if args.command == "sandbox":
            if args.action == "up":
                sandbox.up()
            elif args.action == "down":
                sandbox.down()
            elif args.action == "reboot":
                sandbox.reboot()
            else:
                print(json.dumps(sandbox.status(), indent=2))
    except sandbox.SandboxError as exc:
        print(f"llmhost: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
