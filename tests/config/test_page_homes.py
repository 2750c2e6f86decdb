"""Every page lives in one app: its view's module and the templates that view renders.

A template lives under the folder of the app whose code renders it (`apps/finetunes/...`
renders `finetunes/...`; a Django admin view of an app renders `admin/<app>/...`), so a
newcomer who finds a page's view knows where its template is, and the reverse. How it is
checked, and why this way:

- Template names are read from the source (`ast`), not from rendering pages: a render needs
  data for every page and misses the branches a test does not reach (an error page, a 429).
  A name is read where code names a template: the template argument of `TemplateResponse`,
  `render`, `render_to_string`, `get_template` and `select_template`, a `template_name=`
  keyword, and class attributes named `template_name` or `*_template` (a New Job form's
  `section_template`, included by the page; an admin's `change_list_template`). A name
  built at runtime must start with a literal folder or a module constant
  (`f"jobs/partials/{name}"`, `f"{DETAIL}#{part}"`); one that does not fails here, so no
  template escapes the check by being computed.
- Every URL pattern is resolved to its view (decorators unwrapped, class-based views by
  their class), so a page served from outside `apps/` fails, and so does one whose class
  inherits a template from another app. Django's own views (the admin's model pages, the
  logout view) render Django's templates and are left alone.
- The map in `docs/architecture.md` is read back: each row's URL name, view and templates
  must exist, and the view must be the one that URL resolves to.
- Every module under `apps/` is read too: helpers that render partials for live pushes are
  not URL views, but their templates follow the same rule.

Known exceptions would be listed in `EXCEPTIONS`, each with its reason.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from django.urls import NoReverseMatch, URLPattern, URLResolver, get_resolver, reverse

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "apps"
TEMPLATES = ROOT / "templates"

# Calls that take a template name, and the position of that argument.
RENDER_CALLS = {
    "TemplateResponse": 1,
    "SimpleTemplateResponse": 1,
    "render": 1,
    "render_to_string": 0,
    "get_template": 0,
    "select_template": 0,
}

# Known exceptions, each with its reason (none today: a page that shows another app's page
# calls that app's view function, as billing calls `accounts.views.no_organization`).
EXCEPTIONS: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Named:
    """A template named in `path` at `line`; `name` None when it cannot be read statically."""

    path: Path
    line: int
    name: str | None

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def app_of(path: Path) -> str:
    return path.relative_to(APPS).parts[0]


def allowed_folders(app: str) -> tuple[str, ...]:
    return (f"{app}/", f"admin/{app}/")


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "string"` assignments."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def _value(node: ast.expr, constants: dict[str, str]) -> str | None:
    """The template name, or its leading part for a name built at runtime."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.JoinedStr) and node.values:
        return _value(node.values[0], constants)
    if isinstance(node, ast.FormattedValue):
        return _value(node.value, constants)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _value(node.left, constants)
    if isinstance(node, ast.List | ast.Tuple) and node.elts:
        return _value(node.elts[0], constants)
    return None


def _is_self_attribute(node: ast.expr) -> bool:
    # `self.template_name`: the class attribute is itself read as a site.
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _is_template_attribute(name: str) -> bool:
    return name == "template_name" or name.endswith("_template")


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and func.attr != "render":  # `template.render(ctx)`
        return func.attr
    return None


def templates_named_in(path: Path) -> list[Named]:
    tree = ast.parse(path.read_text(), filename=str(path))
    constants = _constants(tree)
    found: list[Named] = []
    for node in ast.walk(tree):
        argument: ast.expr | None = None
        if isinstance(node, ast.Call):
            position = RENDER_CALLS.get(_call_name(node) or "")
            keywords = {k.arg: k.value for k in node.keywords}
            if "template_name" in keywords:
                argument = keywords["template_name"]
            elif position is not None and len(node.args) > position:
                argument = node.args[position]
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                if (
                    isinstance(statement, ast.Assign)
                    and len(statement.targets) == 1
                    and isinstance(statement.targets[0], ast.Name)
                    and _is_template_attribute(statement.targets[0].id)
                ):
                    found.append(Named(path, statement.lineno, _value(statement.value, constants)))
        if argument is not None and not _is_self_attribute(argument):
            found.append(Named(path, node.lineno, _value(argument, constants)))
    return found


def misplaced(named: Named, app: str) -> str | None:
    """Why `named` breaks the rule for a module of `app`, or None."""
    if named.name is None:
        return f"{named.where()}: name the template with a literal (or a module constant)"
    if (app, named.name) in EXCEPTIONS:
        return None
    if not named.name.startswith(allowed_folders(app)):
        return f"{named.where()}: {named.name} is rendered by {app}; put it in templates/{app}/"
    return None


def app_modules() -> list[Path]:
    return sorted(p for p in APPS.rglob("*.py") if "migrations" not in p.parts)


def url_patterns(resolver: URLResolver | None = None) -> Iterator[URLPattern]:
    for entry in (resolver or get_resolver()).url_patterns:
        if isinstance(entry, URLResolver):
            yield from url_patterns(entry)
        else:
            yield entry


def view_of(pattern: URLPattern) -> tuple[Path | None, list[str]]:
    """The file of the pattern's view (None outside our code), and the template names its
    class declares at runtime (inherited ones too, and `as_view(template_name=...)`)."""
    callback = pattern.callback
    names: list[str] = []
    view_class = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    for source in (getattr(callback, "view_initkwargs", None) or {}, view_class):
        name = (
            source.get("template_name")
            if isinstance(source, dict)
            else getattr(source, "template_name", None)
        )
        if isinstance(name, str):
            names.append(name)
    target = view_class or inspect.unwrap(callback)
    try:
        path = Path(inspect.getfile(target)).resolve()
    except TypeError:
        return None, names
    return path, names


