"""Reloading the serialized rows before each `serialized_rollback` test: each model's rows in
one statement instead of two per row.

Django saves every serialized object (an UPDATE by primary key, then an INSERT): about 420
queries for the ~210 rows migrations leave (permissions, content types, the catalog's seeds),
0.13 s before each of the suite's ~330 serialized tests. Here each model's rows go in with
one INSERT ... ON CONFLICT (pk) DO UPDATE, which is what save() does row by row; a conflict
on any other unique constraint still fails, as it does in Django. Objects bulk_create would
store otherwise (many-to-many data, a parent model, an auto_now field) are saved as Django
does."""

from __future__ import annotations

from collections import defaultdict

from django.core import serializers
from django.db import transaction
from django.db.backends.postgresql import creation


class DatabaseCreation(creation.DatabaseCreation):
    def deserialize_db_from_string(self, data: str) -> None:
        from tests.postgresql.base import retried_on_deadlock

        retried_on_deadlock(lambda: self._reload(data))

    def _reload(self, data: str) -> None:
        alias = self.connection.alias
        by_model: dict[type, list] = defaultdict(list)
        one_by_one = []
        for obj in serializers.deserialize("json", data, using=alias):
            if _bulk_loadable(obj):
                by_model[type(obj.object)].append(obj)
            else:
                one_by_one.append(obj)
        table_names = set()
        with transaction.atomic(using=alias), self.connection.constraint_checks_disabled():
            for model, objs in by_model.items():
                updated = [f.name for f in model._meta.concrete_fields if not f.primary_key]
                if not updated:
                    one_by_one.extend(objs)
                    continue
                model._base_manager.using(alias).bulk_create(
                    [obj.object for obj in objs],
                    update_conflicts=True,
                    unique_fields=[model._meta.pk.name],
                    update_fields=updated,
                )
                table_names.add(model._meta.db_table)
            for obj in one_by_one:
                obj.save()
                table_names.add(obj.object._meta.db_table)
        self.connection.check_constraints(table_names=table_names)


def _bulk_loadable(obj: serializers.base.DeserializedObject) -> bool:
    """Whether bulk_create stores the object exactly as a raw save() would: no many-to-many
    data, no parent model, and no field that fills itself in on insert (auto_now)."""
    meta = obj.object._meta
    if any(obj.m2m_data.values()) or obj.deferred_fields or meta.parents:
        return False
    return not any(
        getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False)
        for field in meta.concrete_fields
    )
