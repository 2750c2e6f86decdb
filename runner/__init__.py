"""The Trainyard runner: the agent that runs inside the workload's environment.

Standard library only, Python 3.9 or newer: it must run wherever `python3` runs, next to a
user's training code, with nothing installed. `python -m runner` is its entry point; the
contract it implements is `docs/runner-protocol.md`, and `runner.protocol` that contract's
names, numbers and message shapes as code.
"""
