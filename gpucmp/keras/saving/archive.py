"""Safe reading of zip archives (``.keras`` files, gpucmp's own format).

``read_members(path, wanted)`` opens a zip and returns the bytes of the members it is asked
for, read in memory -- nothing is ever extracted to disk, so a stored name cannot choose
where anything is written. Before a byte is decompressed it checks every entry of the
archive: unsafe names (absolute, ``..``, backslashes, drive letters, NUL) and duplicate
names are refused, as are declared sizes beyond ``MAX_MEMBER_BYTES`` or compression ratios
of a zip bomb; the read itself stops at the declared size, so a header that lies cannot
make it allocate more. CRCs are checked by ``zipfile`` as the members are read.
All failures are ValueError naming the file and the member.
"""
import os
import zipfile
import zlib

MAX_MEMBER_BYTES = 16 * 2 ** 30       # one member: 16 GiB uncompressed at most
MAX_RATIO = 1000                      # uncompressed / compressed beyond this: a zip bomb


def unsafe_name(name):
    """Why a stored member name is unsafe, or None."""
    if not name or "\x00" in name:
        return "an empty name or a NUL byte"
    if "\\" in name:
        return "a backslash"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    if any(part == ".." for part in name.split("/")):
        return "a '..' component (path traversal)"
    return None


def _check_entries(zf, path):
    seen = set()
    for info in zf.infolist():
        why = unsafe_name(info.filename)
        if why is not None:
            raise ValueError(f"{path}: refusing the archive: member {info.filename!r} has {why}")
        if info.filename in seen:
            raise ValueError(f"{path}: refusing the archive: member {info.filename!r} appears twice")
        seen.add(info.filename)
        if info.file_size > MAX_MEMBER_BYTES:
            raise ValueError(f"{path}: member {info.filename!r} declares {info.file_size} bytes, "
                             f"more than the {MAX_MEMBER_BYTES} allowed")
        if info.file_size > 2 ** 20 and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise ValueError(f"{path}: member {info.filename!r} declares {info.file_size} bytes "
                             f"from {info.compress_size} compressed (a zip bomb?)")
    return seen


def read_members(path, wanted, required=(), what="archive"):
    """{name: bytes} for the members of ``wanted`` present in the zip at ``path`` (those in
    ``required`` must be there), and the set of all member names."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"File not found: filepath={path}. Please ensure the file is an "
                         f"accessible {what}.")
    try:
        with zipfile.ZipFile(path, "r") as zf:
            names = _check_entries(zf, path)
            for name in required:
                if name not in names:
                    raise ValueError(f"{path} is not a valid {what}: it has no {name!r}")
            out = {}
            for name in wanted:
                if name not in names:
                    continue
                info = zf.getinfo(name)
                with zf.open(info) as fh:
                    data = fh.read(info.file_size + 1)
                if len(data) != info.file_size:
                    raise ValueError(f"{path}: member {name!r} holds {len(data)} bytes but "
                                     f"declares {info.file_size}")
                out[name] = data
            return out, names
    except (zipfile.BadZipFile, zlib.error, NotImplementedError) as exc:
        raise ValueError(f"{path} is not a valid {what} (corrupt or truncated zip archive: "
                         f"{exc})") from None
    except (EOFError, OSError) as exc:
        raise ValueError(f"{path} could not be read as a {what} (truncated?): {exc}") from None


def write_zip(fh, members):
    """Writes ``{name: bytes}`` as a deflated zip into the open binary file ``fh``."""
    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, payload in members.items():
            zf.writestr(name, payload)
