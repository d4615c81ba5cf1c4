"""Atomic file writes, shared by model saving and result files.

`atomic_write(path, write, binary)` writes through `write(fh)` into a temporary file in the
destination's folder, flushes it to disk and renames it over `path`, so a reader never sees a
half-written file and a failure (an exception, a full disk) leaves what was there before.
The file gets the permissions a plain open() would give it (those of the file it replaces,
else 0666 less the umask), not the private 0600 of a temporary file.
"""
import os
import stat
import tempfile


def _mode_for(path):
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write(path, write, binary=False):
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), _mode_for(path))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
