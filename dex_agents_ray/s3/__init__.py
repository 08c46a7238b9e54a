"""``S3MediaStore``: image bytes in AWS S3 or an S3-compatible bucket.

Needs the ``s3`` extra (``pip install "dex-agents-ray[s3]"``, which adds
boto3). Importing this module does not import boto3; constructing a store
without it raises ``ImportError`` naming the extra.
"""

from ._store import S3MediaStore

__all__ = ["S3MediaStore"]
