"""`python -m engine`: see `engine.cli.main`."""

import os
import sys

from engine.cli import main

if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Past the interpreter's teardown: with torch loaded it takes over a second, and a stop
    # signal must end the process within one or two. Nothing is left to clean up by now.
    os._exit(code)
