"""Secret masking: every value in the spec's `mask` list, and its encoded forms, becomes `***`.

The runner masks each line before it is spooled; the control plane imports `Masker` from here
and masks again at ingestion. So this module stays dependency-free and cheap: the forms are
computed once, and a line is masked by one compiled regex alternation.

Forms of a value `v` (only values of at least `MIN_VALUE_CHARS` characters are masked; a
shorter one would blank out ordinary words):

- `v` itself;
- its base64 forms, standard and url-safe, at all three byte alignments. Inside a longer
  base64 blob, `v`'s bytes start at byte offset 0, 1 or 2 of a 3-byte group, and only the
  characters of `base64(prefix + v)` whose six bits all come from `v` are fixed; the others
  depend on the neighbouring bytes. A form is those fixed characters, kept when it has at
  least `MIN_BASE64_CHARS` of them (shorter runs match too much ordinary text);
- its URL-encoded forms `quote(v, safe='')` and `quote_plus(v)`, when they differ from `v`.

Forms are tried longest first, so where two forms start at the same place the longer wins and
no fragment of a secret is left next to a `***`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

MASK = "***"
MIN_VALUE_CHARS = 4
MIN_BASE64_CHARS = 6


def _base64_forms(raw: bytes) -> list[str]:
    forms = []
    for prefix_len in (0, 1, 2):
        encoded = base64.b64encode(b"\0" * prefix_len + raw).decode("ascii")
        # Output character i carries bits [6i, 6i + 6) of the input; v occupies bits
        # [8 * prefix_len, 8 * (prefix_len + len(raw))).
        start = -(-8 * prefix_len // 6)
        end = (8 * (prefix_len + len(raw))) // 6
        fixed = encoded[start:end]
        if len(fixed) >= MIN_BASE64_CHARS:
            forms.append(fixed)
            forms.append(fixed.replace("+", "-").replace("/", "_"))
    return forms


def mask_forms(values: Iterable[str]) -> list[str]:
    """Every string that must be masked for `values`, without duplicates, longest first.

    Values shorter than `MIN_VALUE_CHARS` characters (and non-strings) are ignored. Ties in
    length are ordered alphabetically so the result does not depend on the input's order.
    """
    forms: set[str] = set()
    for value in values:
        if not isinstance(value, str) or len(value) < MIN_VALUE_CHARS:
            continue
        forms.add(value)
        forms.update(_base64_forms(value.encode("utf-8")))
        for encoded in (quote(value, safe=""), quote_plus(value)):
            if encoded != value:
                forms.add(encoded)
    return sorted(forms, key=lambda form: (-len(form), form))


class Masker:
    """Replaces every form of the given values with `***`.

    `max_form_len` is the length of the longest form (0 when there is none): a caller that
    masks a stream piece by piece must hold back `max_form_len - 1` characters so a value
    that straddles two pieces is still seen whole (see `mask_prefix`).
    """

    def __init__(self, values: Iterable[str]) -> None:
        self.forms = mask_forms(values)
        self.max_form_len = len(self.forms[0]) if self.forms else 0
        self._pattern = (
            re.compile("|".join(re.escape(form) for form in self.forms)) if self.forms else None
        )

    def __bool__(self) -> bool:
        return self._pattern is not None

    def mask(self, text: str) -> str:
        """`text` with every form replaced by `***`."""
        if self._pattern is None:
            return text
        return self._pattern.sub(MASK, text)

    def mask_prefix(self, text: str, cut: int) -> tuple[str, int]:
        """Mask the part of `text` that later text cannot change.

        Requires `cut <= len(text) - (max_form_len - 1)`: then a form starting before `cut`
        lies wholly inside `text`, so what happens at those positions is final. Returns the
        masked text of `text[:consumed]` and `consumed`, which is `cut` or, when a match
        starts before `cut` and ends after it, that match's end. Masking
        `text[consumed:] + more` later gives the same result as masking `text + more` at once.
        """
        if self._pattern is None:
            return text[:cut], cut
        out = []
        pos = 0
        for match in self._pattern.finditer(text):
            if match.start() >= cut:
                break
            out.append(text[pos : match.start()])
            out.append(MASK)
            pos = match.end()
        end = max(pos, cut)
        out.append(text[pos:end])
        return "".join(out), end
