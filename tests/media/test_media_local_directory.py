"""LocalDirectoryMediaStore on the real file system, including the attacks it must refuse."""

from __future__ import annotations

import asyncio
import os
import pickle
import shutil
import socket
import stat
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from media_images import gif, jpeg, png, webp

from dex_agents_ray.media import (
    AgentImageReference,
    ImageValidationError,
    LocalDirectoryMediaStore,
    MediaStoreError,
    load_images,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


async def test_put_creates_directories_and_files_with_private_modes(local_root: Path) -> None:
    root = local_root / "deeper" / "still"
    store = LocalDirectoryMediaStore(root)
    reference = await store.put_image(png())
    image = root / "sha256" / reference.sha256
    assert image.read_bytes() == png()
    assert reference.uri == f"file://{root}/sha256/{reference.sha256}"
    assert _mode(image) == 0o600
    for directory in (local_root, local_root / "deeper", root, root / "sha256"):
        assert _mode(directory) == 0o700
    assert await store.get_image(reference) == png()
    # No temporary file is left behind.
    assert sorted(p.name for p in (root / "sha256").iterdir()) == [reference.sha256]


async def test_put_is_idempotent_and_repairs_a_damaged_file(local_root: Path) -> None:
    store = LocalDirectoryMediaStore(local_root)
    data = jpeg(padding=100)
    reference = await store.put_image(data)
    image = local_root / "sha256" / reference.sha256
    inode = image.stat().st_ino
    assert await store.put_image(data) == reference
    assert image.stat().st_ino == inode  # identical file: nothing written
    image.write_bytes(data[:-1] + b"\x00")
    with pytest.raises(MediaStoreError, match="different SHA-256"):
        await store.get_image(reference)
    assert await store.put_image(data) == reference
    assert image.read_bytes() == data
    assert await store.get_image(reference) == data


async def test_concurrent_puts_of_the_same_image_leave_one_file(local_root: Path) -> None:
    store = LocalDirectoryMediaStore(local_root)
    data = png(padding=200_000)
    references = await asyncio.gather(*(store.put_image(data) for _ in range(8)))
    assert len(set(references)) == 1
    assert [p.name for p in (local_root / "sha256").iterdir()] == [references[0].sha256]
    loaded = await load_images(store, [*references, await store.put_image(gif())])
    assert loaded[references[0].sha256] == data


async def test_uris_percent_encode_the_root_as_text(tmp_path: Path) -> None:
    fixed = LocalDirectoryMediaStore("/srv/média files/100%/./a/../b~c+d//")
    assert fixed.root == "/srv/média files/100%/b~c+d"
    assert fixed.store_uri == "file:///srv/m%C3%A9dia%20files/100%25/b~c%2Bd"
    assert LocalDirectoryMediaStore("//srv/x").store_uri == "file:///srv/x"

    root = tmp_path / "with space" / "ünï%cøde"
    store = LocalDirectoryMediaStore(root)
    reference = await store.put_image(png())
    assert reference.uri.endswith(
        "/with%20space/%C3%BCn%C3%AF%25c%C3%B8de/sha256/" + reference.sha256
    )
    assert (root / "sha256" / reference.sha256).read_bytes() == png()
    assert await store.get_image(reference) == png()


def test_root_must_be_absolute_and_short(tmp_path: Path) -> None:
    for bad in ("relative/dir", "./media", "", "media"):
        with pytest.raises(ValueError, match="absolute"):
            LocalDirectoryMediaStore(bad)
    with pytest.raises(ValueError, match="NUL"):
        LocalDirectoryMediaStore("/tmp/a\x00b")
    with pytest.raises(ValueError, match="MAX_IMAGE_URI_LENGTH"):
        LocalDirectoryMediaStore(tmp_path / ("x" * 200) / ("y" * 200) / ("z" * 600))
    store = LocalDirectoryMediaStore(tmp_path)
    assert pickle.loads(pickle.dumps(store)) == store
    assert repr(store) == f"LocalDirectoryMediaStore(root={str(tmp_path)!r})"


async def test_a_symlinked_root_is_followed_but_nothing_below_it(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    store = LocalDirectoryMediaStore(tmp_path / "link")
    reference = await store.put_image(gif())
    assert (real / "sha256" / reference.sha256).read_bytes() == gif()
    assert reference.uri.startswith(f"file://{tmp_path}/link/sha256/")


async def test_a_symlinked_media_directory_is_refused(local_root: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = LocalDirectoryMediaStore(local_root)
    reference = await store.put_image(png())
    (local_root / "sha256").rename(elsewhere / "sha256")
    (local_root / "sha256").symlink_to(elsewhere / "sha256")
    with pytest.raises(MediaStoreError, match="is a symbolic link, not a directory"):
        await store.get_image(reference)
    with pytest.raises(MediaStoreError, match="is a symbolic link, not a directory"):
        await store.put_image(gif())
    assert sorted(p.name for p in (elsewhere / "sha256").iterdir()) == [reference.sha256]
    (local_root / "sha256").unlink()
    (local_root / "sha256").write_bytes(b"a file")
    with pytest.raises(MediaStoreError, match="is a regular file, not a directory"):
        await store.put_image(gif())


async def test_a_symlinked_image_file_is_refused(local_root: Path, tmp_path: Path) -> None:
    store = LocalDirectoryMediaStore(local_root)
    reference = await store.put_image(png())
    image = local_root / "sha256" / reference.sha256
    target = tmp_path / "target.png"
    image.rename(target)
    image.symlink_to(target)
    with pytest.raises(MediaStoreError, match="symbolic link"):
        await store.get_image(reference)
    with pytest.raises(MediaStoreError, match="symbolic link"):
        await store.put_image(png())
    assert image.is_symlink() and target.read_bytes() == png()
    # A dangling link is refused too, and nothing is written through it.
    target.unlink()
    with pytest.raises(MediaStoreError, match="symbolic link"):
        await store.put_image(png())
    assert not target.exists()


async def test_a_hard_linked_image_file_is_refused(local_root: Path, tmp_path: Path) -> None:
    store = LocalDirectoryMediaStore(local_root)
    reference = await store.put_image(webp())
    image = local_root / "sha256" / reference.sha256
    os.link(image, tmp_path / "second-name")
    with pytest.raises(MediaStoreError, match="2 hard links"):
        await store.get_image(reference)
    with pytest.raises(MediaStoreError, match="2 hard links"):
        await store.put_image(webp())


async def test_special_files_are_refused_without_blocking(local_root: Path) -> None:
    store = LocalDirectoryMediaStore(local_root)
    await store.put_image(gif())
    media = local_root / "sha256"

    fifo = await store.put_image(png())
    (media / fifo.sha256).unlink()
    os.mkfifo(media / fifo.sha256, 0o600)
    # Opening a FIFO for reading would block until a writer came; the store never opens it.
    with pytest.raises(MediaStoreError, match="a FIFO"):
        await asyncio.wait_for(store.get_image(fifo), timeout=30)
    with pytest.raises(MediaStoreError, match="a FIFO"):
        await asyncio.wait_for(store.put_image(png()), timeout=30)

    sock_reference = await store.put_image(jpeg())
    (media / sock_reference.sha256).unlink()
    # AF_UNIX paths are short: bind in a short directory, then move the socket in place.
    short = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    try:
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(str(short / "s"))
            os.rename(short / "s", media / sock_reference.sha256)
            with pytest.raises(MediaStoreError, match="a socket"):
                await store.get_image(sock_reference)
    finally:
        shutil.rmtree(short)

    directory = await store.put_image(webp())
    (media / directory.sha256).unlink()
    (media / directory.sha256).mkdir()
    with pytest.raises(MediaStoreError, match="a directory"):
        await store.get_image(directory)
    with pytest.raises(MediaStoreError, match="a directory"):
        await store.put_image(webp())


async def test_reads_check_size_first_and_refuse_traversal(local_root: Path) -> None:
    store = LocalDirectoryMediaStore(local_root)
    reference = await store.put_image(png())
    image = local_root / "sha256" / reference.sha256
    image.write_bytes(png() + b"trailing")
    with pytest.raises(MediaStoreError, match="the reference says"):
        await store.get_image(reference)
    image.write_bytes(png())

    secret = local_root.parent / "secret"
    secret.write_bytes(png())
    escapes = [
        replace(reference, uri=f"{store.store_uri}/sha256/../../secret/sha256/{reference.sha256}"),
        replace(reference, uri=f"file://{local_root.parent}/secret/sha256/{reference.sha256}"),
        replace(reference, uri=f"{store.store_uri}/../sha256/{reference.sha256}"),
    ]
    for escape in escapes:
        with pytest.raises(MediaStoreError, match="not in the media store"):
            await store.get_image(escape)
    for name in ("../secret", "..%2Fsecret", "/etc/passwd"):
        with pytest.raises(ImageValidationError, match="sha256"):
            await store.get_image(replace(reference, sha256=name))


async def test_missing_images_and_directories_raise_media_store_error(local_root: Path) -> None:
    store = LocalDirectoryMediaStore(local_root)
    reference = AgentImageReference(
        uri=f"{store.store_uri}/sha256/{'c' * 64}",
        mime_type="image/gif",
        sha256="c" * 64,
        size_bytes=35,
    )
    with pytest.raises(MediaStoreError, match="does not exist"):
        await store.get_image(reference)
    os.mkdir(local_root)
    with pytest.raises(MediaStoreError, match="not found"):
        await store.get_image(reference)
    await store.put_image(gif())
    with pytest.raises(MediaStoreError, match="not found"):
        await store.get_image(reference)
    assert not local_root.joinpath("sha256", "c" * 64).exists()


async def test_a_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    store = LocalDirectoryMediaStore(tmp_path / "file")
    with pytest.raises(MediaStoreError, match="not a directory"):
        await store.put_image(png())
