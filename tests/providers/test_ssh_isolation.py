"""One organization's attempt on an SSH host cannot reach the next one's (T3-3), against the
real sshd on loopback: a runner bundle a workload wrote over is found by its sha256 and
replaced before anything runs it, the attempt's directory is gone at release, and with
`isolation: users` two organizations' attempts run as two Unix users of their own, made and
removed by the root helper (runner/attempt_user.py, installed as an operator would)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest
from django.utils import timezone

from apps.jobs.models import Attempt
from apps.providers.backends import single_tenant
from apps.providers.backends.bundle import bundle_name, runner_bundle
from apps.providers.backends.ssh import SshBackend
from apps.providers.models import Provider
from runner import procfs
from tests.factories import OrganizationFactory
from tests.live import wait_until
from tests.providers.helpers import launch_args, reachable_by_everyone

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

HELPER_SOURCE = Path(__file__).resolve().parents[2] / "runner" / "attempt_user.py"


def _launch(live_server, command: list[str]):
    org = OrganizationFactory(compute_enabled=True)
    backend, request, bootstrap, attempt = launch_args(
        org, image="local", control_url=live_server.url, command=command
    )
    handle = backend.launch(request, bootstrap)
    # The control plane's record: launched (a dispatcher of a live stack leaves it alone).
    Attempt.objects.filter(pk=attempt.pk).update(handle=handle, launched_at=timezone.now())
    return backend, request, handle


def _started(request) -> bool:
    return Attempt.objects.filter(job__public_id=request.job_id, started_at__isnull=False).exists()


def _far(provider: Provider) -> Path:
    return Path(provider.config["work_dir"])


def test_a_bundle_a_workload_overwrote_never_runs_and_its_planted_files_are_gone(
    ssh_provider, live_server, tmp_path
):
    """Single-tenant, no isolation: org A's workload (the SSH user itself) writes over the
    runner bundle and plants files; org B's launch finds the bundle changed, replaces it
    and runs the real one; A's attempt directory was deleted at its release."""
    bundle = _far(ssh_provider) / "bin" / bundle_name()
    ran = tmp_path / "tampered-bundle-ran"
    evil = f"open({str(ran)!r}, 'w').write('ran')"
    plant = (
        f"printf '%s\\n' \"{evil}\" > {bundle}; echo mine > planted; "
        "mkdir -p ../.cache && echo mine > ../.cache/planted; echo planted"
    )
    backend, first, handle = _launch(live_server, ["sh", "-c", plant])
    # Watched here, not through the backend: any op of it would find and replace the bundle.
    gone = lambda: not procfs.alive(handle["pid"], handle["start_ticks"])  # noqa: E731
    wait_until(gone, 60, what="A's runner done")
    tampered = bundle.read_bytes()
    assert tampered != runner_bundle()  # the workload did write over it
    attempt_dir = Path(handle["workdir"])
    assert len(list(attempt_dir.rglob("planted"))) == 2
    backend.release(handle)  # the release op itself runs only a bundle that checks out
    # A's attempt ends (the host is single-tenant: B's is placed only then).
    Attempt.objects.filter(job__public_id=first.job_id).update(ended_at=timezone.now())
    assert not attempt_dir.exists()
    assert not list(_far(ssh_provider).rglob("planted"))
    assert not ran.exists()
    bundle.write_bytes(tampered)  # as a process of A's that outlived its release would

    backend, second, handle = _launch(live_server, ["sh", "-c", "echo fine"])
    try:
        wait_until(lambda: _started(second), 60, what="B's runner's started report")
        wait_until(lambda: backend.poll(handle).state == "exited", 60, what="B's workload")
        assert backend.poll(handle).exit_code == 0
        assert bundle.read_bytes() == runner_bundle()  # B's launch replaced it first
        assert not ran.exists()  # what A wrote never ran, for B or for any op
    finally:
        backend.release(handle)


def test_without_isolation_the_provider_stays_single_tenant_whatever_multi_tenant_says():
    assert SshBackend.single_tenant({"multi_tenant": True})
    assert SshBackend.single_tenant({"isolation": "users"})
    assert not SshBackend.single_tenant({"isolation": "users", "multi_tenant": True})


@pytest.fixture
def isolated_provider(ssh_provider, tmp_path) -> Provider:
    """The SSH provider with `isolation: users`, multi-tenant, and the root helper installed
    root-owned as the operator would (`install -m 0755`)."""
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    helper = sbin / "trainyard-attempt-user"
    shutil.copyfile(HELPER_SOURCE, helper)
    helper.chmod(0o755)
    far = _far(ssh_provider)
    far.mkdir(parents=True, exist_ok=True)
    reachable_by_everyone(far)  # attempt users pass through the far work directory
    ssh_provider.config = {
        **ssh_provider.config,
        "isolation": "users",
        "multi_tenant": True,
        "attempt_user_helper": str(helper),
    }
    ssh_provider.save()
    assert not single_tenant(ssh_provider)
    return ssh_provider


