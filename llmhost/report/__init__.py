"""The state document: what a host is, built from live facts, with drift marked.

`deploys/report.py` gathers read-only facts on every host (facts.py), turns them and the
host's group_data into sections (sections.py, pure, tested on real captures), and writes
Markdown and JSON per host plus a site summary under reports/<timestamp>/ (write.py).
Secrets never reach it: env files are masked on the guest before they are read.
"""
