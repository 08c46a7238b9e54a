"""``S3MediaStore``: image bytes in an S3-compatible bucket, through boto3."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from dex_agents_ray.media import (
    AgentImageReference,
    MediaStoreError,
    build_image_reference,
    require_short_image_uris,
    require_store_image_reference,
    verify_image_bytes,
)

if TYPE_CHECKING:
    from botocore.exceptions import ClientError
    from mypy_boto3_s3 import S3Client

__all__ = ["S3MediaStore"]

logger = logging.getLogger("dex_agents_ray.s3")

_INSTALL_HINT = 'S3MediaStore needs boto3: pip install "dex-agents-ray[s3]"'
# Lowercase letters, digits, dots, hyphens (and underscores, which some
# S3-compatible services allow), 3 to 63 characters, alphanumeric at both ends.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
# AWS's "safe characters" for object keys, without '/', which separates segments.
_PREFIX_SEGMENT = re.compile(r"[A-Za-z0-9!_.*'()-]+")
# Upload attempts that may meet 409 ConditionalRequestConflict: the first and two retries.
_CONDITIONAL_ATTEMPTS = 3


# botocore's DEBUG logs print request headers and canonical requests, which hold a
# session token; these loggers get a filter that redacts every store's secrets.
_BOTOCORE_LOGGERS = ("botocore.auth", "botocore.endpoint", "botocore.parsers", "botocore.hooks")


class _SecretRedactor(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._secrets: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def add(self, *secrets: str | None) -> None:
        with self._lock:
            self._secrets = self._secrets | {secret for secret in secrets if secret}

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self._secrets
        if secrets:
            message = record.getMessage()
            if any(secret in message for secret in secrets):
                for secret in secrets:
                    message = message.replace(secret, "<redacted>")
                record.msg, record.args = message, None
        return True


_redactor = _SecretRedactor()
_redactor_installed = False
_redactor_lock = threading.Lock()


def _redact_in_botocore_logs(*secrets: str | None) -> None:
    global _redactor_installed
    _redactor.add(*secrets)
    with _redactor_lock:
        if not _redactor_installed:
            for name in _BOTOCORE_LOGGERS:
                logging.getLogger(name).addFilter(_redactor)
            _redactor_installed = True


def _require_boto3() -> None:
    try:
        import boto3.session  # noqa: F401
        import botocore.config  # noqa: F401
        import botocore.exceptions  # noqa: F401
    except ImportError as error:
        raise ImportError(_INSTALL_HINT) from error


def _normalize_prefix(prefix: str) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a string, got {type(prefix).__name__}")
    stripped = prefix.strip("/")
    if not stripped:
        return ""
    for segment in stripped.split("/"):
        if segment in (".", "..") or not _PREFIX_SEGMENT.fullmatch(segment):
            raise ValueError(
                f"prefix {prefix!r:.200} has segment {segment!r:.80}: each '/'-separated "
                "segment must be non-empty, not '.' or '..', and use only letters, digits "
                "and !_.*'()-"
            )
    return stripped


def _status(error: ClientError) -> tuple[int, str]:
    response: Any = error.response
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    code = response.get("Error", {}).get("Code", "")
    return int(status or 0), str(code)


class S3MediaStore:
    """A ``MediaStore`` on AWS S3 or any S3-compatible service.

    Each image is the object ``<prefix>/sha256/<sha256>``, and its URI is
    ``s3://<bucket>/<prefix>/sha256/<sha256>``.

    - ``put_image`` uploads with ``If-None-Match: *`` and treats 412 (the
      object exists) as success, so retried Steps and concurrent writers leave
      one object. A 409 conflict is retried twice; when every attempt conflicts,
      a ``HEAD`` must find the object with the image's size. A service that
      answers the conditional upload with 501 Not Implemented is remembered as
      one without conditional writes: the store then checks with ``HEAD`` first
      and uploads only when the object is missing.
    - ``get_image`` reads only references under its own bucket and prefix,
      refuses an object whose ``Content-Length`` differs from ``size_bytes``,
      reads at most one byte more, and runs ``verify_image_bytes``.

    Credentials come from the standard AWS chain unless ``access_key_id`` and
    ``secret_access_key`` are given; pass them only for keys that are not
    secret, such as a local development bucket with fixed loopback keys. The
    store never logs them or shows them in its ``repr``, and redacts the secret
    key and session token from botocore's DEBUG logs; pickling it (as when a
    Ray task receives it) carries them, so the far side can rebuild its client.

    The boto3 client is made on first use and shared by threads; ``close()``
    releases its connections.

    Args:
        bucket: The bucket name.
        prefix: Key prefix, ``/``-separated segments of letters, digits and
            ``!_.*'()-``; leading and trailing ``/`` are dropped; ``""`` for none.
        endpoint_url: URL of an S3-compatible service; ``None`` for AWS.
        region_name: The region; ``None`` for the AWS chain's.
        force_path_style: Address the bucket in the URL path instead of the host
            name, as most S3-compatible services need.
        access_key_id: Access key ID; ``None`` for the AWS chain.
        secret_access_key: Secret access key, required with ``access_key_id``.
        session_token: Session token of temporary credentials; ``None`` for none.

    Raises:
        ImportError: boto3 is missing (``pip install "dex-agents-ray[s3]"``).
        ValueError: The bucket or prefix is malformed or would make image URIs
            longer than ``MAX_IMAGE_URI_LENGTH``, or only one key of a key pair
            is given.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        force_path_style: bool = False,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
    ) -> None:
        _require_boto3()
        if not isinstance(bucket, str) or not _BUCKET.fullmatch(bucket):
            raise ValueError(
                f"bucket must be 3 to 63 lowercase letters, digits, '.', '-' or '_', "
                f"starting and ending with a letter or digit, got {bucket!r:.100}"
            )
        if (access_key_id is None) != (secret_access_key is None):
            raise ValueError("access_key_id and secret_access_key must be given together")
        if session_token is not None and access_key_id is None:
            raise ValueError("session_token needs access_key_id and secret_access_key")
        self._bucket = bucket
        self._prefix = _normalize_prefix(prefix)
        self._store_uri = f"s3://{bucket}/{self._prefix}" if self._prefix else f"s3://{bucket}"
        require_short_image_uris(self._store_uri)
        self._endpoint_url = endpoint_url
        self._region_name = region_name
        self._force_path_style = force_path_style
        self._access_key_id = access_key_id
        self._secret_access_key = secret_access_key
        self._session_token = session_token
        self._init_runtime_state()
        if secret_access_key is not None:
            _redact_in_botocore_logs(secret_access_key, session_token)

    def _init_runtime_state(self) -> None:
        self._lock = threading.Lock()
        self._client_instance: S3Client | None = None
        self._conditional_writes = True

    @classmethod
    def from_store_uri(
        cls,
        store_uri: str,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        force_path_style: bool = False,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
    ) -> S3MediaStore:
        """Build a store from ``s3://bucket`` or ``s3://bucket/prefix``.

        Raises:
            ValueError: ``store_uri`` is not an ``s3://`` URI of a bucket and an
                optional prefix (no port, credentials, query or fragment).
        """
        parts = urlsplit(store_uri)
        if (
            parts.scheme != "s3"
            or not parts.netloc
            or parts.query
            or parts.fragment
            or "@" in parts.netloc
            or ":" in parts.netloc
        ):
            raise ValueError(f"store_uri must look like s3://bucket/prefix, got {store_uri!r:.200}")
        return cls(
            parts.netloc,
            parts.path,
            endpoint_url=endpoint_url,
            region_name=region_name,
            force_path_style=force_path_style,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            session_token=session_token,
        )

    @property
    def bucket(self) -> str:
        """The bucket name."""
        return self._bucket

    @property
    def prefix(self) -> str:
        """The key prefix without leading or trailing ``/``; ``""`` for none."""
        return self._prefix

    @property
    def store_uri(self) -> str:
        """``s3://<bucket>/<prefix>``: the prefix of every image URI."""
        return self._store_uri

    def __repr__(self) -> str:
        # Never the credentials.
        return (
            f"S3MediaStore(bucket={self._bucket!r}, prefix={self._prefix!r}, "
            f"endpoint_url={self._endpoint_url!r}, region_name={self._region_name!r}, "
            f"force_path_style={self._force_path_style!r})"
        )

    def __getstate__(self) -> dict[str, object]:
        return {
            "bucket": self._bucket,
            "prefix": self._prefix,
            "store_uri": self._store_uri,
            "endpoint_url": self._endpoint_url,
            "region_name": self._region_name,
            "force_path_style": self._force_path_style,
            "access_key_id": self._access_key_id,
            "secret_access_key": self._secret_access_key,
            "session_token": self._session_token,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, f"_{name}", value)
        self._init_runtime_state()
        if self._secret_access_key is not None:
            _redact_in_botocore_logs(self._secret_access_key, self._session_token)

    def close(self) -> None:
        """Close the client's connections; a later call makes a new client."""
        with self._lock:
            client, self._client_instance = self._client_instance, None
        if client is not None:
            client.close()

    def object_key(self, sha256: str) -> str:
        """The object key of the image with ``sha256``."""
        return f"{self._prefix}/sha256/{sha256}" if self._prefix else f"sha256/{sha256}"

    async def put_image(self, data: bytes) -> AgentImageReference:
        """Upload the image once and return its reference.

        Raises:
            ImageValidationError: ``data`` is not a supported image.
            MediaStoreError: The upload failed, or every attempt met a 409
                conflict and no object of the image's size exists.
        """
        reference = build_image_reference(data, self._store_uri)
        await asyncio.to_thread(self._upload, reference, bytes(data))
        return reference

    async def get_image(self, reference: AgentImageReference) -> bytes:
        """Read and verify the bytes of an image in this bucket and prefix.

        Raises:
            ImageValidationError: ``reference`` is malformed.
            MediaStoreError: The reference is outside this bucket and prefix, the
                object is missing or of the wrong size or content, or the read
                failed.
        """
        sha256 = require_store_image_reference(reference, self._store_uri)
        data = await asyncio.to_thread(self._download, reference, self.object_key(sha256))
        verify_image_bytes(reference, data)
        return data

    # -- blocking parts, run in a worker thread ------------------------------------

    def _client(self) -> S3Client:
        with self._lock:
            if self._client_instance is None:
                self._client_instance = self._make_client()
            return self._client_instance

    def _make_client(self) -> S3Client:
        import boto3.session
        import botocore.config

        session = boto3.session.Session(
            aws_access_key_id=self._access_key_id,
            aws_secret_access_key=self._secret_access_key,
            aws_session_token=self._session_token,
            region_name=self._region_name,
        )
        config = botocore.config.Config(
            s3={"addressing_style": "path" if self._force_path_style else "auto"},
            retries={"mode": "standard", "max_attempts": 3},
            # Checksums only where S3 requires them: many S3-compatible services
            # refuse the newer default checksum headers. Reads are verified by
            # SHA-256 and uploads carry Content-MD5.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        return session.client("s3", endpoint_url=self._endpoint_url, config=config)

    def _upload(self, reference: AgentImageReference, data: bytes) -> None:
        key = self.object_key(reference.sha256)
        if self._conditional_writes and self._upload_conditionally(reference, key, data):
            return
        # The service takes no conditional writes: HEAD first. Two writers may both
        # upload, but only the same bytes under the same key.
        if self._head_size(reference, key) == reference.size_bytes:
            return
        self._put_object(reference, key, data, conditional=False)

    def _upload_conditionally(self, reference: AgentImageReference, key: str, data: bytes) -> bool:
        """Upload with ``If-None-Match: *``; ``False`` if the service cannot do that."""
        from botocore.exceptions import ClientError

        for attempt in range(1, _CONDITIONAL_ATTEMPTS + 1):
            try:
                self._put_object(reference, key, data, conditional=True)
                return True
            except ClientError as error:
                status, code = _status(error)
                if status == 412 or code == "PreconditionFailed":
                    logger.debug("image %s already stored", reference.uri)
                    return True
                if status == 409 or code == "ConditionalRequestConflict":
                    logger.debug("conditional upload conflict %d for %s", attempt, reference.uri)
                    continue
                if status == 501 or code == "NotImplemented":
                    logger.info(
                        "S3 service at %s refuses conditional writes; checking with HEAD first",
                        self._endpoint_url or "AWS",
                    )
                    self._conditional_writes = False
                    return False
                message = f"cannot upload image {reference.uri!r}"
                raise self._error(message, error, reference) from error
        if self._head_size(reference, key) == reference.size_bytes:
            return True
        raise MediaStoreError(
            f"cannot upload image {reference.uri!r}: {_CONDITIONAL_ATTEMPTS} conditional uploads "
            "met 409 conflicts and no object of the image's size exists",
            uri=reference.uri,
        )

    def _put_object(
        self, reference: AgentImageReference, key: str, data: bytes, *, conditional: bool
    ) -> None:
        from botocore.exceptions import BotoCoreError

        md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
        try:
            if conditional:
                self._client().put_object(
                    Bucket=self._bucket,
                    Key=key,
                    Body=data,
                    ContentType=reference.mime_type,
                    ContentMD5=md5,
                    IfNoneMatch="*",
                )
            else:
                self._client().put_object(
                    Bucket=self._bucket,
                    Key=key,
                    Body=data,
                    ContentType=reference.mime_type,
                    ContentMD5=md5,
                )
        except BotoCoreError as error:
            raise MediaStoreError(
                f"cannot upload image {reference.uri!r}: {error}", uri=reference.uri
            ) from error

    def _head_size(self, reference: AgentImageReference, key: str) -> int | None:
        """The object's size, or ``None`` when it does not exist."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self._client().head_object(Bucket=self._bucket, Key=key)
        except ClientError as error:
            status, code = _status(error)
            if status == 404 or code in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._error(f"cannot check image {reference.uri!r}", error, reference) from error
        except BotoCoreError as error:
            raise MediaStoreError(
                f"cannot check image {reference.uri!r}: {error}", uri=reference.uri
            ) from error
        return int(response["ContentLength"])

    def _download(self, reference: AgentImageReference, key: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        uri = reference.uri
        try:
            response = self._client().get_object(Bucket=self._bucket, Key=key)
        except ClientError as error:
            status, code = _status(error)
            if status == 404 or code in ("NoSuchKey", "404", "NotFound"):
                raise MediaStoreError(f"image {uri!r} not found", uri=uri) from error
            raise self._error(f"cannot read image {uri!r}", error, reference) from error
        except BotoCoreError as error:
            raise MediaStoreError(f"cannot read image {uri!r}: {error}", uri=uri) from error
        body = response["Body"]
        try:
            length = response.get("ContentLength")
            if length != reference.size_bytes:
                raise MediaStoreError(
                    f"image object {uri!r} has Content-Length {length}; the reference says "
                    f"{reference.size_bytes}",
                    uri=uri,
                )
            return body.read(reference.size_bytes + 1)
        except BotoCoreError as error:
            raise MediaStoreError(f"cannot read image {uri!r}: {error}", uri=uri) from error
        finally:
            body.close()

    def _error(
        self, message: str, error: ClientError, reference: AgentImageReference
    ) -> MediaStoreError:
        status, code = _status(error)
        return MediaStoreError(
            f"{message}: S3 answered {status} {code or 'with no error code'}", uri=reference.uri
        )
