"""What the CLI prints is the API's text as it is: a value with brackets (a Python list
comprehension in a command, a job named `run [2]`) is never read as rich's markup."""

from trainyard_cli import output

COMMAND = "import json; [print(json.dumps({'loss': 1/s})) for s in range(1, 4)]"


def test_tables_and_fields_print_bracketed_values_verbatim(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")

    rows = [["container.command", ["python", "-c", COMMAND]]]
    output.table("Differences", ["setting", "a"], rows)
    output.fields([("name", "run [2]"), ("tag", "[bold]not bold[/bold]")])

    printed = capsys.readouterr().out
    assert COMMAND in printed
    assert "run [2]" in printed
    assert "[bold]not bold[/bold]" in printed
