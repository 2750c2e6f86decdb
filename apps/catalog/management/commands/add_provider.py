"""`manage.py add_provider KIND NAME [options]`: add an SSH host, a Slurm cluster or a
Kubernetes cluster.

The connection is tested first (the host key must match the pinned one, the key must be
accepted, `sinfo` must answer; Kubernetes: the API server answers, the namespace exists and
the kubeconfig's identity has every right the backend needs), and nothing is saved when it
fails: the message says what to fix. The provider gets one offer per accelerator its backend
reports (GPUs found with `nvidia-smi -L`, a cluster's allocatable GPUs, else `--slots` cpu
slots) at `--price-usd-hr` per GPU or slot hour.

    manage.py add_provider ssh gpu-box-1 --host 10.0.0.5 --user ops \\
        --host-key "ssh-ed25519 AAAA..." --private-key-file ~/.ssh/trainyard --price-usd-hr 1.20
    manage.py add_provider slurm campus --partition gpu --account ml --work-dir /shared/ty \\
        --price-usd-hr 0.80
    manage.py add_provider kubernetes gpu-cluster --kubeconfig ~/.kube/config \
        --context prod --namespace trainyard --accelerator nvidia-h100-80gb --price-usd-hr 2.10

`--config '{"key": ...}'` sets any other backend key (docs/adding-a-provider.md lists them).
The private key and the kubeconfig are stored encrypted and write-only; never printed.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from apps.catalog.services import provider_add
from apps.core.errors import ApiError
from apps.core.money import format_usd, usd_to_micros

# Options that become config keys when given: option name -> config key.
CONFIG_OPTIONS = {
    "host": "host",
    "port": "port",
    "user": "user",
    "host_key": "host_key",
    "work_dir": "work_dir",
    "python": "python",
    "workload_pythonpath": "pythonpath",
    "slots": "slots",
    "accelerator": "accelerator",
    "partition": "partition",
    "account": "account",
    "slurm_conf": "slurm_conf",
    "login": "login",
    "context": "context",
    "namespace": "namespace",
}


class Command(BaseCommand):
    help = (
        "Add an SSH host, a Slurm cluster or a Kubernetes cluster as a compute provider "
        "(tested before it is saved)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("kind", choices=["ssh", "slurm", "kubernetes"])
        parser.add_argument("name", help="the provider's name (a slug)")
        parser.add_argument("--price-usd-hr", required=True, help="price per GPU or slot hour")
        parser.add_argument("--host")
        parser.add_argument("--port", type=int)
        parser.add_argument("--user")
        parser.add_argument("--host-key", help="the host's public key, as in known_hosts")
        parser.add_argument("--private-key-file", help="the SSH private key to log in with")
        parser.add_argument("--work-dir", help="where attempts' work directories go there")
        parser.add_argument("--python", help="the interpreter there (default python3)")
        parser.add_argument(
            "--workload-pythonpath", help="PYTHONPATH for workloads there (config pythonpath)"
        )
        parser.add_argument("--slots", type=int, help="capacity when the host has no GPUs")
        parser.add_argument("--accelerator", help="catalog accelerator name (default cpu)")
        parser.add_argument("--partition")
        parser.add_argument("--account")
        parser.add_argument("--slurm-conf", help="SLURM_CONF for the Slurm commands")
        parser.add_argument("--login", help="Slurm: an SSH login node (JSON of ssh keys)")
        parser.add_argument("--kubeconfig", help="Kubernetes: the kubeconfig file to use")
        parser.add_argument("--context", help="Kubernetes: the kubeconfig context")
        parser.add_argument("--namespace", help="Kubernetes: where Jobs go (default default)")
        parser.add_argument("--config", default="{}", help="more backend keys, as JSON")
        parser.add_argument("--no-check", action="store_true", help="save without testing")

    def handle(self, *args, kind: str, name: str, **options) -> None:
        config = _config(options)
        credentials = {}
        for option, key in (("private_key_file", "private_key"), ("kubeconfig", "kubeconfig")):
            if options[option]:
                try:
                    credentials[key] = Path(options[option]).expanduser().read_text()
                except OSError as exc:
                    flag = "--" + option.replace("_", "-")
                    raise CommandError(f"cannot read {flag}: {exc.strerror}") from exc
        if kind == "kubernetes" and "kubeconfig" not in credentials:
            raise CommandError("a kubernetes provider needs --kubeconfig FILE")
        price = _micros(options["price_usd_hr"])
        try:
            added = provider_add(
                name=name,
                kind=kind,
                config=config,
                credentials=credentials,
                price_micros_hr=price,
                check=not options["no_check"],
            )
        except ApiError as exc:
            raise CommandError(str(exc.detail)) from exc
        for line in added.found:
            self.stdout.write(f"  {line}")
        for offer in added.offers:
            self.stdout.write(
                f"Offer: {offer.accelerator.name} x{offer.capacity} at "
                f"{format_usd(offer.price_per_gpu_hour_micros)}/h"
            )
        self.stdout.write(f"Added {kind} provider {name}.")


def _config(options: dict) -> dict:
    try:
        config = json.loads(options["config"])
    except ValueError as exc:
        raise CommandError(f"--config is not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise CommandError("--config must be a JSON object.")
    for option, key in CONFIG_OPTIONS.items():
        value = options.get(option)
        if value is not None:
            config[key] = json.loads(value) if option == "login" else value
    return config


def _micros(usd: str) -> int:
    try:
        amount = Decimal(usd)
    except InvalidOperation as exc:
        raise CommandError(f"--price-usd-hr must be a number of dollars, not {usd!r}.") from exc
    micros = usd_to_micros(amount) if amount.is_finite() else None
    if micros is None or micros < 0:
        raise CommandError("--price-usd-hr must be 0 or more.")
    return micros
