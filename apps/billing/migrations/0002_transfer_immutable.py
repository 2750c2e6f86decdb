"""On PostgreSQL the transfer table refuses UPDATE and DELETE: a transfer, once written, is
history (a correction is a new transfer). TRUNCATE, which only a test flush uses, fires no
row trigger. SQLite, `make run`'s embedded default, goes without."""

from django.db import migrations

CREATE = """
CREATE FUNCTION billing_transfer_immutable() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'billing_transfer rows are immutable: write a correction instead'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER billing_transfer_immutable
    BEFORE UPDATE OR DELETE ON billing_transfer
    FOR EACH ROW EXECUTE FUNCTION billing_transfer_immutable();
"""
DROP = """
DROP TRIGGER IF EXISTS billing_transfer_immutable ON billing_transfer;
DROP FUNCTION IF EXISTS billing_transfer_immutable();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
