"""The serving unit's watchdog: a hung or crawling engine restarted, with the numbers that
said so, and held out when it keeps failing.

Why: vLLM's /health answers 200 while its engine hangs (vllm issues 39863 and 51663), so a
router that checks liveness keeps a hung replica in rotation; systemd restarts only a process
that exits. This loop reads the unit's own /metrics (no extra load) every --every seconds:
- **hung**: requests running or waiting while vLLM's generated-token counter has not moved for
  --hung-window seconds;
- **crawling**: at least --crawl-min-running requests running all along, and the tokens they
  got below --crawl-floor tok/s, for --crawl-for seconds (the gate's floor, served rate).
On a verdict it prints the verdict with its numbers (the journal), restarts the unit (its
ExecStopPost frees the GPUs), and writes the action to node exporter's textfile directory,
where an alert reads it. After --max-restarts restarts within --per seconds it restarts no
more: the replica is held out (its unit stopped), said once with the reason, until a deploy
starts it again. A server that does not answer is not its business (systemd and the
replica-down alert have it).

Runs on the guest with the system python3 (stdlib only), imports nothing from llmhost.

    python3 watchdog.py --unit llmhost-m.service --metrics http://127.0.0.1:8000/metrics \\
        --hung-window 15 [--crawl-floor 40 --crawl-for 180] [--textfile-dir D] [--dry-run]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

METRIC = re.compile(
    r"^(vllm:generation_tokens_total|vllm:num_requests_running|vllm:num_requests_waiting)"
    r"(\{[^}]*\})?\s+([0-9.eE+-]+)\s*$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Sample:
    at: float  # monotonic seconds
    generated: float  # vllm:generation_tokens_total, summed over its label sets
    running: float
    waiting: float

    @property
    def busy(self) -> bool:
        return self.running + self.waiting > 0


def parse_sample(text: str, at: float) -> Sample | None:
    """The three series from a /metrics text; None when the counter is not there (not vLLM,
    or still starting)."""
    sums: dict[str, float] = {}
    for m in METRIC.finditer(text):
        sums[m.group(1)] = sums.get(m.group(1), 0.0) + float(m.group(3))
    if "vllm:generation_tokens_total" not in sums:
        return None
    return Sample(
        at,
        sums["vllm:generation_tokens_total"],
        sums.get("vllm:num_requests_running", 0.0),
        sums.get("vllm:num_requests_waiting", 0.0),
    )


def covering(samples: Iterable[Sample], now: float, window_s: float) -> list[Sample] | None:
    """The samples of the last window_s, from the newest one at or before its start; None
    when the samples do not reach back that far yet."""
    kept = list(samples)
    start = now - window_s
    older = [i for i, s in enumerate(kept) if s.at <= start]
    return kept[older[-1] :] if older else None


def hung(samples: list[Sample] | deque[Sample], now: float, window_s: float) -> str | None:
    """Busy at every look of the window, and not one token generated over it."""
    window = covering(samples, now, window_s)
    if not window or not all(s.busy for s in window):
        return None
    first, last = window[0], window[-1]
    if last.generated > first.generated:
        return None
    since = first.at  # back to the first look of the stall, for the line
    for earlier in reversed([x for x in samples if x.at < first.at]):
        if not earlier.busy or earlier.generated != last.generated:
            break
        since = earlier.at
    return (
        f"hung: {last.running:.0f} running, {last.waiting:.0f} waiting, and vLLM's generated "
        f"tokens stuck at {last.generated:.0f} for {now - since:.0f} s (window {window_s:g} s)"
    )


def crawling(
    samples: Iterable[Sample], now: float, for_s: float, floor_tok_s: float, min_running: float
) -> str | None:
    """Under real load all along (min_running or more), served below the floor over for_s."""
    window = covering(samples, now, for_s)
    if not window or not all(s.running >= min_running for s in window):
        return None
    first, last = window[0], window[-1]
    elapsed = last.at - first.at
    rate = (last.generated - first.generated) / elapsed if elapsed > 0 else 0.0
    if rate >= floor_tok_s:
        return None
    return (
        f"crawling: {rate:.1f} tok/s with {min(s.running for s in window):.0f}+ running for "
        f"{elapsed:.0f} s, below the floor of {floor_tok_s:g} tok/s"
    )


@dataclass
class Rules:
    hung_window_s: float
    crawl_floor_tok_s: float | None = None  # None: no crawl rule
    crawl_for_s: float = 180.0
    crawl_min_running: float = 1.0
    max_restarts: int = 3
    per_s: float = 1800.0
    # After a restart: no verdict until the server has answered its metrics again for this
    # long (a starting engine is not hung; it has not started).
    settle_s: float = 30.0


@dataclass
class Watchdog:
    """The decisions, apart from the clock and the I/O (tested on their own)."""

    rules: Rules
    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=4096))
    restarts: list[float] = field(default_factory=list)
    held_out: str | None = None
    settled_from: float | None = None

    def look(self, sample: Sample | None, now: float) -> tuple[str, str] | None:
        """("restart" | "hold", why) when this look calls for an action, else None."""
        if self.held_out is not None:
            return None
        if sample is None:  # not answering, or starting: nothing to judge, start afresh
            self.samples.clear()
            self.settled_from = None
            return None
        if self.settled_from is None:
            self.settled_from = now
        self.samples.append(sample)
        horizon = max(self.rules.hung_window_s, self.rules.crawl_for_s) + 60
        while self.samples and self.samples[0].at < now - horizon:
            self.samples.popleft()
        if now - self.settled_from < self.rules.settle_s:
            return None
        why = hung(self.samples, now, self.rules.hung_window_s)
        if why is None and self.rules.crawl_floor_tok_s is not None:
            why = crawling(
                self.samples,
                now,
                self.rules.crawl_for_s,
                self.rules.crawl_floor_tok_s,
                self.rules.crawl_min_running,
            )
        if why is None:
            return None
        self.samples.clear()
        self.settled_from = None
        self.restarts = [t for t in self.restarts if t > now - self.rules.per_s]
        if len(self.restarts) >= self.rules.max_restarts:
            self.held_out = (
                f"{why}; restarted {len(self.restarts)} times in the last "
                f"{self.rules.per_s:g} s already: held out (unit stopped) until a deploy starts it"
            )
            return "hold", self.held_out
        self.restarts.append(now)
        return "restart", why


def read_metrics(url: str, timeout_s: float = 3.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - our server
            return resp.read().decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - not answering: not judged
        return None


def textfile(unit: str, kind: str, why: str, counts: dict[str, int], held: bool) -> str:
    """node exporter's textfile lines for this unit's watchdog."""
    name = unit.replace('"', "")
    lines = [
        "# HELP llmhost_watchdog_actions_total Restarts and holds by llmhost's watchdog.",
        "# TYPE llmhost_watchdog_actions_total counter",
    ]
    lines += [
        f'llmhost_watchdog_actions_total{{unit="{name}",action="{a}"}} {n}'
        for a, n in sorted(counts.items())
    ]
    lines += [
        "# HELP llmhost_watchdog_held_out 1 while the watchdog holds the unit out.",
        "# TYPE llmhost_watchdog_held_out gauge",
        f'llmhost_watchdog_held_out{{unit="{name}"}} {1 if held else 0}',
        "# TYPE llmhost_watchdog_last_action_timestamp_seconds gauge",
        f'llmhost_watchdog_last_action_timestamp_seconds{{unit="{name}",action="{kind}",'
        f'reason="{why.split(":", 1)[0]}"}} {time.time():.0f}',
    ]
    return "\n".join(lines) + "\n"


def write_textfile(directory: str, unit: str, text: str) -> None:
    path = os.path.join(directory, f"llmhost-watchdog-{unit}.prom")
    with open(path + ".tmp", "w") as out:
        out.write(text)
    os.replace(path + ".tmp", path)


def run(
    args: argparse.Namespace,
    fetch: Callable[[], str | None],
    act: Callable[[list[str]], int],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    looks: int | None = None,
) -> Watchdog:
    """The loop: a look every args.every seconds (`looks`: that many, for tests)."""
    rules = Rules(
        hung_window_s=args.hung_window,
        crawl_floor_tok_s=args.crawl_floor,
        crawl_for_s=args.crawl_for,
        crawl_min_running=args.crawl_min_running,
        max_restarts=args.max_restarts,
        per_s=args.per,
        settle_s=args.settle,
    )
    dog, counts = Watchdog(rules), {"restart": 0, "hold": 0}
    print(
        f"watchdog of {args.unit}: hung after {rules.hung_window_s:g} s without a token"
        + (
            f", crawling below {rules.crawl_floor_tok_s:g} tok/s for {rules.crawl_for_s:g} s"
            if rules.crawl_floor_tok_s is not None
            else ""
        )
        + f"; at most {rules.max_restarts} restarts in {rules.per_s:g} s"
        + (" (dry run: says, does nothing)" if args.dry_run else ""),
        flush=True,
    )
    n = 0
    while looks is None or n < looks:
        n += 1
        now = clock()
        text = fetch()
        decision = dog.look(parse_sample(text, now) if text else None, now)
        if decision is not None:
            kind, why = decision
            counts[kind] += 1
            verb = "restarting" if kind == "restart" else "stopping"
            print(f"watchdog: {args.unit} {why}: {verb} it", flush=True)
            if not args.dry_run:
                rc = act(["systemctl", "restart" if kind == "restart" else "stop", args.unit])
                if rc != 0:
                    print(f"watchdog: systemctl {verb} {args.unit} failed (exit {rc})", flush=True)
            if args.textfile_dir:
                text_out = textfile(args.unit, kind, why, counts, dog.held_out is not None)
                write_textfile(args.textfile_dir, args.unit, text_out)
        sleep(args.every)
    return dog


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--unit", required=True)
    p.add_argument("--metrics", required=True, help="the unit's /metrics URL")
    p.add_argument("--hung-window", type=float, required=True, help="seconds without a token")
    p.add_argument("--crawl-floor", type=float, default=None, help="tok/s; no crawl rule if unset")
    p.add_argument("--crawl-for", type=float, default=180.0)
    p.add_argument("--crawl-min-running", type=float, default=1.0)
    p.add_argument("--max-restarts", type=int, default=3)
    p.add_argument("--per", type=float, default=1800.0, help="the restarts' window, seconds")
    p.add_argument("--settle", type=float, default=30.0, help="seconds after it answers again")
    p.add_argument("--every", type=float, default=2.0)
    p.add_argument("--textfile-dir", default=None)
    p.add_argument("--dry-run", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def act(argv: list[str]) -> int:
        return subprocess.run(argv, check=False).returncode

    try:
        run(args, lambda: read_metrics(args.metrics), act)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
