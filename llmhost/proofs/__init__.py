"""The proofs as plain Python: correctness, the load sweep, the gate, the draft A/B.

Why apart from `operations/`: a proof is a function of a server and its settings, not of
pyinfra's state. Here nothing imports pyinfra, so a unit test calls a proof directly and the
operations that run one (operations/verify.py) stay thin adapters. What a proof needs from
its host comes in as plain callables (`base.Shell` runs a command on the guest, `base.Log`
prints a line). Each proof returns an immutable verdict (`base.Verdict`; readiness's is
`readiness.Readiness`); a failed one raises `base.ProofFailed` carrying its verdict, with the
numbers that failed it in the message.
"""
