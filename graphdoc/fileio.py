"""Atomic file writes: a reader sees the old file or the complete new one, never half of one."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import IO, Callable, Collection, Iterable, Iterator

from graphdoc.errors import GraphDocError, ModelLoadError


def read_safetensors(path: Path) -> dict:
    """The tensors of a safetensors file; a damaged or unreadable one is one :class:`ModelLoadError` line."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise ModelLoadError(f"cannot read {path}: {str(err).strip() or type(err).__name__} "
                             "(the file is damaged or incomplete)") from None
    check_finite(tensors.items(), path)
    return tensors


def check_finite(named_tensors: Iterable, where) -> None:
    """Refuse weights holding NaN or infinite values (a run that diverged, or a damaged file): every vector the
    model gave would be NaN, and FAISS and the evaluation would take them without a word."""
    import torch

    for name, tensor in named_tensors:
        # a sum carries NaN and inf, at ~1/30 the cost of a scan; the scan confirms (a sum may overflow)
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor.sum(dtype=torch.float32))) \
                and not bool(torch.isfinite(tensor).all()):
            raise ModelLoadError(f"{where}: weight {name} holds NaN or infinite values (a training run that "
                                 "diverged, or a damaged file); its vectors would be NaN")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _nearest_existing_parent(path: Path) -> Path:
    """The deepest existing folder above ``path`` (absolute); an error if a file stands where a folder must."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise GraphDocError(f"{parent} is a file, not a folder")
            return parent
    return Path(path.anchor)


#: the bytes a file name may have (Linux, macOS)
NAME_MAX = 255


def hidden_prefix(name: str, room: int = 16) -> str:
    """``.NAME.``: how the hidden files standing in for ``name`` (a temporary, the old folder, a lock) begin; for a
    name so long that ``room`` bytes more would pass :data:`NAME_MAX`, its start and a hash of the whole."""
    prefix = f".{name}."
    if len(os.fsencode(prefix)) + room <= NAME_MAX:
        return prefix
    digest = hashlib.blake2b(os.fsencode(name), digest_size=4).hexdigest()
    # '.', '~' and '.' around it; whole characters (a UTF-8 sequence cut in two is no valid name on macOS)
    start = os.fsencode(name)[:NAME_MAX - room - len(digest) - 3].decode("utf-8", "ignore")
    return f".{start}~{digest}."


def _target(path: str | Path) -> Path:
    """``path`` made absolute (so that ``.`` has a name and a parent), its parent folder created.

    A symbolic link is followed, as a plain ``open`` would: what it points to is replaced and the link stays.
    """
    path = Path(os.path.realpath(path) if os.path.islink(path) else os.path.abspath(path))
    if path.parent == path:
        raise GraphDocError(f"cannot write to {path}: it is the root folder")
    try:
        _nearest_existing_parent(path)
    except GraphDocError as err:
        raise GraphDocError(f"cannot write {path}: {err}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def is_stdio(path: str | Path | None) -> bool:
    """Whether a file argument is ``-`` (or ``/dev/stdout``, ``/dev/stdin``): standard output (or input) instead of
    a file."""
    return path is not None and str(path) in ("-", "/dev/stdout", "/dev/stdin")


#: names of a process's open descriptors
_DESCRIPTOR = re.compile(r"/(dev/(std(out|err)|fd/\d+)|proc/(self|\d+)/fd/\d+)\Z")


def is_descriptor_name(path: str | Path) -> bool:
    """Whether ``path`` names an open descriptor of the process (``/dev/fd/N``, as a shell's ``<(...)`` gives,
    ``/proc/self/fd/N``, ``/dev/stdout``) rather than a file."""
    return _DESCRIPTOR.match(os.path.abspath(path)) is not None


def _is_stream(path: str | Path) -> bool:
    """Whether ``path`` is written into rather than replaced: a device, a pipe or a socket (``/dev/null``, a FIFO).
    A descriptor's name (``/dev/stdout``, ``/dev/fd/N``) is refused: opened again it writes from its own position,
    over what the command prints."""
    name = os.path.abspath(path)
    if is_descriptor_name(name):  # another open of a descriptor has its own position: refused, not written
        raise GraphDocError(f"cannot write {path}: name a file, or - for standard output")
    try:
        mode = os.stat(name).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def check_output_file(path: str | Path, flag: str = "--output") -> None:
    """Refuse, before any work, an output file path that is a folder or lies under a file."""
    if _is_stream(path):  # a device or a pipe is written into, whatever its folder's permissions (/dev/null)
        return
    if Path(path).is_dir():
        raise GraphDocError(f"{flag} {path} is a folder; name a file")
    try:
        parent = _nearest_existing_parent(Path(os.path.abspath(path)))
    except GraphDocError as err:
        raise GraphDocError(f"{flag} {path}: {err}") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise GraphDocError(f"{flag} {path}: cannot write in {parent}")


def check_not_an_input(output: str | Path, inputs: Iterable[str | Path | None], flag: str = "--output",
                       what: str = "the output") -> None:
    """Refuse an output file that is one of the ``inputs`` (``None`` and what is no file are passed over):
    writing ``what`` would replace what the command reads."""
    output = Path(output)
    for name in inputs:
        if name is not None and Path(name).is_file() and output.exists() and output.samefile(name):
            raise GraphDocError(f"{flag} {output} is the input file {name}; name another file for {what}")


def check_output_folder(path: str | Path, flag: str = "--output") -> None:
    """Refuse, before any work, an output folder path that is a file or lies under one."""
    absolute = Path(os.path.abspath(path))
    try:
        if absolute.exists() and not absolute.is_dir():
            raise GraphDocError(f"{absolute} is a file, not a folder")
        _nearest_existing_parent(absolute)
    except GraphDocError as err:
        raise GraphDocError(f"{flag} {path}: {err}") from None


def recorded_path(source: str | os.PathLike) -> str:
    """A path or name as a run records it for a later resume to find again from any working folder: a file or
    folder that is there by its absolute path, anything else (a hub model or data set name) as given."""
    return str(Path(source).resolve()) if Path(source).exists() else str(source)


def check_recorded_inputs(output: str | Path, taken: dict[str, str | list[str] | None]) -> None:
    """Refuse, in one line, a resume of the run in ``output`` whose recorded inputs (``taken``: option -> the
    path(s) the record gave it, :func:`recorded_path`) are gone: a file or folder moved or deleted since."""
    for flag, values in taken.items():
        for value in [values] if isinstance(values, str) else values or ():
            if isinstance(value, str) and os.path.isabs(value) and not os.path.exists(value):
                raise GraphDocError(f"{flag} {value}, which the run in {output} recorded, is gone (moved or "
                                    f"deleted): pass it from its new place with {flag}")


class UnreadableFileError(GraphDocError):
    """A file that cannot be read (truncated, overwritten or missing); ``path`` names it, ``reason`` says why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path} cannot be read ({reason})")
        self.path, self.reason = path, reason

    def __reduce__(self):  # pickled as its arguments (a worker process's error reaches its pool)
        return type(self), (self.path, self.reason)


