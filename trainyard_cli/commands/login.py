"""`trainyard login`: check a URL and key with whoami, then store them (0600)."""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from trainyard_cli import config, output
from trainyard_cli.client import Client, UsageError

KEY_SOURCES = "a prompt (on a terminal), --api-key-stdin, or TRAINYARD_API_KEY"


def read_key(args: argparse.Namespace) -> str:
    """The key from stdin (`--api-key-stdin`), the environment, or a prompt on a terminal;
    never from argv, which `ps` and shell history show."""
    if args.api_key_stdin:
        return sys.stdin.readline().strip()
    key = os.environ.get(config.KEY_ENV, "").strip()
    if key:
        return key
    if sys.stdin.isatty():
        return getpass.getpass("API key: ").strip()
    raise UsageError(f"No API key given: stdin is not a terminal; use {KEY_SOURCES}.")


def run(args: argparse.Namespace, transport=None) -> int:
    if args.api_key is not None:
        raise UsageError(
            f"--api-key is not accepted (the key would show in `ps` and shell history): give "
            f"it through {KEY_SOURCES}."
        )
    url = args.url or os.environ.get(config.URL_ENV, "")
    if not url:
        raise UsageError("Give the control plane's address with --url (or TRAINYARD_URL).")
    url = config.normalise_url(url, insecure=args.insecure)
    key = read_key(args)
    if not key:
        raise UsageError(f"No API key given ({KEY_SOURCES}).")
    settings = config.Settings(url=url, api_key=key, insecure=args.insecure)
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
