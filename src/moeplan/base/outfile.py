"""Output files: written only to a regular file or a new path, atomically, never half-written.

``check_target`` refuses anything that is not a regular file or a new name in a writable directory
(a FIFO, a device, a symlink, a directory, a missing or read-only directory) with one line; the CLI
calls it before any work so nothing runs for an answer that cannot be written. ``write_bytes``
writes a temporary file beside the target and renames it over the target; on any failure the
temporary file is removed and the error is one line. ``file_identity`` / ``same_file`` are the one rule for
"these two paths name one file" (outputs against each other and against the files a command reads, logs
given twice).
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from moeplan.base.errors import MoeplanError


FileIdentity = tuple[int, int] | str


def file_identity(path: str | os.PathLike[str]) -> FileIdentity:
    """What makes two paths one file: an existing file's (device, inode) (``os.stat`` follows symbolic links, so
    a hard link, a symbolic link or another spelling of the path is the same file); for a path that does not
    exist yet, its real path (symbolic links and ``..`` resolved), which only another new path can share."""
    try:
        st = os.stat(path)
    except ValueError:  # a name no file can have (a NUL byte): the same as itself only
        return os.path.abspath(path)
    except OSError:  # missing, or a dangling link
        return os.path.realpath(path)
    return (st.st_dev, st.st_ino)


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Two paths name one file (:func:`file_identity`)."""
    return file_identity(a) == file_identity(b)


def check_target(path: str | os.PathLike[str]) -> Path:
    """The target as a Path when it may be written (a regular file or a new name); else MoeplanError."""
    target = Path(path)
    if str(path) == "" or target.name in ("", ".", ".."):
        raise MoeplanError(f"cannot write '{path}': not a file name")
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise MoeplanError(f"cannot write {target}: {exc.strerror}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise MoeplanError(f"cannot write {target}: it is a symbolic link (write to the file it names, or a new path)")
        if stat.S_ISDIR(st.st_mode):
            raise MoeplanError(f"cannot write {target}: it is a directory")
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise MoeplanError(f"cannot write {target}: it is {kind}; moeplan writes only regular files")
        if not os.access(target, os.W_OK):
            raise MoeplanError(f"cannot write {target}: permission denied")
    parent = target.parent
    if not parent.is_dir():
        raise MoeplanError(f"cannot write {target}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise MoeplanError(f"cannot write {target}: directory {parent} is not writable")
    return target


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file beside it, then a rename)."""
    target = check_target(path)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        check_target(target)  # the path may have changed while the data was being written
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise MoeplanError(f"cannot write {target}: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


__all__ = ["FileIdentity", "check_target", "file_identity", "same_file", "write_bytes"]
