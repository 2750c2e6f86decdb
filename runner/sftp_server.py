"""An SFTP server (version 3, draft-ietf-secsh-filexfer-02) on stdin/stdout, for shell
sessions into a job whose image has no `sftp-server` of its own (`runner.shell_spawn`).

    python3 -m runner.sftp_server        # or: python3 runner-….pyz sftp_server

It serves what OpenSSH's `sftp` and `scp` (which speaks SFTP since OpenSSH 9) ask for:
files (open, read, write, close, stat, setstat), directories (list, make, remove),
remove, rename, links, realpath, and the OpenSSH extensions posix-rename, statvfs,
fstatvfs, hardlink, fsync and limits. It runs as whoever started it, with the rights of
that user, and resolves relative paths against its working directory. Errors carry the
errno's SSH_FX_* status and its message. Standard library only; paths are bytes as the
file system has them.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
import struct
import sys
import time
from collections.abc import Callable

VERSION = 3
INIT, VERSION_REPLY, OPEN, CLOSE, READ, WRITE, LSTAT, FSTAT = 1, 2, 3, 4, 5, 6, 7, 8
SETSTAT, FSETSTAT, OPENDIR, READDIR, REMOVE, MKDIR, RMDIR = 9, 10, 11, 12, 13, 14, 15
REALPATH, STAT, RENAME, READLINK, SYMLINK = 16, 17, 18, 19, 20
STATUS, HANDLE, DATA, NAME, ATTRS, EXTENDED, EXTENDED_REPLY = 101, 102, 103, 104, 105, 200, 201

FX_OK, FX_EOF, FX_NO_SUCH_FILE, FX_PERMISSION_DENIED, FX_FAILURE = 0, 1, 2, 3, 4
FX_BAD_MESSAGE, FX_OP_UNSUPPORTED = 5, 8

ATTR_SIZE, ATTR_UIDGID, ATTR_PERMISSIONS, ATTR_ACMODTIME = 0x1, 0x2, 0x4, 0x8
ATTR_EXTENDED = 0x80000000

FXF_READ, FXF_WRITE, FXF_APPEND, FXF_CREAT, FXF_TRUNC, FXF_EXCL = 1, 2, 4, 8, 0x10, 0x20

MAX_READ_BYTES = 256 * 1024  # the most one READ answers
MAX_WRITE_BYTES = 256 * 1024
MAX_PACKET_BYTES = MAX_WRITE_BYTES + 1024  # a request over this ends the session
MAX_HANDLES = 1024
READDIR_BATCH = 100
SIX_MONTHS_S = 182 * 24 * 3600

EXTENSIONS = (
    (b"posix-rename@openssh.com", b"1"),
    (b"statvfs@openssh.com", b"2"),
    (b"fstatvfs@openssh.com", b"2"),
    (b"hardlink@openssh.com", b"1"),
    (b"fsync@openssh.com", b"1"),
    (b"limits@openssh.com", b"1"),
)

_NO_SUCH_FILE = {errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP}
_DENIED = {errno.EPERM, errno.EACCES, errno.EFAULT}
_BAD_MESSAGE = {errno.ENAMETOOLONG, errno.EINVAL}


class BadMessage(Exception):
    """A request that cannot be parsed."""


class Status(Exception):
    """An answer of SSH_FXP_STATUS other than the errno's."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- wire format ---------------------------------------------------------------------------


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def _take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise BadMessage("the request is cut short")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def u8(self) -> int:
        return self._take(1)[0]

    def u32(self) -> int:
        return struct.unpack(">I", self._take(4))[0]

    def u64(self) -> int:
        return struct.unpack(">Q", self._take(8))[0]

    def string(self) -> bytes:
        return self._take(self.u32())

    def attrs(self) -> dict:
        flags = self.u32()
        attrs: dict = {}
        if flags & ATTR_SIZE:
            attrs["size"] = self.u64()
        if flags & ATTR_UIDGID:
            attrs["uid"], attrs["gid"] = self.u32(), self.u32()
        if flags & ATTR_PERMISSIONS:
            attrs["mode"] = self.u32()
        if flags & ATTR_ACMODTIME:
            attrs["atime"], attrs["mtime"] = self.u32(), self.u32()
        if flags & ATTR_EXTENDED:
            for _ in range(self.u32()):
                self.string()
                self.string()
        return attrs


