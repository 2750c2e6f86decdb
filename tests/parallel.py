"""How the suite runs on several pytest-xdist workers (`make test`: `-n 3 --dist loadgroup`).

Each worker has its own Redis database, var directory and test database
(`config/test_settings.py`, pytest-django) and boots its own live stack on free ports. What
cannot be had twice at once is shared by *group*, and groups follow fixtures, not test
files, so a new test that uses `slurm_cluster` or `podman_image` lands in the right group without
knowing about this:

- a shared daemon or resource: the fixtures in FIXTURE_GROUPS, and the `make run` modules
  (127.0.0.1:8000 and Redis db 14);
- a module- or package-scoped fixture (a trainer's runs, an engine per module): the tests
  of that module stay on one worker, or the fixture would be built on each;
- a test that needs two of these joins them into one group.

Grouped units go first, longest-known first, so they start at once; every other test is a
unit of its own.

`--durations=30` prints the slowest; `var/test-times.tsv` keeps every test's wall time and
CPU seconds: this process, its reaped children, the live stack's processes, and (where the
cgroup v1 cpuacct hierarchy is writable, as for root here) the whole process tree the worker
started, reaped or not (`cpu_tree_s`: a trainer forked from a zygote, a Chromium, a runner
still running count for the test that was running when they used the CPU)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.live import ROOT

# Fixture -> group: shared daemons, fixed ports, one engine per run. (Chromium is one per
# module: `browser` is module-scoped, so a browser module is a unit of its own.)
FIXTURE_GROUPS = {
    "slurm_cluster": "slurm",
    "slurm_provider": "slurm",
    "podman_image": "podman",
    "trainer_image": "podman",
    "engine": "engine",
    "served": "engine",
}
# Fixture -> marker, for `make test-fast` (-m "not live and not torch").
FIXTURE_MARKERS = {
    "stack": "live",
    "live_stack": "live",
    "slurm_cluster": "live",
    "sshd": "live",
    "kube_cluster": "live",
    "podman_image": "live",
    "browser": "live",
    "tiny_model": "torch",
    "tiny_adapters": "torch",
    "trainer_image": "torch",
}
# Modules that listen on 127.0.0.1:8000 and use Redis db 14, whatever fixtures they take.
PATH_GROUPS = {
    "tests/integration/test_make_run.py": "make_run",
}
# Longest first (measured): they start at t=0 on their own workers.
GROUP_ORDER = ("slurm", "make_run", "podman", "engine")

TIMES = ROOT / "var" / "test-times"
REGISTRY = ROOT / "var" / "test-workers"


def _find(parent: dict[str, str], key: str) -> str:
    while parent.setdefault(key, key) != key:
        key = parent[key]
    return key


def _keys(item: pytest.Item) -> set[str]:
    """The groups this test needs to share, before joining."""
    keys = {group for name, group in FIXTURE_GROUPS.items() if name in item.fixturenames}
    path = item.nodeid.split("::", 1)[0]
    if path in PATH_GROUPS:
        keys.add(PATH_GROUPS[path])
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for name in item.fixturenames:
        fixturedefs = defs.get(name)
        # The suite's own fixtures (a plugin's, like pytest-django's, cost nothing twice).
        if not fixturedefs or not fixturedefs[-1].func.__module__.startswith("tests."):
            continue
        scope = fixturedefs[-1].scope
        if scope in ("module", "class"):
            keys.add(f"module:{path}")
        elif scope == "package":
            keys.add(f"package:{fixturedefs[-1].baseid}")
    return keys


def assign_groups(items: list[pytest.Item]) -> dict[str, str]:
    """Mark each test that must share with `xdist_group(<name>)`; nodeid -> group name for
    those that got one."""
    parent: dict[str, str] = {}
    needs = {}
    for item in items:
        keys = sorted(_keys(item))
        needs[item.nodeid] = keys
        for key in keys:
            parent[_find(parent, key)] = _find(parent, keys[0])
    # A group's name is its best-known member (slurm over module:...).
    members = defaultdict(set)
    for key in parent:
        members[_find(parent, key)].add(key)
    names = {}
    for root, keys in members.items():
        named = [k for k in GROUP_ORDER if k in keys] or sorted(keys)
        names[root] = named[0]
    groups = {}
    for item in items:
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in item.fixturenames:
                item.add_marker(marker)
        if needs[item.nodeid]:
            group = names[_find(parent, needs[item.nodeid][0])]
            groups[item.nodeid] = group
            item.stash[GROUP_KEY] = group
            item.add_marker(pytest.mark.xdist_group(group))
    return groups


GROUP_KEY = pytest.StashKey[str]()


def _rank(item: pytest.Item) -> tuple[int, int]:
    group = item.stash.get(GROUP_KEY, None)
    if group is None:
        return (2, 0)
    if group in GROUP_ORDER:
        return (0, GROUP_ORDER.index(group))
    return (1, 0)


class Order:
    """The final order, after pytest-django's (trylast). Under xdist, `loadgroup` hands out
    work units in collection order, so the grouped units come first, the longest first: a
    long group handed out last would run on after every other worker had finished."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]):
        if hasattr(config, "workerinput"):
            items.sort(key=_rank)  # stable: collection order within each rank
            if config.getvalue("loadgroup"):
                _suffix_groups(items)


def _suffix_groups(items: list[pytest.Item]) -> None:
    """What xdist's loadgroup does to a grouped test's id (`<nodeid>@<group>`, its work unit),
    done here: xdist 3.8 sets `item._nodeid`, which pytest 9.2 no longer reads (the id is
    `item._id`), so its own suffix is lost and every test would be a unit of its own."""
    from _pytest.nodeid import coerce_node_id

    for item in items:
        group = item.stash.get(GROUP_KEY, None)
        if group is not None and not item.nodeid.endswith(f"@{group}"):
            item._id = coerce_node_id(f"{item.nodeid}@{group}")