@contextlib.contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turn whatever reading ``path`` raises (numpy, FAISS, JSON, OS errors) into an :class:`UnreadableFileError`."""
    try:
        yield
    except UnreadableFileError:
        raise
    except (OSError, EOFError, ValueError, RuntimeError, KeyError, IndexError, TypeError, AttributeError,
            GraphDocError) as exc:  # (the last two: JSON of other types than the reader takes, e.g. bm25s')
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        reason = reason.rsplit(" Error: ", 1)[-1]  # FAISS prefixes the C++ function's signature
        raise UnreadableFileError(path, reason if len(reason) <= 240 else reason[:237] + "...") from exc


def replacing(path: str | Path) -> str:
    """What a report of an output about to be written adds: `` (replacing the earlier file)`` when ``path``
    exists (outputs are replaced whole, never appended to), else nothing."""
    return " (replacing the earlier file)" if os.path.isfile(path) else ""


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` (fsynced), else it is removed. A
    device or a pipe (``/dev/null``, a FIFO) is written into instead; a descriptor's name is refused.

    The file gets the permissions a plain ``open`` would give it: those of the file it replaces, else 0666 less
    the umask (not ``mkstemp``'s 0600).
    """
    if _is_stream(path):  # written into as `>>` would, never replaced by a file (as root, /dev/null would be)
        with open(path, mode.replace("w", "a"), encoding=encoding) as handle:
            yield handle
        return
    path = _target(path)
    if path.is_dir():
        raise GraphDocError(f"cannot write {path}: it is a folder")
    fd, tmp = tempfile.mkstemp(prefix=hidden_prefix(path.name), suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o666 & ~_umask())
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        _raise_as_storage_error(exc, path, tmp)
        raise


