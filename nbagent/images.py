"""Images that go with a task or come back from a tool: ``ImageDocument`` and how to make one.

A model-layer concept (tasks, MCP tool results and the multimodal worker all carry images),
so it lives below the workers; ``nbagent.workers.multimodal`` re-exports it. Saved runs name
it ``nbagent.images:ImageDocument``; files that name its old home still load.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["ImageDocument", "to_image_document"]

_REMOTE = ("http://", "https://")
_MIME_RE = re.compile(r"^image/[a-z0-9.+-]{1,40}$")
_DATA_URL_RE = re.compile(r"^data:(image/[a-z0-9.+-]{1,40});base64,([A-Za-z0-9+/=\s]*)$", re.IGNORECASE)


def _sniff(data: bytes) -> str | None:
    """The image type from the first bytes, for the common web formats."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    head = data[:256].lstrip().lower()
    if head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in head):
        return "image/svg+xml"
    return None


class ImageDocument(BaseModel):
    """One image: exactly one of ``image`` (base64 text), ``image_path`` or ``image_url``."""

    model_config = ConfigDict(frozen=True)

    image: str | None = Field(default=None, description="The image's bytes, base64-encoded.")
    image_path: str | None = Field(default=None, description="A local file.")
    image_url: str | None = Field(default=None, description="An http(s) or data: URL.")
    image_mimetype: str | None = Field(default=None, description="e.g. image/png; guessed if not given.")
    text: str | None = Field(default=None, description="A caption, shown under the thumbnail.")

    @model_validator(mode="after")
    def _one_source(self) -> ImageDocument:
        given = [n for n in ("image", "image_path", "image_url") if getattr(self, n)]
        if len(given) != 1:
            raise ValueError(
                f"an ImageDocument needs exactly one of image (base64), image_path or image_url, "
                f"got {given or 'none'}"
            )
        if self.image_url and not (
            self.image_url.startswith(_REMOTE) or _DATA_URL_RE.match(self.image_url)
        ):
            raise ValueError(
                f"image_url must be an http(s):// URL or a base64 data:image/... URL, got "
                f"{self.image_url[:80]!r}"
            )
        if self.image_mimetype is not None and not _MIME_RE.match(self.image_mimetype):
            raise ValueError(f"image_mimetype must look like image/png, got {self.image_mimetype!r}")
        if self.image is not None:
            try:
                base64.b64decode(self.image, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("image must be base64 text (pass raw bytes to to_image_document)") from None
        return self

    @property
    def is_remote(self) -> bool:
        """An http(s) URL: the model fetches it; nbagent never does."""
        return bool(self.image_url and self.image_url.startswith(_REMOTE))

    def data(self) -> bytes | None:
        """The image's bytes (None for a remote URL). Reads a local file each time.

        Example:

        >>> import base64
        >>> from nbagent import ImageDocument
        >>> PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
        >>> doc = ImageDocument(image=base64.b64encode(PNG).decode())
        >>> doc.data() == PNG, ImageDocument(image_url="https://example.org/cat.png").data()  # a remote image is never fetched
        (True, None)
        """
        if self.image is not None:
            return base64.b64decode(self.image)
        if self.image_path is not None:
            try:
                return Path(self.image_path).read_bytes()
            except OSError as err:
                raise FileNotFoundError(
                    f"cannot read image file {self.image_path!r}: {err.strerror or err}"
                ) from None
        m = _DATA_URL_RE.match(self.image_url or "")
        return base64.b64decode(m.group(2)) if m else None

    def mimetype(self, data: bytes | None = None) -> str:
        """The declared type, else sniffed from the bytes, else guessed from the file name.

        Example:

        >>> import base64
        >>> from nbagent import ImageDocument
        >>> PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
        >>> ImageDocument(image=base64.b64encode(PNG).decode()).mimetype()  # sniffed from the bytes
        'image/png'
        >>> ImageDocument(image_url="https://example.org/cat.jpg").mimetype()  # guessed from the name
        'image/jpeg'
        """
        if self.image_mimetype:
            return self.image_mimetype
        m = _DATA_URL_RE.match(self.image_url or "")
        if m:
            return m.group(1).lower()
        if data is None and not self.is_remote:
            data = self.data()
        sniffed = _sniff(data) if data else None
        if sniffed:
            return sniffed
        name = self.image_path or self.image_url or ""
        guessed = mimetypes.guess_type(name.split("?", 1)[0])[0]
        if guessed and guessed.startswith("image/"):
            return guessed
        raise ValueError(
            f"cannot tell the image type of {self.describe()!r}; pass image_mimetype='image/png' "
            "(or jpeg, gif, webp)"
        )

    def url(self) -> str:
        """What a vision model is sent: the http(s) URL as is, else a base64 data URL.

        Example:

        >>> import base64
        >>> from nbagent import ImageDocument
        >>> PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
        >>> ImageDocument(image=base64.b64encode(PNG).decode()).url()[:30]
        'data:image/png;base64,iVBORw0K'
        >>> ImageDocument(image_url="https://example.org/cat.png").url()  # sent as it is
        'https://example.org/cat.png'
        """
        if self.is_remote:
            return self.image_url  # type: ignore[return-value]
        if self.image_url:  # already a data URL
            return self.image_url
        data = self.data()
        assert data is not None
        return f"data:{self.mimetype(data)};base64,{base64.b64encode(data).decode('ascii')}"

    def describe(self) -> str:
        """A short name for messages and captions (never the image data).

        Example:

        >>> from nbagent import ImageDocument
        >>> ImageDocument(image_path="photos/cat.png").describe(), ImageDocument(image="iVBORw0K").describe()
        ('photos/cat.png', 'inline image')
        """
        if self.image_path:
            return self.image_path
        if self.is_remote:
            return self.image_url  # type: ignore[return-value]
        return "inline image"


def to_image_document(value: Any) -> ImageDocument:
    """An ``ImageDocument`` from a path (str or Path), bytes, a URL, a dict or a document.

    A path must name an existing file (checked now, so a typo is found when the task is made).
    """
    if isinstance(value, ImageDocument):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ImageDocument(image=base64.b64encode(bytes(value)).decode("ascii"))
    if isinstance(value, dict):
        return ImageDocument(**value)
    if isinstance(value, os.PathLike) or isinstance(value, str):
        text = os.fspath(value)
        if isinstance(value, str) and (text.startswith(_REMOTE) or text.startswith("data:")):
            return ImageDocument(image_url=text)
        if not os.path.isfile(text):
            raise FileNotFoundError(f"image file {text!r} does not exist (give a path, bytes or an http(s) URL)")
        return ImageDocument(image_path=text)
    # the reference's ImageDocument and look-alikes: read their fields
    fields = {k: getattr(value, k, None) for k in ("image", "image_path", "image_url", "image_mimetype", "text")}
    if any(fields[k] for k in ("image", "image_path", "image_url")):
        return ImageDocument(**{k: v for k, v in fields.items() if v is not None})
    raise TypeError(
        f"an image must be a path, bytes, an http(s)/data URL, a dict or an ImageDocument, "
        f"got {type(value).__name__}"
    )
