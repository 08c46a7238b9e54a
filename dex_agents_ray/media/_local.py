"""``LocalDirectoryMediaStore``: image files in a directory on one machine.

Every path under the root is opened relative to an open directory with
``O_NOFOLLOW``, so the store follows no symbolic link under the root. Before a
file is opened, ``lstat`` says what it is, and after, ``fstat`` must show the
same inode: a symbolic link, a special file (FIFO, socket, device, directory)
or a file with more than one hard link is refused with ``MediaStoreError``.
Special files are never opened, so a FIFO cannot block a read.
"""

from __future__ import annotations

import asyncio
import errno
import os
import secrets
import stat
from urllib.parse import quote

from ._errors import MediaStoreError
from ._reference import AgentImageReference
from ._validation import (
    build_image_reference,
    require_short_image_uris,
    require_store_image_reference,
    verify_image_bytes,
)

__all__ = ["LocalDirectoryMediaStore"]

_MEDIA_DIRECTORY = "sha256"
_DIRECTORY_MODE = 0o700
_FILE_MODE = 0o600
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC
_NOFOLLOW_DIRECTORY_FLAGS = _DIRECTORY_FLAGS | os.O_NOFOLLOW
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC


def _absolute_root_text(root: str | os.PathLike[str]) -> str:
    text = os.fspath(root)
    if not isinstance(text, str):
        raise TypeError(f"root must be a str path, got {type(text).__name__}")
    if "\x00" in text:
        raise ValueError("root must not contain a NUL character")
    if not os.path.isabs(text):
        raise ValueError(f"root must be an absolute path, got {text!r}")
    # Absolute as text: '.' and '..' and repeated slashes collapse, but no symbolic
    # link is resolved and Unicode is left as it is.
    normalized = os.path.normpath(text)
    if normalized.startswith("//"):
        normalized = "/" + normalized.lstrip("/")
    return normalized


def _file_store_uri(root: str) -> str:
    # Every byte except ASCII letters, digits, '-._~' and '/' is percent-encoded,
    # as in every core; a root that is not UTF-8 keeps its raw bytes.
    encoded = quote(os.fsencode(root), safe="/-._~")
    return "file://" + encoded.rstrip("/")


class _ReplacedError(MediaStoreError):
    """The name was given another inode between ``lstat`` and ``open`` (a concurrent
    writer renamed its file into place)."""


# Reads retry when a concurrent writer replaces the file under them.
_READ_ATTEMPTS = 3


