"""`python -m runner`: see `runner.agent.main`."""

from runner.agent import main

if __name__ == "__main__":
    raise SystemExit(main())
