"""``get_file``: Keras' download-and-cache helper, with the standard library's urllib.

Same arguments, cache layout and return values as ``keras.utils.get_file`` (Keras 3), so a
file Keras already downloaded is found and reused: ``<cache_dir>/<cache_subdir>/<fname>``
with ``cache_dir`` = ``$KERAS_HOME`` or ``~/.keras`` (``/tmp/.keras`` when that is not
writable); with ``extract=True`` the archive is kept as ``<fname>_archive`` (or ``fname``
when it has an extension) and unpacked into ``<fname>`` (``<stem>_extracted``).

What it adds: the download streams into a temporary file in the cache folder while its hash
is computed, with a tqdm progress bar; only a complete file whose hash matches is renamed
into place (``os.replace``), so an interrupted or corrupted download never stays in the
cache. A cached file whose hash does not match is downloaded again. Archives are unpacked
into a temporary folder first, refusing members that would land outside it (absolute
paths, ``..``, links, devices), then renamed into place. Network failures raise
``DownloadError`` (an OSError) naming the URL and the reason.
"""
import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile

from ..._files import atomic_write

CHUNK = 1 << 16


class DownloadError(OSError):
    """A file could not be downloaded (offline, HTTP error, interrupted transfer)."""


def keras_home():
    return os.path.expanduser(os.environ.get("KERAS_HOME") or os.path.join("~", ".keras"))


def resolve_hasher(algorithm, file_hash=None):
    if algorithm == "sha256" or (algorithm == "auto" and file_hash is not None
                                 and len(file_hash) == 64):
        return hashlib.sha256()
    if algorithm in ("md5", "auto"):
        return hashlib.md5()
    raise ValueError(f"hash_algorithm must be 'auto', 'sha256' or 'md5', received {algorithm!r}")


def hash_file(fpath, algorithm="sha256", chunk_size=CHUNK):
    hasher = resolve_hasher(algorithm) if isinstance(algorithm, str) else algorithm
    with open(fpath, "rb") as fh:
        for chunk in iter(lambda: fh.read(chunk_size), b""):
            hasher.update(chunk)
    return hasher.hexdigest()


def validate_file(fpath, file_hash, algorithm="auto", chunk_size=CHUNK):
    hasher = resolve_hasher(algorithm, file_hash)
    return hash_file(fpath, hasher, chunk_size) == str(file_hash).lower()


def _cache_folder(cache_dir, cache_subdir):
    base = os.path.expanduser(os.fspath(cache_dir)) if cache_dir is not None else keras_home()
    try:
        os.makedirs(base, exist_ok=True)
    except OSError:
        pass
    if not os.access(base, os.W_OK):
        base = os.path.join(tempfile.gettempdir(), ".keras")
    folder = os.path.join(base, cache_subdir)
    os.makedirs(folder, exist_ok=True)
    return folder


