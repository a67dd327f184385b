"""`llmhost` command line: the site in two runs; the sandbox test bed of the embedded default."""

from __future__ import annotations

import argparse
import json
import sys

from pydantic import SecretStr

from llmhost.testbed import sandbox


def ask_api_key() -> SecretStr | None:
    """`llmhost ask`'s key: $LLMHOST_API_KEY when set, else the sandbox's key file, else none."""
    from llmhost.proofs.readiness import api_key_from_env

    key = api_key_from_env()
    if key is not None:
        return key
    try:
        value = sandbox.api_key()
    except OSError:  # no sandbox key file (yet): ask without a key
        return None
    return SecretStr(value) if value else None


def ask_sandbox(prompt: str, port: int, max_tokens: int) -> int:
    """Prove the demo end to end: readiness, then one chat completion, both printed."""
    import requests

    from llmhost.proofs.readiness import auth_headers, probe_once, unauthorized

    state = sandbox.load_state()
    base = f"http://{state.ip}:{port}"
    headers = auth_headers(ask_api_key())
    listing = requests.get(f"{base}/v1/models", headers=headers, timeout=10)
    if listing.status_code in (401, 403):
        print(
            f"llmhost: {base}/v1/models {unauthorized(listing.status_code, headers)}; "
            f"llmhost ask sends $LLMHOST_API_KEY, else the key in {sandbox.API_KEY_FILE}",
            file=sys.stderr,
        )
        return 1
    served = listing.json()["data"][0]["id"]
    ready = probe_once(base, served, headers=headers)
    print(f"readiness of {served} at {base}: {'OK' if ready.ready else 'FAILED'} - {ready.detail}")
    if not ready.ready:
        return 1
    resp = requests.post(
        f"{base}/v1/chat/completions",
        json={
            "model": served,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
        },
        headers=headers,
        timeout=120,
    )
    resp.raise_for_status()
    body = resp.json()
    print(f"prompt: {prompt}")
    print(
        f"completion ({body['usage']['completion_tokens']} tokens, random-weight model): "
        f"{body['choices'][0]['message']['content']!r}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmhost", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sbx = sub.add_parser("sandbox", help="the local Debian 12 LXC guest")
    sbx.add_argument(
        "action", choices=["up", "down", "status", "reboot", "forget-failed", "test-start"]
    )
    pve = sub.add_parser("standin", help="a container standing in for a Proxmox host")
    pve.add_argument("action", choices=["up", "down", "reset"])
    fleet = sub.add_parser(
        "replica", help="the sandbox fleet's second serving guest, a copy of the first"
    )
    fleet.add_argument("action", choices=["up", "down"])
    ask = sub.add_parser(
        "ask",
        help="send one chat message to the sandbox's served model (API key: $LLMHOST_API_KEY, "
        "else the sandbox's key file)",
    )
    ask.add_argument("prompt")
    ask.add_argument("--port", type=int, default=8000)
    ask.add_argument("--max-tokens", type=int, default=32)
    site = sub.add_parser(
        "site",
        help="the site in two pyinfra runs: Proxmox hosts first (stopped guests started), then "
        "deploys/site.py with the given pyinfra options (llmhost/site_run.py)",
    )
    site.add_argument("inventory")
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "site":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "sandbox":
            if args.action == "up":
                sandbox.up()
            elif args.action == "down":
                sandbox.down()
            elif args.action == "reboot":
                sandbox.reboot()
            elif args.action == "forget-failed":
                sandbox.forget_failed_switch()
            elif args.action == "test-start":
                from llmhost.testbed import suite_start

                suite_start.prepare()
            else:
                print(json.dumps(sandbox.status(), indent=2))
        elif args.command == "standin":
            from llmhost.testbed import standin

            {"up": standin.up, "down": standin.down, "reset": standin.reset}[args.action]()
        elif args.command == "replica":
            from llmhost.testbed import replica

            {"up": replica.up, "down": replica.down}[args.action]()
        elif args.command == "site":
            from llmhost.site_run import run_site

            return run_site(args.inventory, rest)
        elif args.command == "ask":
            return ask_sandbox(args.prompt, args.port, args.max_tokens)
    except sandbox.SandboxError as exc:
        print(f"llmhost: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