# -- per-test wall and CPU time ------------------------------------------------------------


def _stack_cpu(stack: object) -> float:
    """CPU seconds of every process in the live stack's process groups (celery's pool
    children are not reaped until the stack stops, so RUSAGE_CHILDREN misses them)."""
    groups = {proc.popen.pid for proc in getattr(stack, "procs", {}).values() if proc.popen}
    if not groups:
        return 0.0
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in groups:  # pgrp
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class ProcessTreeCpu:
    """CPU of this process and everything it starts from now on, by a cpuacct cgroup of
    its own (children inherit it); `read()` is None where there is no such hierarchy or it
    cannot be written."""

    def __init__(self, name: str) -> None:
        self.folder: Path | None = None
        folder = CPUACCT / name
        try:
            folder.mkdir(exist_ok=True)
            (folder / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            return
        self.folder = folder

    def read(self) -> float | None:
        if self.folder is None:
            return None
        try:
            return int((self.folder / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        """Back to the parent group; the folder goes once its last process has ended (a
        daemon left running keeps it, and the next run's name differs)."""
        if self.folder is None:
            return
        try:
            (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
            self.folder.rmdir()
        except OSError:
            pass


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def _worker(config: pytest.Config) -> str:
    return getattr(config, "workerinput", {}).get("workerid", "main")


def run_id() -> str:
    """This run's id: made by the controller (or a serial run) before workers start, and
    inherited by them, so concurrent runs in one tree keep their records apart."""
    return os.environ.setdefault("TRAINYARD_TEST_RUN", f"{int(time.time())}-{os.getpid()}")


class TimingRecorder:
    """Appends `nodeid, wall, cpu_self, cpu_children, cpu_stack, cpu_tree` (seconds, setup
    to teardown; cpu_tree empty where unmeasured) per test to
    var/test-times/<run>/<worker>.tsv; the controller merges them into var/test-times.tsv,
    slowest first, at the end of the run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.folder = TIMES / run_id()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / f"{_worker(config)}.tsv"
        self.path.write_text("")
        self.tree = ProcessTreeCpu(f"trainyard-tests-{run_id()}-{_worker(config)}")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        wall = time.monotonic()
        own, children = _cpu()
        stack_before = _stack_cpu(item.session.config.stash.get(STACK_KEY, None))
        tree_before = self.tree.read()
        try:
            return (yield)
        finally:
            stack = item.session.config.stash.get(STACK_KEY, None)
            own_after, children_after = _cpu()
            tree_after = self.tree.read()
            tree = "" if tree_before is None or tree_after is None else tree_after - tree_before
            row = (
                item.nodeid,
                time.monotonic() - wall,
                own_after - own,
                children_after - children,
                max(0.0, _stack_cpu(stack) - stack_before),
            )
            with open(self.path, "a") as out:
                values = [f"{value:.3f}" for value in row[1:]]
                values.append(tree if tree == "" else f"{tree:.3f}")
                out.write("\t".join([row[0], *values]) + "\n")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.tree.close()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):
            return
        # The guard, for what workers took after the guard test ran (a live stack's port).
        folder = REGISTRY / run_id()
        held = {path.stem: json.loads(path.read_text()) for path in folder.glob("*.json")}
        clashes = shared(held)
        if clashes:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            print("\nworkers shared what each must hold alone:\n  " + "\n  ".join(clashes))
        shutil.rmtree(folder, ignore_errors=True)
        rows = []
        for path in self.folder.glob("*.tsv"):
            for line in path.read_text().splitlines():
                rows.append((path.stem, *line.split("\t")))
        shutil.rmtree(self.folder, ignore_errors=True)
        rows.sort(key=lambda row: -float(row[2]))
        header = "worker\tnodeid\twall_s\tcpu_self_s\tcpu_children_s\tcpu_stack_s\tcpu_tree_s\n"
        body = "".join("\t".join(row) + "\n" for row in rows)
        (ROOT / "var" / "test-times.tsv").write_text(header + body)


STACK_KEY = pytest.StashKey[object]()


# -- what each worker holds, for the guard test ---------------------------------------------


def register(config: pytest.Config, **resources: object) -> Path | None:
    """Record what this worker holds under var/test-workers/<run>/<worker>.json (merged with
    what it recorded before); None outside xdist."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    path = REGISTRY / run_id() / f"{workerinput['workerid']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    held = json.loads(path.read_text()) if path.exists() else {}
    for name, value in resources.items():
        held.setdefault(name, [])
        if value not in held[name]:
            held[name].append(value)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(held))
    temporary.replace(path)
    return path


def registrations(config: pytest.Config) -> dict[str, dict[str, list]]:
    """worker -> what it recorded, for this xdist run (a worker only)."""
    folder = REGISTRY / run_id()
    return {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}


def shared(held: dict[str, dict[str, list]]) -> list[str]:
    """Each resource that two workers hold, as `<kind> <value>: gw0, gw1`."""
    owners: dict[tuple[str, str], set[str]] = defaultdict(set)
    for worker, resources in held.items():
        for kind, values in resources.items():
            for value in values:
                owners[(kind, str(value))].add(worker)
    return [
        f"{kind} {value}: {', '.join(sorted(workers))}"
        for (kind, value), workers in sorted(owners.items())
        if len(workers) > 1
    ]
