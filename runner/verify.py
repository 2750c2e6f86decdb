"""Run the runner bundle only when it is the control plane's, byte for byte.

`verified_argv(python, path, sha256, ARGS...)` is the command line that reads PATH once,
compares its sha256 and, when it matches, runs `python <those bytes> ARGS...` from a memfd
(`/proc/self/fd/N`): what runs is what was hashed, whatever happens to the file meanwhile
(a workload of the same user rewriting it halfway through an op). A file that is missing
or differs exits BUNDLE_MISMATCH with a line on stderr, and nothing of it runs. The exec'd
bundle finds its file's path and digest in TRAINYARD_BUNDLE / TRAINYARD_BUNDLE_SHA256 (its
reaper is started through the same check). Standard library only; the snippet itself needs
Python >= 3.8 on Linux for the memfd (without one it runs the checked file by its path).
"""

from __future__ import annotations

BUNDLE_MISMATCH = 86
ENV_BUNDLE = "TRAINYARD_BUNDLE"
ENV_BUNDLE_SHA256 = "TRAINYARD_BUNDLE_SHA256"

VERIFY = f"""\
import hashlib, os, sys
path, want = sys.argv[1], sys.argv[2]
try:
    with open(path, "rb") as f:
        data = f.read()
except OSError:
    data = b""
got = hashlib.sha256(data).hexdigest()
if got != want:
    sys.stderr.write("runner bundle %s: sha256 %s, not %s\\n" % (path, got, want))
    os._exit({BUNDLE_MISMATCH})
os.environ["{ENV_BUNDLE}"], os.environ["{ENV_BUNDLE_SHA256}"] = path, want
run = path
if hasattr(os, "memfd_create"):
    fd = os.memfd_create("trainyard-runner", 0)  # no CLOEXEC: the exec'd python reads it
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    run = "/proc/self/fd/%d" % fd
os.execv(sys.executable, [sys.executable, run] + sys.argv[3:])
"""


def verified_argv(python: str, path: str, sha256: str, *args: str) -> list[str]:
    """`python PATH ARGS...`, run only when PATH's sha256 is `sha256` (see the module)."""
    return [python, "-I", "-c", VERIFY, path, sha256, *args]
