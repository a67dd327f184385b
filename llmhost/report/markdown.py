"""The state document as Markdown: one table per section, drift marked in bold."""

from __future__ import annotations

from typing import Any


def cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def section_md(section: dict[str, Any]) -> list[str]:
    lines = [f"## {section['title']}", ""]
    for note in section.get("notes", []):
        lines += [f"_{note}_", ""]
    rows = section.get("rows", [])
    if rows:
        with_wanted = any("wanted" in r for r in rows)
        head = ["what", "wanted", "actual", ""] if with_wanted else ["what", "actual"]
        head = section.get("columns", head)
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows:
            mark = "**DRIFT**" if r.get("drift") else r.get("note", "")
            values = [r["item"], r.get("wanted", ""), r.get("actual", ""), mark]
            lines.append(
                "| "
                + " | ".join(
                    cell(v) for v in (values if with_wanted else [r["item"], r.get("actual", "")])
                )
                + " |"
            )
        lines.append("")
    if section.get("text"):
        lines += ["```", section["text"], "```", ""]
    for plot in section.get("plots_in_report", []):
        lines += [f"![{plot}]({plot})", ""]
    return lines


def host_md(doc: dict[str, Any]) -> str:
    drift = doc["drift"]
    lines = [
        f"# {doc['host']}: {doc['role']}",
        "",
        f"State document written by llmhost (`deploys/report.py`) at {doc['generated']}, from "
        "live facts. Nothing on the host was changed to write it.",
        "",
        f"**Drift: {len(drift)} item(s)**" if drift else "**No drift.**",
        "",
        *(f"- {d}" for d in drift),
        "",
    ]
    for section in doc["sections"]:
        lines += section_md(section)
    return "\n".join(lines).rstrip() + "\n"


def site_md(site: dict[str, Any]) -> str:
    lines = [
        f"# Site state ({site['inventory']})",
        "",
        f"Written at {site['generated']}.",
        "",
        "| host | role | summary | drift |",
        "|---|---|---|---|",
    ]
    for h in site["hosts"]:
        drift = f"**{h['drift']}**" if h["drift"] else "none"
        lines.append(
            f"| [{h['host']}]({h['file']}) | {h['role']} | {cell(h['summary'])} | {drift} |"
        )
    return "\n".join(lines) + "\n"
