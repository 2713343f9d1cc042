"""Untrusted text made harmless for a terminal, an HTML page or a JSON file, before any of them sees it.

Text from a model, a tool or a user can carry control characters a terminal obeys (escape sequences, carriage
returns, bidirectional overrides) or a lone surrogate that cannot be encoded. `clean_text` and `clean_line` make
them visible (``\\x1b``); `escape_for_json` does so losslessly. Masking personal data is `guards.mask_pii`'s job.
"""

from __future__ import annotations

import logging
import re

from shared_tools.guards import mask_pii

# C0 controls except tab and line feed, DEL, C1 controls, the bidirectional embeddings, overrides and isolates
# (U+202A-U+202E, U+2066-U+2069: "Trojan Source" reordering), and surrogates.
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_LAYOUT = re.compile(r"\r\n|[\t\n]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# What JSON text must not carry raw although json.dumps(ensure_ascii=False) leaves it so (it escapes only C0).
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _pair_surrogates(text: str) -> str:
    """Join surrogate pairs into the character they stand for; a lone surrogate becomes U+FFFD."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_text(text: str) -> str:
    """`text` with its line breaks and tabs kept as layout, every other control character shown as ``\\x..``."""
    text = _pair_surrogates(text.replace("\r\n", "\n"))
    return _UNSAFE.sub(_visible, text)


def clean_line(text: str) -> str:
    """`clean_text` on one line: line breaks and tabs become spaces, so one value cannot start a line of its own."""
    return clean_text(_LAYOUT.sub(" ", text))


def escape_for_json(text: str) -> str:
    """JSON text (as `json.dumps` writes it) with DEL, C1 controls, bidi controls and surrogates as ``\\uXXXX``.

    Lossless: a JSON reader gets the same string back. The characters escaped occur only inside JSON strings
    (json.dumps writes everything else in ASCII), where ``\\uXXXX`` is their standard escape; a lone surrogate
    escaped this way is also what makes the text encodable as UTF-8 at all.
    """
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class SafeLogFormatter(logging.Formatter):
    """Log lines reach the terminal too: personal data masked, control characters made visible."""

    def format(self, record: logging.LogRecord) -> str:
        return clean_text(mask_pii(super().format(record)))