def view_name(pattern: URLPattern) -> str:
    """`module.qualname` of the pattern's view (its class for a class-based view)."""
    callback = pattern.callback
    target = getattr(callback, "view_class", None) or inspect.unwrap(callback)
    return f"{target.__module__}.{target.__qualname__}"


def test_every_url_of_ours_is_served_by_a_view_in_an_app():
    """A page view in `config/` (or anywhere but `apps/<app>/`) would belong to no app."""
    strays = []
    for pattern in url_patterns():
        path, _ = view_of(pattern)
        if path is None or not path.is_relative_to(ROOT) or ".venv" in path.parts:
            continue
        if not path.is_relative_to(APPS):
            strays.append(f"{pattern.name or pattern.pattern}: {path.relative_to(ROOT)}")
    # `config.schema` serves the OpenAPI schema: an API document, not a page.
    assert [s for s in strays if not s.endswith("config/schema.py")] == []


def test_every_page_renders_templates_of_the_app_its_view_lives_in():
    """A view module's templates are read whole: its views share helpers and a module is
    one app's. Each problem is named once, with the first URL whose view module has it."""
    problems: dict[str, str] = {}
    pages = 0
    for pattern in url_patterns():
        path, declared = view_of(pattern)
        if path is None or not path.is_relative_to(APPS):
            continue
        pages += 1
        app = app_of(path)
        for named in templates_named_in(path) + [Named(path, 0, n) for n in declared]:
            if why := misplaced(named, app):
                problems.setdefault(why, f"{why} (serves {pattern.name})")
    assert pages > 50  # the walk reached the site's views
    assert list(problems.values()) == []


def test_every_template_named_in_apps_lies_in_its_apps_folder_and_exists():
    """Helpers (live partials, admin views) as well as page views; a name that is a literal
    must name a template that exists (a partial's `#name` after the file is ignored)."""
    problems, missing = [], []
    for path in app_modules():
        for named in templates_named_in(path):
            if why := misplaced(named, app_of(path)):
                problems.append(why)
            elif named.name and ".html" in named.name:
                file = named.name.partition("#")[0]
                missing += [] if (TEMPLATES / file).is_file() else [f"{named.where()}: {file}"]
    assert problems == []
    assert missing == []


def test_each_template_folder_belongs_to_an_app():
    apps = {p.name for p in APPS.iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in TEMPLATES.iterdir() if p.is_dir()}
    assert folders - apps - {"admin"} == set()
    assert {p.name for p in (TEMPLATES / "admin").iterdir()} <= apps


def test_the_rule_catches_a_page_rendering_another_apps_template(tmp_path):
    """The reader itself: a finetunes view rendering `projects/…` is caught, by literal and by
    constant, and a name computed from nothing readable is refused."""
    module = APPS / "finetunes" / "_probe_not_a_module.py"
    source = (
        'LIST = "projects/dataset_list.html"\n'
        "def a(request):\n"
        '    return TemplateResponse(request, "projects/dataset_detail.html", {})\n'
        "def b(request):\n"
        '    return render_to_string(f"{LIST}", {})\n'
        "def c(request, name):\n"
        "    return render(request, name)\n"
        "def d(request):\n"
        '    return TemplateResponse(request, "finetunes/dataset_list.html")\n'
    )
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    named = [Named(module, n.line, n.name) for n in templates_named_in(probe)]
    verdicts = {n.line: misplaced(n, "finetunes") for n in named}
    assert sorted(verdicts) == [3, 5, 7, 9]
    assert "projects/dataset_detail.html is rendered by finetunes" in verdicts[3]
    assert "projects/dataset_list.html is rendered by finetunes" in verdicts[5]
    assert "name the template with a literal" in verdicts[7]
    assert verdicts[9] is None


def _stale_url_name(name: str) -> bool:
    try:
        reverse(name)
    except NoReverseMatch as error:  # arguments missing is fine; an unknown name is not
        return "not a valid view function or pattern name" in str(error) or (
            "not a registered namespace" in str(error)
        )
    return False


def _importable(dotted: str) -> bool:
    """`accounts.views.home` or `billing.admin.AccountAdmin.grant_view`, under `apps.`."""
    parts = f"apps.{dotted}".split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            target = import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def test_the_map_in_docs_names_real_urls_views_and_templates():
    """`docs/architecture.md`'s "Where each page lives": a row whose URL name, view or
    template has gone stale fails here, so the map a newcomer reads first stays right."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## Where each page lives", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) >= 20
    served_by: dict[str, set[str]] = {}
    for pattern in url_patterns():
        if pattern.name:
            served_by.setdefault(pattern.name, set()).add(view_name(pattern))
    stale = []
    for row in rows:
        url_name, _, view, templates = (cell.strip() for cell in row.strip("|").split("|"))
        if _stale_url_name(url_name.strip("`")):
            stale.append(f"no URL named {url_name}")
        if not _importable(view.strip("`")):
            stale.append(f"no view {view}")
        served = served_by.get(url_name.strip("`"), {f"apps.{view.strip('`')}"})
        if f"apps.{view.strip('`')}" not in served:
            stale.append(f"{url_name} is served by {sorted(served)}, not {view}")
        for name in re.findall(r"`([^`]+\.html)`", templates):
            if not (TEMPLATES / name).is_file():
                stale.append(f"no template {name}")
    assert stale == []
