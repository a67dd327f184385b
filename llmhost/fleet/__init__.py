"""The fleet engine: router membership, a replica's drain, the rolling order of a switch.

Plain Python with no pyinfra import, like proofs/ and switch/: what reaches a router or a
replica is handed in (a RouterControl, callables), so unit tests run it against fakes and the
site command wires it to real hosts (llmhost/site_roll.py).
"""
