"""The state document of every host, from live facts, with drift marked. Changes nothing.

pyinfra inventory/lab.py deploys/report.py   # reports/<timestamp>/<host>.md, .json, site.md
"""

from llmhost import interrupt
from llmhost.report.collect import report_host

interrupt.install()
report_host()  # facts only: no operation, so every host reports zero changes
