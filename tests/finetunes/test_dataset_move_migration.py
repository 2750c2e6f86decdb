"""The Dataset model moved from `projects` to `finetunes` (finetunes 0001-0002, projects 0004):
a database built by the earlier migrations, with datasets in it, keeps every row and file
going forward, and going back."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.finetunes.models import Dataset
from tests.factories import ProjectFactory, UserFactory

BEFORE_THE_MOVE = [("projects", "0003_dataset_sha256"), ("finetunes", None)]


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return MigrationExecutor(connection)  # a fresh loader sees the new history


def _leaf() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT public_id, name, file, dataset_format, rows, size_bytes, sha256, project_id"
            " FROM projects_dataset ORDER BY id"
        )
        return cursor.fetchall()


def _dataset_content_type() -> tuple[str, int]:
    row = ContentType.objects.filter(model="dataset").values_list("app_label", "id").get()
    return row[0], row[1]


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_move_keeps_rows_files_and_content_type_forward_and_back():
    leaf = _leaf()
    project = ProjectFactory()
    user = UserFactory()
    executor = _migrate(BEFORE_THE_MOVE)
    old_apps = executor.loader.project_state([BEFORE_THE_MOVE[0]]).apps
    OldDataset = old_apps.get_model("projects", "Dataset")
    path = default_storage.save("datasets/migration-test/rows.jsonl", ContentFile(b'{"x": 1}\n'))
    for n in range(3):
        OldDataset.objects.create(
            project_id=project.pk,
            name=f"set {n}",
            file=path,
            dataset_format="alpaca",
            rows=n + 1,
            size_bytes=9,
            sha256="ab" * 32,
            uploaded_by_id=user.pk,
        )
    label, content_type_id = _dataset_content_type()
    assert label == "projects"
    permission_ids = set(
        Permission.objects.filter(content_type_id=content_type_id).values_list("id", flat=True)
    )
    before = _rows()

    _migrate(leaf)

    assert _rows() == before
    assert _dataset_content_type() == ("finetunes", content_type_id)
    assert (
        set(Permission.objects.filter(content_type_id=content_type_id).values_list("id", flat=True))
        == permission_ids
    )
    moved = list(Dataset.objects.order_by("id"))
    assert [d.name for d in moved] == ["set 0", "set 1", "set 2"]
    assert moved[0].project_id == project.pk and moved[0].uploaded_by_id == user.pk
    with moved[0].file.open("rb") as stored:
        assert stored.read() == b'{"x": 1}\n'

    _migrate([("finetunes", None)])

    assert _rows() == before
    assert _dataset_content_type() == ("projects", content_type_id)

    _migrate(leaf)
    assert _rows() == before
    default_storage.delete(path)
