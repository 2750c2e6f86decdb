"""`trainyard`: the command line of a Trainyard control plane.

It talks to the public HTTP API only (`/api/v1/...`, with an API key), like any user's script
would, so it imports nothing of the server: the standard library, httpx and rich. An
import-linter contract in pyproject.toml keeps it that way.
"""

__version__ = "0.1.0"
