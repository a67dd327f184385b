"""Switching the served model, as plain Python: the plan (plan.py), the stages a switch goes
through and which may follow which (stages.py), and the guard that holds one host's switch
in flight, rolls it back and writes its record (guard.py).

Why apart from `operations/`: the switch's rules and its rollback are decisions, not pyinfra
operations. Nothing here imports pyinfra; operations/switch.py runs the steps through it,
handing the guard a shell and a logger bound to its host.
"""
