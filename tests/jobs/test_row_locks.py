"""Row locks that serialise writers never block the inserts that reference the locked row:
a submit (which locks its organization's row) and a dispatch of the same organization (which
moves a counter and then inserts rows that reference the organization) both go through,
whichever takes its locks first. With FOR UPDATE instead of FOR NO KEY UPDATE, PostgreSQL
found a deadlock here and one of them answered 500."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from apps.jobs import services, writes
from apps.jobs.states import JobState
from apps.projects.models import Project
from tests.jobs.helpers import make_job

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def test_a_submit_and_a_dispatch_of_one_organization_do_not_deadlock(org):
    job = make_job(org)
    org_locked, counter_moved = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def submit() -> None:
        try:
            with transaction.atomic():
                services._check_may_submit(org)  # locks the organization's row
                org_locked.set()
                counter_moved.wait(10)
                writes.count(job, None, JobState.REQUESTED)  # waits for the dispatch
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    def dispatch() -> None:
        try:
            with transaction.atomic():
                org_locked.wait(10)
                writes.count(job, JobState.REQUESTED, JobState.ALLOCATING)
                counter_moved.set()
                # An insert that references the organization: FOR KEY SHARE on its row.
                Project.objects.create(organization=org, name="placed", slug="placed")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit), threading.Thread(target=dispatch)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert errors == []
    assert Project.objects.filter(organization=org, slug="placed").exists()
