"""Views parse, call and render: every write goes through a service, where the rules are.

Every module that serves a URL (found through the URL resolver: function views by their
module, class-based views by their class's) and every websocket consumer module is read, and
no call in it may write through the ORM: `Model.objects….create/update/delete/…`, or
`.save()`/`.delete()` on anything (a model or a ModelForm). A view that needs a write calls
its app's `services`, which checks the organization's rules (compute enabled, roles beyond the
view's coarse check, quotas) for every way in at once.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from django.urls import get_resolver
from django.urls.resolvers import URLPattern, URLResolver

ROOT = Path(__file__).resolve().parents[2]
# Methods that write whatever they are called on.
WRITES_ANYWHERE = {"save", "delete", "bulk_create", "bulk_update", "get_or_create"}
# Methods that write when called on a manager or queryset (`….objects….update(…)`), but are
# innocent on a dict or a set.
WRITES_ON_QUERYSETS = {"create", "update", "update_or_create", "delete"}


def _patterns(patterns) -> list[URLPattern]:
    found = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            found += _patterns(pattern.url_patterns)
        else:
            found.append(pattern)
    return found


def view_modules() -> set[str]:
    modules = set()
    for pattern in _patterns(get_resolver().url_patterns):
        view = getattr(pattern.callback, "view_class", pattern.callback)
        if view.__module__.startswith("apps."):
            modules.add(view.__module__)
    consumers = ROOT.glob("apps/**/consumers.py")
    modules |= {".".join(path.relative_to(ROOT).with_suffix("").parts) for path in consumers}
    return modules


def _on_a_manager(node: ast.AST) -> bool:
    """Whether an attribute chain passes through `.objects` (a manager or its querysets)."""
    while isinstance(node, ast.Attribute | ast.Call):
        if isinstance(node, ast.Attribute) and node.attr == "objects":
            return True
        node = node.value if isinstance(node, ast.Attribute) else node.func
    return False


def writes_in(module_name: str) -> list[str]:
    path = Path(importlib.import_module(module_name).__file__)
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method = node.func.attr
        if method in WRITES_ANYWHERE or (
            method in WRITES_ON_QUERYSETS and _on_a_manager(node.func.value)
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{method}()")
    return found


def test_the_view_modules_are_found():
    modules = view_modules()
    assert {"apps.jobs.api.jobs", "apps.jobs.web.new_job", "apps.jobs.live.consumers"} <= modules
    assert "apps.billing.api" in modules and "apps.hub.protocol" in modules


def test_no_view_module_writes_through_the_orm():
    writes = [write for module in sorted(view_modules()) for write in writes_in(module)]

    assert writes == []


def test_the_check_sees_a_write(tmp_path, monkeypatch):
    """The scan is not blind: a view that saves, or updates through a manager, is caught,
    and a dict's update is not."""
    (tmp_path / "pretend_view.py").write_text(
        "def view(request, form, Job):\n"
        "    form.save()\n"
        "    Job.objects.filter(pk=1).update(name='x')\n"
        "    {}.update(a=1)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("tests.config.test_views_write_nothing.ROOT", tmp_path)

    assert writes_in("pretend_view") == ["pretend_view.py:2 .save()", "pretend_view.py:3 .update()"]
