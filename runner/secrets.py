"""Credentials never leave the process: redaction for everything the runner writes or prints.

A tracking URI may carry a password, a signed URL a token; everything written or logged passes
through `redact` first, and only the MLflow client itself sees the real URI.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any, TextIO

MASK = "***"
# scheme://user:password@ or scheme://token@ (Hydra writes overrides with escaped colons: http\://a\:b@); up to
# the host's `@`, the last one before the path: a password may hold an unencoded `@` (user:p@ss@host)
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*\\?://)(?P<userinfo>[^/\s'\"]+)@")
# the space after an HTTP authorization scheme: %20 or + in a URI, `\ ` in a Hydra override
_SPACE = r"(?:(?:\\?\s)+|%20|\+)"
_SCHEME = rf"(?:bearer|basic|digest|negotiate|token){_SPACE}"
# ?token=..., &X-Amz-Signature=..., password: ..., 'token': '...', --token ..., Hydra-escaped ?token\=..., a URI's
# ?key=..., Azure's AccountKey=...; an Authorization header keeps its scheme: Authorization: Bearer ***
_SECRET_VALUE = re.compile(
    r"(?i)(?P<name>(?P<flag>--)?\b[a-z0-9_-]*(?:password|passwd|pwd|token|secret|signature|credential|api[_-]?key|"
    r"(?:access|account)[_-]?key|(?<=[?&])key|auth(?:orization)?|sig))"
    r"(?P<sep>['\"]?\s*\\?[=:](?:\\?\s)*['\"]?|(?(flag)\s+(?!-)|(?!)))"
    rf"(?P<scheme>{_SCHEME})?(?P<value>[^\s&'\",;}}]+)"
)
# a bearer token wherever it stands (RFC 6750's token68 characters): a header printed without its name
BEARER = re.compile(rf"(?i)\b(?P<scheme>bearer{_SPACE})(?P<value>[a-z0-9._~+/-]+=*)")


def _mask_userinfo(match: re.Match[str]) -> str:
    user, colon, _ = match["userinfo"].partition(":")
    return f"{match['scheme']}{user}{colon}{MASK}@" if colon else f"{match['scheme']}{MASK}@"


def redact(text: str) -> str:
    """The text with URI passwords, bare URI tokens, secret-named values and bearer tokens masked."""
    text = _USERINFO.sub(_mask_userinfo, text)
    text = _SECRET_VALUE.sub(lambda m: f"{m['name']}{m['sep']}{m['scheme'] or ''}{MASK}", text)
    return BEARER.sub(lambda m: f"{m['scheme']}{MASK}", text)


def one_line(error: BaseException) -> str:
    """An exception as one line, secrets masked: a client's error repeats the URI it could not reach."""
    message = str(error).strip().splitlines()
    return redact(f"{type(error).__name__}: {message[0]}" if message else type(error).__name__)


def redact_tree(tree: Any) -> Any:
    """A copy of nested dicts and lists with every string redacted."""
    if isinstance(tree, dict):
        return {key: redact_tree(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [redact_tree(value) for value in tree]
    return redact(tree) if isinstance(tree, str) else tree


def redact_file(path: Path) -> None:
    """Rewrite a text file (Hydra's .hydra/*.yaml, multirun.yaml) with its secrets masked."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return
    clean = redact(text)
    if clean != text:
        temporary = path.with_name(f".{path.name}.redacted")
        temporary.write_text(clean)
        temporary.replace(path)


class _RedactedStream:
    """A text stream that masks secrets in what is written to it; everything else is the stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        """Write `text` with its secrets masked."""
        return self.stream.write(redact(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def redact_process_output() -> None:
    """Mask secrets in everything this process prints or logs, whoever writes it.

    Log records are masked where they are made, for every handler; the terminal streams too, for what
    bypasses logging (Hydra prints a failed job's overrides, and callback errors holding the tracking URI).
    """
    if not isinstance(sys.stderr, _RedactedStream):
        sys.stdout, sys.stderr = _RedactedStream(sys.stdout), _RedactedStream(sys.stderr)
    make_record = logging.getLogRecordFactory()
    if getattr(make_record, "redacts", False):
        return

    def redacted_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed call is logging's to report, at emit time, as usual
            return record
        record.msg, record.args = redact(message), None
        if record.exc_info:  # formatters use exc_text when it is set
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    redacted_record.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacted_record)