def test_two_organizations_attempts_run_as_two_users_that_cannot_touch_the_runner(
    isolated_provider, sshd, live_server
):
    far = _far(isolated_provider)
    bundle = far / "bin" / bundle_name()
    attack = (
        f"(printf evil > {bundle}) 2>/dev/null; (echo evil > {far}/intruder) 2>/dev/null; "
        "(cat ~root/.ssh/authorized_keys) 2>/dev/null; sleep 30"
    )
    backend, first, a = _launch(live_server, ["sh", "-c", attack])
    _, second, b = _launch(live_server, ["sleep", "30"])
    users = [a["user"], b["user"]]
    try:
        wait_until(lambda: _started(first) and _started(second), 60, what="both runners")
        uids = [os.stat(f"/proc/{handle['pid']}").st_uid for handle in (a, b)]
        assert uids == [pwd.getpwnam(user).pw_uid for user in users]
        assert len(set(uids)) == 2 and 0 not in uids and os.getuid() not in uids
        for handle, uid in zip((a, b), uids, strict=True):
            members = procfs.group_members(handle["pgid"])
            assert len(members) >= 2  # the runner and its workload, both the attempt's uid
            assert {os.stat(f"/proc/{pid}").st_uid for pid in members} == {uid}
            run = Path(handle["run"])
            assert (run.stat().st_uid, run.stat().st_mode & 0o7777) == (uid, 0o2750)
        assert backend.poll(a).state == "running"
        assert bundle.read_bytes() == runner_bundle()  # the workload could not write it
        assert not (far / "intruder").exists()
    finally:
        for handle in (a, b):
            backend.release(handle)
    for handle, user in zip((a, b), users, strict=True):
        assert not Path(handle["workdir"]).exists()
        with pytest.raises(KeyError):
            pwd.getpwnam(user)  # the attempt's user is gone with it
        assert not procfs.group_members(handle["pgid"])


def test_terminate_ends_every_process_of_the_attempts_user(isolated_provider, live_server):
    backend, request, handle = _launch(
        live_server, ["sh", "-c", "setsid sleep 300 & trap '' TERM; sleep 300"]
    )
    uid = None
    try:
        wait_until(lambda: _started(request), 60, what="the runner")
        uid = pwd.getpwnam(handle["user"]).pw_uid
        backend.terminate(handle, 1.0)
        wait_until(lambda: backend.poll(handle).state != "running", 30, what="the runner gone")

        # Even the one that left the group (setsid) and the one that ignores SIGTERM.
        wait_until(lambda: not _processes_of(uid), 30, what="every process of its user gone")
    finally:
        backend.release(handle)


OPERATOR = "trainyard-op"


@pytest.fixture
def unprivileged_operator(isolated_provider, sshd, tmp_path):
    """The provider's SSH user is an unprivileged operator account whose only privilege is
    the sudoers line docs/adding-a-provider.md gives: the root helper, nothing else."""
    helper = isolated_provider.config["attempt_user_helper"]
    home = tmp_path / "operator-home"
    subprocess.run(
        ["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh", OPERATOR],
        check=True,
    )
    subprocess.run(["usermod", "-p", "*", OPERATOR], check=True)  # not locked: sshd lets it in
    sudoers = Path(f"/etc/sudoers.d/trainyard-test-{os.getpid()}")
    sudoers.write_text(f"{OPERATOR} ALL=(root) NOPASSWD: {helper}\n")
    sudoers.chmod(0o440)
    far = _far(isolated_provider)
    entry = pwd.getpwnam(OPERATOR)
    os.chown(far, entry.pw_uid, entry.pw_gid)
    reachable_by_everyone(home)
    # sshd reads the (shared) authorized_keys file as the user logging in.
    reachable_by_everyone(sshd.directory)
    (sshd.directory / "authorized_keys").chmod(0o644)
    isolated_provider.config = {**isolated_provider.config, "user": OPERATOR}
    isolated_provider.save()
    try:
        yield entry
    finally:
        sudoers.unlink()
        subprocess.run(["userdel", "--force", OPERATOR], check=False)


def test_an_unprivileged_ssh_user_runs_attempts_as_their_own_users_through_sudo(
    unprivileged_operator, isolated_provider, live_server
):
    """The production shape: hostctl runs as the operator, every privileged step goes
    through `sudo -n` to the helper. The exit record is still read, terminate and release
    still reach every process of the attempt's user, and nothing is left."""
    far = _far(isolated_provider)
    backend, _, done = _launch(live_server, ["sh", "-c", "echo hi; exit 3"])
    _, second, live = _launch(live_server, ["sh", "-c", "setsid sleep 300 & sleep 300"])
    try:
        result = wait_until(
            lambda: (r := backend.poll(done)).state == "exited" and r, 60, what="the exit"
        )
        assert result.exit_code == 3  # read through the run directory's group
        wait_until(lambda: _started(second), 60, what="the second runner")
        uid = pwd.getpwnam(live["user"]).pw_uid
        assert uid not in (0, unprivileged_operator.pw_uid)
        assert (far / "bin").stat().st_uid == unprivileged_operator.pw_uid
        backend.terminate(live, 1.0)
        wait_until(lambda: not _processes_of(uid), 30, what="every process of the attempt")
    finally:
        for handle in (done, live):
            backend.release(handle)
    for handle in (done, live):
        assert not Path(handle["workdir"]).exists()
        with pytest.raises(KeyError):
            pwd.getpwnam(handle["user"])


def _processes_of(uid: int) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                found.append(int(pid))
        except OSError:
            continue
    return found
