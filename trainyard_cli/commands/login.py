"""`trainyard login`: check a URL and key with whoami, then store them (0600)."""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from trainyard_cli import config, output
from trainyard_cli.client import Client, UsageError


def run(args: argparse.Namespace, transport=None) -> int:
    url = args.url or os.environ.get(config.URL_ENV, "")
    if not url:
        raise UsageError("Give the control plane's address with --url (or TRAINYARD_URL).")
    url = config.normalise_url(url)
    key = args.api_key or os.environ.get(config.KEY_ENV, "")
    if not key:
        if not sys.stdin.isatty():
            key = sys.stdin.readline().strip()
        else:
            key = getpass.getpass("API key: ").strip()
    if not key:
        raise UsageError("No API key given (--api-key, TRAINYARD_API_KEY, or on stdin).")
    settings = config.Settings(url=url, api_key=key)
    client = Client(settings, transport=transport)
    try:
        who = client.get_json("/api/v1/whoami")
    finally:
        client.close()
    path = config.save(settings)
    if args.json:
        output.print_json(who)
    else:
        organization = who["organization"]
        output.info(
            f"Logged in to {url} as {who.get('principal')} of {organization['name']} "
            f"({organization['slug']}, role {who.get('role')}). Saved to {path}."
        )
        if not organization.get("compute_enabled"):
            output.info("Note: compute is not enabled for this organization yet.")
    return 0