def _download(origin, target, file_hash, algorithm, timeout):
    """Streams ``origin`` into ``target`` through _files.atomic_write: the file appears
    only when complete and, if ``file_hash`` is given, when its hash matches; otherwise
    the temporary file is removed and nothing is kept."""
    from tqdm.auto import tqdm
    hasher = resolve_hasher(algorithm, file_hash) if file_hash is not None else None

    def stream(out):
        try:
            with urllib.request.urlopen(origin, timeout=timeout) as resp:
                total = resp.headers.get("Content-Length")
                total = int(total) if total and total.isdigit() else None
                got = 0
                with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                          desc=os.path.basename(target), leave=False) as bar:
                    for chunk in iter(lambda: resp.read(CHUNK), b""):
                        out.write(chunk)
                        if hasher is not None:
                            hasher.update(chunk)
                        got += len(chunk)
                        bar.update(len(chunk))
        except urllib.error.HTTPError as exc:
            raise DownloadError(f"URL fetch failure on {origin}: HTTP {exc.code} "
                                f"{exc.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DownloadError(f"URL fetch failure on {origin}: {reason}") from None
        if total is not None and got != total:
            raise DownloadError(f"URL fetch failure on {origin}: the transfer stopped after "
                                f"{got} of {total} bytes")
        if hasher is not None and hasher.hexdigest() != str(file_hash).lower():
            raise ValueError(f"Incomplete or corrupted file detected: the {hasher.name} hash of "
                             f"the file downloaded from {origin} is {hasher.hexdigest()}, not the "
                             f"expected {file_hash}; the file was not kept")
    atomic_write(target, stream, binary=True)


def _safe_member(name, root):
    dest = os.path.realpath(os.path.join(root, name))
    return os.path.isabs(name) is False and ".." not in name.replace("\\", "/").split("/") \
        and (dest == root or dest.startswith(root + os.sep))


def _extract(archive, target, archive_format):
    """Unpacks ``archive`` into ``target`` through a temporary folder; False when it is
    not an archive of the formats asked for."""
    formats = ["tar", "zip"] if archive_format == "auto" else \
        ([archive_format] if isinstance(archive_format, str) else list(archive_format or []))
    parent = os.path.dirname(target)
    for fmt in formats:
        if fmt == "tar" and tarfile.is_tarfile(archive):
            opener = lambda: tarfile.open(archive)                      # noqa: E731
        elif fmt == "zip" and zipfile.is_zipfile(archive):
            opener = lambda: zipfile.ZipFile(archive)                   # noqa: E731
        else:
            continue
        tmp = tempfile.mkdtemp(prefix="." + os.path.basename(target) + ".", dir=parent)
        root = os.path.realpath(tmp)
        try:
            with opener() as arc:
                if isinstance(arc, tarfile.TarFile):
                    for m in arc.getmembers():
                        if not (m.isfile() or m.isdir()) or not _safe_member(m.name, root):
                            raise ValueError(f"{archive}: refusing to extract member {m.name!r} "
                                             "(a link, a device, or a path outside the folder)")
                    arc.extractall(tmp, filter="data")
                else:
                    for name in arc.namelist():
                        if not _safe_member(name, root):
                            raise ValueError(f"{archive}: refusing to extract member {name!r} "
                                             "(a path outside the folder)")
                    arc.extractall(tmp)
            if os.path.exists(target):
                shutil.rmtree(target) if os.path.isdir(target) else os.unlink(target)
            os.replace(tmp, target)
            return True
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return False


def get_file(fname=None, origin=None, untar=False, md5_hash=None, file_hash=None,
             cache_subdir="datasets", hash_algorithm="auto", extract=False,
             archive_format="auto", cache_dir=None, force_download=False, timeout=60):
    """Downloads ``origin`` into Keras' cache unless it is there already; returns the path
    (of the extracted folder with ``extract=True``). See the module docstring."""
    if origin is None:
        raise ValueError('Please specify the "origin" argument (URL of the file to download).')
    if md5_hash is not None and file_hash is None:
        file_hash, hash_algorithm = md5_hash, "md5"
    folder = _cache_folder(cache_dir, cache_subdir)
    given = fname is not None
    fname = os.fspath(fname) if given else os.path.basename(urllib.parse.urlsplit(origin).path)
    if not fname:
        raise ValueError(f"Can't parse the file name from the origin provided: '{origin}'. "
                         "Please specify the `fname` argument.")
    if os.sep in fname or "/" in fname or fname in (".", ".."):
        raise ValueError("Paths are not accepted as the `fname` argument; use `cache_dir` for "
                         f"the file's folder. Received: fname={fname}")
    extract = extract or untar
    if untar:
        archive_format = "tar"
    if extract:
        if given and "." in fname:
            target = os.path.join(folder, fname)
            extraction_dir = os.path.join(folder, f"{fname[: fname.find('.')]}_extracted")
        else:
            extraction_dir = os.path.join(folder, fname)
            target = os.path.join(folder, f"{fname}_archive")
    else:
        target = os.path.join(folder, fname)
    download = force_download or not os.path.exists(target) or \
        (file_hash is not None and not validate_file(target, file_hash, hash_algorithm))
    if download:
        print(f"Downloading data from {origin}")
        _download(origin, target, file_hash, hash_algorithm, timeout)
    if extract:
        if download or not os.path.isdir(extraction_dir):
            if not _extract(target, extraction_dir, archive_format):
                raise ValueError(f"{target} is not a {archive_format} archive; cannot extract it")
        return extraction_dir
    return target
