"""The proofs as plain Python: correctness, the load sweep, the gate, the draft A/B.

Why apart from `operations/`: a proof is a function of a server and its settings, not of
pyinfra's state. Here nothing imports pyinfra, so a unit test calls a proof directly and the
operations that run one (operations/verify.py) stay thin adapters. What a proof needs from
its host comes in as plain callables (`base.Shell` runs a command on the guest, `base.Log`
prints a line); a failed proof raises `base.ProofFailed` with the numbers that failed it.
"""
