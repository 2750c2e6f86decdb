"""`python -m trainyard_cli`, for when the console script is not on PATH."""

from trainyard_cli.main import main

main()
