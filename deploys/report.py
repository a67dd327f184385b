"""The state document of every host, from live facts, with drift marked. Changes nothing.

pyinfra inventory/lab.py deploys/report.py   # reports/<timestamp>/<host>.md, .json, site.md
"""

from pyinfra import host

from llmhost import interrupt
from llmhost.connection import no_delay
from llmhost.report.collect import report_host

interrupt.install()
no_delay(host)  # ~6 ms a guest command instead of ~49 (llmhost/connection.py)
report_host()  # facts only: no operation, so every host reports zero changes