def _describe(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _fsync_directory_path(path: str) -> None:
    fd = os.open(path, _DIRECTORY_FLAGS)
    try:
        os.fsync(fd)
    finally:
        _close(fd)


class LocalDirectoryMediaStore:
    """A ``MediaStore`` that keeps each image in ``<root>/sha256/<sha256>``.

    For a client and workers that share one file system, such as a command-line
    tool in local mode or a single-node Ray cluster; use ``S3MediaStore`` across
    machines. It needs a POSIX file system.

    - Image URIs are ``file://<root>/sha256/<sha256>``: ``root`` made absolute
      as text (no symbolic link resolved, Unicode not normalized), every byte
      other than ASCII letters, digits, ``-._~`` and ``/`` percent-encoded.
    - ``put_image`` writes a temporary file in the ``sha256`` directory, syncs
      it and renames it into place; an identical existing file is success.
      Before it returns, even when nothing was written, it syncs the ``sha256``
      directory, the root and the root's parent, and it syncs the parent of
      each directory it creates. Directories it creates get mode ``0700`` and
      files ``0600``. Directories above the root's parent must already be
      durable.
    - ``get_image`` checks the file's size first, reads at most one byte past
      ``size_bytes``, and runs ``verify_image_bytes``.
    - A symbolic link, a special file or a file with more than one hard link
      where the store expects its directory or an image is refused with
      ``MediaStoreError``. The root itself may be reached through symbolic links.

    Deleting a session deletes no file.

    Args:
        root: Absolute path of the directory; created (with missing parents) on
            the first ``put_image``.

    Raises:
        ValueError: ``root`` is relative, contains NUL, or would make image URIs
            longer than ``MAX_IMAGE_URI_LENGTH``.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = _absolute_root_text(root)
        self._store_uri = _file_store_uri(self._root)
        require_short_image_uris(self._store_uri)

    @property
    def root(self) -> str:
        """The root directory, absolute as text."""
        return self._root

    @property
    def store_uri(self) -> str:
        """``file://`` and the percent-encoded root: the prefix of every image URI."""
        return self._store_uri

    def __repr__(self) -> str:
        return f"LocalDirectoryMediaStore(root={self._root!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalDirectoryMediaStore) and other._root == self._root

    def __hash__(self) -> int:
        return hash((LocalDirectoryMediaStore, self._root))

    async def put_image(self, data: bytes) -> AgentImageReference:
        """Write the image file durably and return its reference.

        Raises:
            ImageValidationError: ``data`` is not a supported image.
            MediaStoreError: The file could not be written, or the store's
                directory or the image's name is a symbolic link, a special
                file or a multiply-linked file.
        """
        reference = build_image_reference(data, self._store_uri)
        await asyncio.to_thread(self._write, reference, bytes(data))
        return reference

    async def get_image(self, reference: AgentImageReference) -> bytes:
        """Read and verify the bytes of an image in this directory.

        Raises:
            ImageValidationError: ``reference`` is malformed.
            MediaStoreError: The reference is not in this store, the file is
                missing, of the wrong size or content, or is a symbolic link, a
                special file or a multiply-linked file.
        """
        sha256 = require_store_image_reference(reference, self._store_uri)
        data = await asyncio.to_thread(self._read, reference, sha256)
        verify_image_bytes(reference, data)
        return data

    # -- reading -------------------------------------------------------------

    def _read(self, reference: AgentImageReference, name: str) -> bytes:
        uri = reference.uri
        try:
            root_fd = os.open(self._root, _DIRECTORY_FLAGS)
        except FileNotFoundError as error:
            raise MediaStoreError(
                f"image {uri!r} not found: media directory {self._root!r} does not exist",
                uri=uri,
            ) from error
        except OSError as error:
            raise self._error(f"cannot open media directory {self._root!r}", error, uri) from error
        try:
            media_fd = self._open_media_directory(root_fd, uri)
            if media_fd is None:
                raise MediaStoreError(f"image {uri!r} not found", uri=uri)
            try:
                return self._read_file(media_fd, name, reference)
            finally:
                _close(media_fd)
        except OSError as error:
            raise self._error(f"cannot read image {uri!r}", error, uri) from error
        finally:
            _close(root_fd)

    def _read_file(self, media_fd: int, name: str, reference: AgentImageReference) -> bytes:
        for _ in range(_READ_ATTEMPTS - 1):
            try:
                return self._read_file_once(media_fd, name, reference)
            except _ReplacedError:
                continue
        return self._read_file_once(media_fd, name, reference)

    def _read_file_once(self, media_fd: int, name: str, reference: AgentImageReference) -> bytes:
        uri = reference.uri
        expected = self._inspect(media_fd, name, uri)
        if expected is None:
            raise MediaStoreError(f"image {uri!r} not found", uri=uri)
        if expected.st_size != reference.size_bytes:
            raise MediaStoreError(
                f"image file {self._path(name)!r} is {expected.st_size} bytes; the reference "
                f"says {reference.size_bytes}",
                uri=uri,
            )
        fd = self._open_checked(media_fd, name, expected, uri)
        try:
            return _read_at_most(fd, reference.size_bytes + 1)
        except OSError as error:
            raise self._error(f"cannot read image file {self._path(name)!r}", error, uri) from error
        finally:
            _close(fd)

    # -- writing -------------------------------------------------------------

    def _write(self, reference: AgentImageReference, data: bytes) -> None:
        uri = reference.uri
        name = reference.sha256
        try:
            root_fd = self._open_or_create_root(uri)
        except OSError as error:
            raise self._error(
                f"cannot create media directory {self._root!r}", error, uri
            ) from error
        try:
            media_fd = self._make_directory(root_fd, _MEDIA_DIRECTORY, uri)
            try:
                existing = self._inspect(media_fd, name, uri)
                if existing is None or not self._holds(media_fd, name, existing, data, uri):
                    self._write_new(media_fd, name, data, uri)
                os.fsync(media_fd)
            finally:
                _close(media_fd)
            os.fsync(root_fd)
        except OSError as error:
            raise self._error(f"cannot write image {uri!r}", error, uri) from error
        finally:
            _close(root_fd)
        try:
            _fsync_directory_path(os.path.dirname(self._root))
        except OSError as error:
            raise self._error(
                f"cannot sync the parent of media directory {self._root!r}", error, uri
            ) from error

    def _open_or_create_root(self, uri: str) -> int:
        """Open the root, creating it and missing parents (mode 0700) as needed."""
        missing: list[str] = []
        path = self._root
        while True:
            try:
                fd = os.open(path, _DIRECTORY_FLAGS)
                break
            except FileNotFoundError:
                parent = os.path.dirname(path)
                if parent == path:
                    raise
                missing.append(os.path.basename(path))
                path = parent
            except NotADirectoryError as error:
                raise MediaStoreError(
                    f"media directory {path!r} is not a directory", uri=uri
                ) from error
        for name in reversed(missing):
            try:
                child_fd = self._make_directory(fd, name, uri)
            finally:
                _close(fd)
            fd = child_fd
        return fd

    def _make_directory(self, parent_fd: int, name: str, uri: str) -> int:
        """Create ``name`` (mode 0700) under ``parent_fd`` if missing, and open it.

        A directory it creates is synced into its parent.
        """
        try:
            os.mkdir(name, _DIRECTORY_MODE, dir_fd=parent_fd)
            created = True
        except FileExistsError:
            created = False
        child_fd = self._open_directory_nofollow(parent_fd, name, uri)
        if created:
            try:
                os.fchmod(child_fd, _DIRECTORY_MODE)
                os.fsync(parent_fd)
            except BaseException:
                _close(child_fd)
                raise
        return child_fd

    def _open_media_directory(self, root_fd: int, uri: str) -> int | None:
        """Open ``<root>/sha256``; ``None`` when it is missing."""
        try:
            return self._open_directory_nofollow(root_fd, _MEDIA_DIRECTORY, uri)
        except FileNotFoundError:
            return None

    def _open_directory_nofollow(self, parent_fd: int, name: str, uri: str) -> int:
        try:
            return os.open(name, _NOFOLLOW_DIRECTORY_FLAGS, dir_fd=parent_fd)
        except OSError as error:
            if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            try:
                mode = os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode
                what = _describe(mode) if not stat.S_ISREG(mode) else "a regular file"
            except OSError:
                what = "not a directory"
            raise MediaStoreError(
                f"refusing {self._path(name, directory=True)!r} in the media store: it is {what}, "
                "not a directory",
                uri=uri,
            ) from error

    def _write_new(self, media_fd: int, name: str, data: bytes, uri: str) -> None:
        temporary = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temporary, _CREATE_FLAGS, _FILE_MODE, dir_fd=media_fd)
        try:
            try:
                os.fchmod(fd, _FILE_MODE)
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                _close(fd)
            os.rename(temporary, name, src_dir_fd=media_fd, dst_dir_fd=media_fd)
        except BaseException:
            try:
                os.unlink(temporary, dir_fd=media_fd)
            except OSError:
                pass
            raise

    def _holds(
        self, media_fd: int, name: str, existing: os.stat_result, data: bytes, uri: str
    ) -> bool:
        """Whether the existing image file has exactly ``data``."""
        if existing.st_size != len(data):
            return False
        try:
            fd = self._open_checked(media_fd, name, existing, uri)
        except _ReplacedError:
            return False  # a concurrent writer's file; renaming ours over it is as good
        try:
            return _read_at_most(fd, len(data) + 1) == data
        finally:
            _close(fd)

    # -- checks --------------------------------------------------------------

    def _inspect(self, media_fd: int, name: str, uri: str) -> os.stat_result | None:
        """``lstat`` an image name: ``None`` if missing; refuse anything but a
        regular file with one link."""
        try:
            info = os.stat(name, dir_fd=media_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        self._require_plain_file(info, name, uri)
        return info

    def _open_checked(self, media_fd: int, name: str, expected: os.stat_result, uri: str) -> int:
        """Open an image file that ``_inspect`` saw, and check it is still that file."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=media_fd)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise MediaStoreError(
                    f"refusing image file {self._path(name)!r}: it is a symbolic link", uri=uri
                ) from error
            raise
        try:
            info = os.fstat(fd)
            same = (info.st_dev, info.st_ino) == (expected.st_dev, expected.st_ino)
            # No links left: a concurrent writer renamed its file over this one.
            if not same or info.st_nlink == 0:
                raise _ReplacedError(
                    f"refusing image file {self._path(name)!r}: it was replaced while being opened",
                    uri=uri,
                )
            self._require_plain_file(info, name, uri)
        except BaseException:
            _close(fd)
            raise
        return fd

    def _require_plain_file(self, info: os.stat_result, name: str, uri: str) -> None:
        if not stat.S_ISREG(info.st_mode):
            raise MediaStoreError(
                f"refusing image file {self._path(name)!r}: it is {_describe(info.st_mode)}",
                uri=uri,
            )
        if info.st_nlink != 1:
            raise MediaStoreError(
                f"refusing image file {self._path(name)!r}: it has {info.st_nlink} hard links",
                uri=uri,
            )

    def _path(self, name: str, *, directory: bool = False) -> str:
        if directory:
            return os.path.join(self._root, name)
        return os.path.join(self._root, _MEDIA_DIRECTORY, name)

    def _error(self, message: str, error: OSError, uri: str) -> MediaStoreError:
        return MediaStoreError(f"{message}: {error.strerror or error}", uri=uri)