#: what a write to a full or limited disk raises: no space, quota exceeded, file too large
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
#: numpy's words for a write cut short (``np.save`` on a full disk: no error number, no file name)
_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")
#: how safetensors ("... (os error 28)") and FAISS ("... (No space left on device)") name the system error under
#: their own
_ERROR_NUMBER = re.compile(r"\(os error (\d+)\)")
#: a failed copy of shutil.copytree: "[Errno 28] No space left on device: '/the/file'"
_SHUTIL_WHY = re.compile(r"\[Errno (\d+)\] [^:]*: '(.*)'\Z", re.DOTALL)
_ERROR_WORDS = {os.strerror(number): number for number in _FULL}


def _as_named(name: str, path: Path, tmp: str | Path) -> str:
    """``name``, or when it is the temporary ``tmp`` or a file in it (gone with it), the name it was to have under
    ``path``."""
    tmp = str(tmp)
    return str(path) + name[len(tmp):] if name == tmp or name.startswith(f"{tmp}{os.sep}") else name


def _raise_as_storage_error(exc: BaseException, path: Path, tmp: str | Path) -> None:
    """Raise what writing ``path`` failed with as one :class:`OSError` naming ``path`` when it was the disk (full,
    over quota, a file too large) but said so in a library's words: numpy's short write, safetensors' and FAISS's
    errors; an ``OSError`` of a full disk that names no file gets ``path``, one that names the temporary ``tmp``
    (or a file in it) the path it was to have. shutil's list of failed copies (a merge's) is raised as its first
    failure, naming the file that failed (a source it could not read, or the file it was writing). Anything else
    is left to be raised as it is."""
    if isinstance(exc, OSError) and exc.errno in _FULL:
        # a failed write() names no file: the error line names the output
        exc.filename = str(path) if exc.filename is None else _as_named(str(exc.filename), path, tmp)
        return
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0] and \
            len(exc.args[0][0]) == 3:  # copytree's list of (source, destination, why): its first failure
        failed = _SHUTIL_WHY.match(str(exc.args[0][0][2]))
        if failed is not None:
            number = int(failed[1])  # a source it could not read is named so
            raise OSError(number, os.strerror(number), _as_named(failed[2], path, tmp)) from exc
        return
    text = str(exc)
    if isinstance(exc, OSError) and exc.errno is None and (short := _SHORT_WRITE.search(text)):
        raise OSError(errno.ENOSPC, f"a write was cut short ({short[2]} of {short[1]} bytes written): the disk is "
                                    "full or over its quota", str(path)) from exc
    if not isinstance(exc, (OSError, RuntimeError)) and type(exc).__name__ != "SafetensorError":
        return
    found = _ERROR_NUMBER.search(text)
    number = int(found[1]) if found else next((n for words, n in _ERROR_WORDS.items() if f"({words})" in text), None)
    if number in _FULL:
        raise OSError(number, os.strerror(number), str(path)) from exc


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Build a folder in a temporary sibling; on success it takes the place of ``path``.

    An existing folder at ``path`` is moved aside first and deleted only once the new one is in place, so
    callers must make sure it holds nothing but what they write (see :func:`check_replaceable`). The folder
    gets the permissions a plain ``mkdir`` would give it (0777 less the umask), not ``mkdtemp``'s 0700.
    """
    path = _target(path)
    if path.exists() and not path.is_dir():
        raise GraphDocError(f"cannot write the folder {path}: a file of that name exists")
    if Path.cwd().resolve().is_relative_to(path.resolve()):
        raise GraphDocError(f"cannot replace {path}: it holds the current working folder")
    tmp = Path(tempfile.mkdtemp(prefix=hidden_prefix(path.name), suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        _plain_permissions(tmp)
        old = None
        if path.exists():
            old = path.with_name(f"{hidden_prefix(path.name)}old-{os.getpid()}")
            os.replace(path, old)
        os.replace(tmp, path)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        _raise_as_storage_error(exc, path, tmp)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _plain_permissions(folder: Path) -> None:
    """Give ``folder`` and everything in it the modes a plain ``mkdir``/``open`` would (``mkdtemp`` makes 0700
    folders, and safetensors writes 0600 files)."""
    mask = _umask()
    folder.chmod(0o777 & ~mask)
    for root, dirs, files in os.walk(folder):
        for names, mode in ((dirs, 0o777 & ~mask), (files, 0o666 & ~mask)):
            for name in names:
                if not os.path.islink(os.path.join(root, name)):  # a link's target is not ours to change
                    os.chmod(os.path.join(root, name), mode)


def check_replaceable(path: str | Path, is_ours: Callable[[Path], bool], what: str, entries: Collection[str]) -> None:
    """Refuse to replace ``path`` unless it is missing, an empty folder, or a folder ``is_ours`` recognises
    that holds nothing but ``entries`` (the names a save writes).

    :func:`atomic_directory` replaces a folder whole: files of the user's must not be lost with it.
    """
    path = Path(path)
    if not path.is_dir() or not any(path.iterdir()):
        return
    if not is_ours(path):
        raise GraphDocError(f"{path} is a folder of other files, not {what}: save into a new or empty folder "
                            "(saving replaces the whole folder)")
    others = sorted(p.name for p in path.iterdir() if p.name not in entries)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise GraphDocError(f"{path} holds {shown} besides {what}: saving replaces the whole folder, so move "
                            "them out first or save into a new folder")


#: what :func:`atomic_write` and :func:`atomic_directory` leave when a process is killed mid-write
_STALE = re.compile(r"^\..+\.(?:[A-Za-z0-9_]+\.tmp|old-\d+)$")


def remove_stale_temporaries(folder: str | Path, name: str | None = None) -> list[Path]:
    """Delete the temporary files and folders that a killed atomic write left in ``folder`` (only those of
    writes to ``folder / name`` when ``name`` is given); returns them.

    Call it only where no other process is writing them (a run's own folder, at its start).
    """
    folder, prefix = Path(folder), "" if name is None else hidden_prefix(name)
    stale = [p for p in folder.iterdir() if _STALE.match(p.name) and p.name.startswith(prefix)] \
        if folder.is_dir() else []
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return stale


def restore_moved_aside(folder: str | Path, name: str) -> Path | None:
    """Put the folder ``folder / name`` back where it was when a kill between :func:`atomic_directory`'s two renames
    left it aside (``.NAME.old-PID``) with nothing in its place; returns where it was found (``None``: nothing to
    put back). Call it before :func:`remove_stale_temporaries`, which would delete it, and only where no other
    process is writing ``folder``."""
    folder, start = Path(folder), f"{hidden_prefix(name)}old-"
    target = folder / name
    if target.exists() or target.is_symlink() or not folder.is_dir():
        return None
    aside = [p for p in folder.iterdir() if p.name.startswith(start) and p.name[len(start):].isdigit()
             and p.is_dir() and not p.is_symlink()]
    if not aside:
        return None
    latest = max(aside, key=lambda p: p.stat().st_ctime_ns)  # (one: each run puts it back before it writes)
    os.replace(latest, target)
    return latest


#: the lock file :func:`writer_lock` holds in the folder it writes
LOCK_NAME = ".lock"


@contextlib.contextmanager
def writer_lock(folder: Path) -> Iterator[None]:
    """Be the only process writing folder ``folder`` (an index, a training run; created if missing) while the block
    runs.

    A second writer fails at once. The lock is ``flock`` on ``folder/.lock``, removed on the way out;
    a folder this call created is removed again when it is left empty.
    """
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    fd = _lock(folder / LOCK_NAME, folder)
    try:
        yield
    finally:
        _unlock(folder / LOCK_NAME, fd)
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty: nothing was written


@contextlib.contextmanager
def file_lock(output: str | Path) -> Iterator[None]:
    """Be the only process writing the file ``output`` (and what goes with it, such as a run's saved part) while
    the block runs: ``flock`` on a hidden ``.NAME.lock`` beside it, removed on the way out (its folder is
    created, as :func:`atomic_write` would). A second writer fails at once."""
    path = _target(output)
    lock = path.with_name(f"{hidden_prefix(path.name)}lock")
    fd = _lock(lock, path)
    try:
        yield
    finally:
        _unlock(lock, fd)


def _unlock(path: Path, fd: int) -> None:
    """Remove the lock file ``path`` if it is still the one locked as ``fd``, and let go of it."""
    with contextlib.suppress(FileNotFoundError):
        if os.stat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    os.close(fd)


def _lock(path: Path, folder: Path) -> int:
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise GraphDocError(f"another graphdoc process is writing {folder}") from None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        os.close(fd)  # the last holder removed the file as this one opened it: lock the new one