def u32(value: int) -> bytes:
    return struct.pack(">I", value & 0xFFFFFFFF)


def u64(value: int) -> bytes:
    return struct.pack(">Q", max(0, value))


def string(value: bytes) -> bytes:
    return u32(len(value)) + value


def encode_attrs(st: os.stat_result | None) -> bytes:
    if st is None:
        return u32(0)
    flags = ATTR_SIZE | ATTR_UIDGID | ATTR_PERMISSIONS | ATTR_ACMODTIME
    return (
        u32(flags)
        + u64(st.st_size)
        + u32(st.st_uid)
        + u32(st.st_gid)
        + u32(st.st_mode)
        + u32(int(st.st_atime))
        + u32(int(st.st_mtime))
    )


def longname(name: bytes, st: os.stat_result) -> bytes:
    """The `ls -l` line OpenSSH's sftp prints for a listed entry."""
    when = time.localtime(st.st_mtime)
    recent = abs(time.time() - st.st_mtime) < SIX_MONTHS_S
    date = time.strftime("%b %e %H:%M" if recent else "%b %e  %Y", when)
    line = (
        f"{stat.filemode(st.st_mode)} {st.st_nlink:>3} {_user(st.st_uid):<8} "
        f"{_group(st.st_gid):<8} {st.st_size:>8} {date} "
    )
    return line.encode() + name


_names: dict[tuple[str, int], str] = {}


