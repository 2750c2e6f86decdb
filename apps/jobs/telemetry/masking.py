"""The values ingestion masks in a job's log lines, and the memory of them.

Rule: every secret value a job's runner was handed stays masked in that job's lines, even
after its secret is deleted or replaced. So:

- when the spec is served, the values handed out are added to the attempt's
  `mask_values_encrypted` (a Fernet token under SECRETS_KEYS; plaintext never reaches the
  database);
- ingestion masks with the values remembered on every attempt of the job, plus those of the
  job's `secret_env` that still resolve, each entry on its own: a deleted secret is skipped
  and never switches masking off for the others.

Maskers are cached per attempt for a minute, so a batch costs no decryption.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from django.db import transaction

from apps.core.crypto import SecretUndecryptable, decrypt_data, encrypt_data
from apps.jobs.models import Attempt, Job
from apps.secrets.selectors import resolvable_secret_values
from runner.masking import Masker

logger = logging.getLogger(__name__)


def seal(values: Iterable[str]) -> str:
    """One Fernet token of `values` (in order, without duplicates)."""
    unique = list(dict.fromkeys(values))
    return encrypt_data({str(index): value for index, value in enumerate(unique)})


def unseal(token: str | None) -> list[str]:
    """The values `seal` was given; [] for no token, or one no key in SECRETS_KEYS opens
    (logged: the values it held are masked only while their secrets still resolve)."""
    if not token:
        return []
    try:
        data = decrypt_data(token)
    except SecretUndecryptable:
        logger.warning("an attempt's mask values no longer decrypt with SECRETS_KEYS")
        return []
    return [data[key] for key in sorted(data, key=int) if isinstance(data[key], str)]


def remember_mask_values(attempt: Attempt, values: Iterable[str]) -> None:
    """Add `values` to what the attempt masks. Locks the row, so two spec fetches racing
    each other cannot drop one another's values."""
    new = [value for value in values if value]
    if not new:
        return
    with transaction.atomic():
        stored = (
            Attempt.objects.select_for_update(no_key=True)
            .filter(pk=attempt.pk)
            .values_list("mask_values_encrypted", flat=True)
            .first()
        )
        known = unseal(stored)
        if set(new) <= set(known):
            return
        Attempt.objects.filter(pk=attempt.pk).update(mask_values_encrypted=seal(known + new))


def mask_values(job: Job) -> list[str]:
    """Every value to mask in the job's lines: remembered ones and those still resolvable."""
    values: list[str] = []
    for token in Attempt.objects.filter(job=job, mask_values_encrypted__isnull=False).values_list(
        "mask_values_encrypted", flat=True
    ):
        values += unseal(token)
    secret_env = (job.spec.get("container") or {}).get("secret_env")
    if secret_env:
        values += resolvable_secret_values(organization=job.organization, secret_env=secret_env)
    return list(dict.fromkeys(values))


class _MaskerCache:
    """Maskers per attempt for a minute."""

    ttl_s = 60.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[int, tuple[float, Masker]] = {}

    def get(self, attempt: Attempt, job: Job) -> Masker:
        now = time.monotonic()
        with self._lock:
            hit = self._items.get(attempt.pk)
            if hit and now - hit[0] < self.ttl_s:
                return hit[1]
        masker = Masker(mask_values(job))
        with self._lock:
            # Expired entries go as new ones come, so a long-lived process keeps only the
            # attempts that sent lines in the last minute.
            for stale in [pk for pk, (at, _) in self._items.items() if now - at >= self.ttl_s]:
                del self._items[stale]
            self._items[attempt.pk] = (now, masker)
        return masker

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


maskers = _MaskerCache()


def secret_masker(attempt: Attempt, job: Job) -> Masker:
    return maskers.get(attempt, job)
