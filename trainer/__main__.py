"""`python -m trainer`: see `trainer.cli.main`."""

from trainer.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
