"""Why a job is where it is, in words for people. `Job.reason` stays the stable code the API
returns (`exit_code_1`, `no_capacity`, …); pages show `reason_text(code)` and keep the code
on hover."""

from __future__ import annotations

import re

_WORDS = {
    "cancelled": "Terminated by a user.",
    "terminated": "Terminated.",
    "max_runtime": "Stopped at its maximum runtime.",
    "max_cost": "Stopped at its maximum cost.",
    "budget_exhausted": "Stopped because the organization's or project's budget ran out.",
    "no_capacity": "No provider had the requested hardware free in time.",
    "dispatch_crash": "Placing the job failed again and again; the control plane gave up.",
    "heartbeat_lost": "The workload stopped reporting (its host or network went away).",
    "lost": "The provider lost the workload (its host or batch job went away).",
    "workload_lost": "The workload vanished without reporting how it ended.",
    "launch_failed": "The provider could not start the workload.",
    "image_pull_failed": "The job's image could not be pulled (see the message below).",
    "out_of_memory": "The workload ran out of memory and was killed.",
    "queue_timeout": "It waited in the provider's own queue for too long.",
    "secret_missing": "A secret the job uses was deleted before it started.",
    "secret_undecryptable": "A secret the job uses can no longer be decrypted (its key is gone).",
    "spec_invalid": "Its configuration could not be run (see the message below).",
    "workdir_invalid": "Its code archive could not be unpacked.",
    "too_many_preemptions": "It was preempted too many times.",
    "reclaimed": "The provider reclaimed its hardware.",
    "preempted": "Displaced by a higher-priority job.",
    "idle": "Stopped after being idle.",
    "grading_failed": "The adapter trained, but its held-out loss did not improve enough to pass.",
}
_EXIT_CODE = re.compile(r"^exit_code_(-?\d+)$")
_SIGNALS = {137: "killed (SIGKILL, often out of memory)", 143: "stopped by SIGTERM"}


def reason_text(code: str | None) -> str:
    """`exit_code_1` → "The workload exited with code 1."; an unknown code is shown as
    itself, so a new reason is never hidden."""
    if not code:
        return ""
    if code in _WORDS:
        return _WORDS[code]
    match = _EXIT_CODE.match(code)
    if match:
        exit_code = int(match.group(1))
        extra = f": {_SIGNALS[exit_code]}" if exit_code in _SIGNALS else ""
        return f"The workload exited with code {exit_code}{extra}."
    return code.replace("_", " ").capitalize() + "."