def _user(uid: int) -> str:
    if ("u", uid) not in _names:
        try:
            _names["u", uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _names["u", uid] = str(uid)
    return _names["u", uid]


def _group(gid: int) -> str:
    if ("g", gid) not in _names:
        try:
            _names["g", gid] = grp.getgrgid(gid).gr_name
        except KeyError:
            _names["g", gid] = str(gid)
    return _names["g", gid]


def status_of(exc: OSError) -> int:
    code = exc.errno or 0
    if code in _NO_SUCH_FILE:
        return FX_NO_SUCH_FILE
    if code in _DENIED:
        return FX_PERMISSION_DENIED
    if code in _BAD_MESSAGE:
        return FX_BAD_MESSAGE
    if code == errno.ENOSYS:
        return FX_OP_UNSUPPORTED
    return FX_FAILURE


# -- the server ----------------------------------------------------------------------------


class _Dir:
    def __init__(self, path: bytes, names: list[bytes]) -> None:
        self.path = path
        self.names = names


class Server:
    """Answers requests read from `inp` on `out` (file descriptors) until EOF."""

    def __init__(self, inp: int = 0, out: int = 1) -> None:
        self.inp = inp
        self.out = out
        self.handles: dict[bytes, int | _Dir] = {}
        self._next_handle = 0
        self.calls: dict[int, Callable[[Reader], bytes]] = {
            OPEN: self.open,
            CLOSE: self.close,
            READ: self.read,
            WRITE: self.write,
            LSTAT: lambda r: self.attrs_of(os.lstat(r.string())),
            STAT: lambda r: self.attrs_of(os.stat(r.string())),
            FSTAT: lambda r: self.attrs_of(os.fstat(self.fd(r.string()))),
            SETSTAT: self.setstat,
            FSETSTAT: self.fsetstat,
            OPENDIR: self.opendir,
            READDIR: self.readdir,
            REMOVE: lambda r: self.done(os.unlink(r.string())),
            MKDIR: self.mkdir,
            RMDIR: lambda r: self.done(os.rmdir(r.string())),
            REALPATH: self.realpath,
            RENAME: self.rename,
            READLINK: lambda r: self.name(os.readlink(r.string())),
            SYMLINK: self.symlink,
            EXTENDED: self.extended,
        }

    def serve(self) -> int:
        """0 at the client's EOF, 1 on a broken packet stream."""
        while True:
            head = self._read_exactly(4)
            if not head:
                return 0
            size = struct.unpack(">I", head)[0]
            if not 0 < size <= MAX_PACKET_BYTES:
                sys.stderr.write(f"sftp-server: a packet of {size} bytes; giving up\n")
                return 1
            body = self._read_exactly(size)
            if len(body) < size:
                return 1
            self._send(self.answer(body))

    def answer(self, body: bytes) -> bytes:
        kind, reader = body[0], Reader(body[1:])
        if kind == INIT:
            reply = bytes([VERSION_REPLY]) + u32(VERSION)
            return reply + b"".join(string(name) + string(data) for name, data in EXTENSIONS)
        try:
            request_id = reader.u32()
        except BadMessage:
            return _status(0, FX_BAD_MESSAGE, "no request id")
        call = self.calls.get(kind)
        if call is None:
            return _status(request_id, FX_OP_UNSUPPORTED, f"unsupported request {kind}")
        try:
            kind_and_payload = call(reader)
        except Status as exc:
            return _status(request_id, exc.code, str(exc))
        except BadMessage as exc:
            return _status(request_id, FX_BAD_MESSAGE, str(exc))
        except OSError as exc:
            return _status(request_id, status_of(exc), exc.strerror or str(exc))
        return kind_and_payload[:1] + u32(request_id) + kind_and_payload[1:]

    # Each call answers its reply's type byte and payload; the request id goes in between.

    def done(self, _: object = None) -> bytes:
        return bytes([STATUS]) + u32(FX_OK) + string(b"Success") + string(b"")

    def attrs_of(self, st: os.stat_result) -> bytes:
        return bytes([ATTRS]) + encode_attrs(st)

    def name(self, path: bytes) -> bytes:
        return bytes([NAME]) + u32(1) + string(path) + string(path) + encode_attrs(None)

    def open(self, r: Reader) -> bytes:
        path, pflags, attrs = r.string(), r.u32(), r.attrs()
        access = pflags & (FXF_READ | FXF_WRITE)
        flags = {FXF_READ: os.O_RDONLY, FXF_WRITE: os.O_WRONLY}.get(access, os.O_RDWR)
        for bit, flag in (
            (FXF_APPEND, os.O_APPEND),
            (FXF_CREAT, os.O_CREAT),
            (FXF_TRUNC, os.O_TRUNC),
            (FXF_EXCL, os.O_EXCL),
        ):
            if pflags & bit:
                flags |= flag
        fd = os.open(path, flags | os.O_CLOEXEC, attrs.get("mode", 0o666) & 0o7777)
        return self._handle(fd)

    def opendir(self, r: Reader) -> bytes:
        path = r.string()
        names = os.listdir(path)
        return self._handle(_Dir(path, [b".", b"..", *sorted(names)]))

    def _handle(self, target: int | _Dir) -> bytes:
        if len(self.handles) >= MAX_HANDLES:
            if isinstance(target, int):
                os.close(target)
            raise Status(FX_FAILURE, "too many open handles")
        self._next_handle += 1
        handle = str(self._next_handle).encode()
        self.handles[handle] = target
        return bytes([HANDLE]) + string(handle)

    def fd(self, handle: bytes) -> int:
        target = self.handles.get(handle)
        if not isinstance(target, int):
            raise Status(FX_FAILURE, "no such file handle")
        return target

    def close(self, r: Reader) -> bytes:
        target = self.handles.pop(r.string(), None)
        if target is None:
            raise Status(FX_FAILURE, "no such handle")
        if isinstance(target, int):
            os.close(target)
        return self.done()

    def read(self, r: Reader) -> bytes:
        fd, offset, length = self.fd(r.string()), r.u64(), r.u32()
        data = os.pread(fd, min(length, MAX_READ_BYTES), offset)
        if not data:
            raise Status(FX_EOF, "End of file")
        return bytes([DATA]) + string(data)

    def write(self, r: Reader) -> bytes:
        fd, offset, data = self.fd(r.string()), r.u64(), r.string()
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written
        return self.done()

    def setstat(self, r: Reader) -> bytes:
        path, attrs = r.string(), r.attrs()
        if "size" in attrs:
            os.truncate(path, attrs["size"])
        if "mode" in attrs:
            os.chmod(path, attrs["mode"] & 0o7777)
        if "uid" in attrs:
            os.chown(path, attrs["uid"], attrs["gid"])
        if "mtime" in attrs:
            os.utime(path, (attrs["atime"], attrs["mtime"]))
        return self.done()

    def fsetstat(self, r: Reader) -> bytes:
        fd, attrs = self.fd(r.string()), r.attrs()
        if "size" in attrs:
            os.ftruncate(fd, attrs["size"])
        if "mode" in attrs:
            os.fchmod(fd, attrs["mode"] & 0o7777)
        if "uid" in attrs:
            os.fchown(fd, attrs["uid"], attrs["gid"])
        if "mtime" in attrs:
            os.utime(fd, (attrs["atime"], attrs["mtime"]))
        return self.done()

    def readdir(self, r: Reader) -> bytes:
        target = self.handles.get(r.string())
        if not isinstance(target, _Dir):
            raise Status(FX_FAILURE, "no such directory handle")
        batch, target.names = target.names[:READDIR_BATCH], target.names[READDIR_BATCH:]
        if not batch:
            raise Status(FX_EOF, "End of directory")
        entries = []
        for entry in batch:
            try:
                st = os.lstat(os.path.join(target.path, entry))
            except OSError:
                continue  # gone meanwhile
            entries.append(string(entry) + string(longname(entry, st)) + encode_attrs(st))
        return bytes([NAME]) + u32(len(entries)) + b"".join(entries)

    def mkdir(self, r: Reader) -> bytes:
        path, attrs = r.string(), r.attrs()
        os.mkdir(path, attrs.get("mode", 0o777) & 0o7777)
        return self.done()

    def realpath(self, r: Reader) -> bytes:
        path = r.string() or b"."
        return self.name(os.path.realpath(os.path.abspath(path)))

    def rename(self, r: Reader) -> bytes:
        old, new = r.string(), r.string()
        if os.path.lexists(new):  # version 3: a rename never replaces
            raise Status(FX_FAILURE, "the target exists")
        os.rename(old, new)
        return self.done()

    def symlink(self, r: Reader) -> bytes:
        # OpenSSH sends the link's target first, then the link's path (the draft reversed).
        target, link = r.string(), r.string()
        os.symlink(target, link)
        return self.done()

    def extended(self, r: Reader) -> bytes:
        request = r.string()
        if request == b"posix-rename@openssh.com":
            return self.done(os.rename(r.string(), r.string()))
        if request == b"hardlink@openssh.com":
            return self.done(os.link(r.string(), r.string()))
        if request == b"fsync@openssh.com":
            return self.done(os.fsync(self.fd(r.string())))
        if request == b"statvfs@openssh.com":
            return _statvfs(os.statvfs(r.string()))
        if request == b"fstatvfs@openssh.com":
            return _statvfs(os.fstatvfs(self.fd(r.string())))
        if request == b"limits@openssh.com":
            limits = (MAX_PACKET_BYTES, MAX_READ_BYTES, MAX_WRITE_BYTES, MAX_HANDLES)
            return bytes([EXTENDED_REPLY]) + b"".join(u64(limit) for limit in limits)
        raise Status(FX_OP_UNSUPPORTED, f"unsupported extension {request.decode(errors='replace')}")

    # -- I/O -----------------------------------------------------------------------------

    def _read_exactly(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = os.read(self.inp, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _send(self, reply: bytes) -> None:
        view = memoryview(u32(len(reply)) + reply)
        while view:
            view = view[os.write(self.out, view) :]


def _status(request_id: int, code: int, message: str) -> bytes:
    return bytes([STATUS]) + u32(request_id) + u32(code) + string(message.encode()) + string(b"")


def _statvfs(st: os.statvfs_result) -> bytes:
    flag = (1 if st.f_flag & os.ST_RDONLY else 0) | (2 if st.f_flag & os.ST_NOSUID else 0)
    values = (
        st.f_bsize,
        st.f_frsize,
        st.f_blocks,
        st.f_bfree,
        st.f_bavail,
        st.f_files,
        st.f_ffree,
        st.f_favail,
        getattr(st, "f_fsid", 0),
        flag,
        st.f_namemax,
    )
    return bytes([EXTENDED_REPLY]) + b"".join(u64(value) for value in values)


def main(argv: list[str] | None = None) -> int:
    """Serve one SFTP session on stdin/stdout; 0 when the client hung up."""
    del argv  # no options
    try:
        return Server(sys.stdin.fileno(), sys.stdout.fileno()).serve()
    except (BrokenPipeError, ConnectionResetError):
        return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
