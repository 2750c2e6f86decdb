"""Masking: a secret and its base64 / URL-encoded forms become `***`."""

from __future__ import annotations

import base64
from urllib.parse import quote, quote_plus

import pytest

from runner.masking import Masker, mask_forms

SECRET = "hf_SuperSecretToken42"


def test_it_masks_the_raw_value():
    assert Masker([SECRET]).mask(f"token={SECRET}; again {SECRET}") == "token=***; again ***"


@pytest.mark.parametrize("prefix", [b"", b"x", b"xx", b"xyz", b"wxyz"])
@pytest.mark.parametrize("suffix", [b"", b"y", b"yy", b"yyy"])
def test_it_masks_base64_at_every_alignment_inside_a_longer_blob(prefix, suffix):
    masker = Masker([SECRET])
    blob = base64.b64encode(prefix + SECRET.encode() + suffix).decode()

    masked = masker.mask(f"Authorization: Basic {blob}")

    assert "***" in masked
    # What is left of the blob is at most the characters that mix in the neighbours' bits.
    leftover = masked.removeprefix("Authorization: Basic ").replace("***", "")
    assert len(leftover) <= len(base64.b64encode(prefix)) + len(base64.b64encode(suffix)) + 2
    for form in masker.forms:
        assert form not in masked


def test_it_masks_url_safe_base64():
    value = "s3cr?t>>~~?ü"  # its base64 has '+' and '/'
    standard = base64.b64encode(value.encode()).decode()
    url_safe = base64.urlsafe_b64encode(value.encode()).decode()
    assert standard != url_safe

    masker = Masker([value])

    # The last characters and the padding also carry bits of whatever follows the value,
    # so they are not part of any form; everything before them is masked.
    for blob in (standard, url_safe):
        masked = masker.mask(f"a {blob} b")
        assert masked.startswith("a ***")
        assert len(masked) <= len("a *** b") + 3
        assert not any(form in masked for form in masker.forms)


def test_it_masks_url_encoded_forms():
    value = "p@ss word/x"
    masker = Masker([value])

    assert masker.mask(f"https://h/?k={quote(value, safe='')}&z=1") == "https://h/?k=***&z=1"
    assert masker.mask(f"https://h/?k={quote_plus(value)}&z=1") == "https://h/?k=***&z=1"
    assert quote(value, safe="") in mask_forms([value])
    assert quote_plus(value) in mask_forms([value])


def test_it_ignores_values_shorter_than_four_characters():
    assert mask_forms(["abc", "", "xy"]) == []
    assert Masker(["abc"]).mask("abc abc") == "abc abc"
    assert not Masker([])
    assert Masker([]).mask("anything") == "anything"


def test_it_keeps_no_base64_form_shorter_than_six_characters():
    forms = mask_forms(["abcd"])  # 4 bytes: at most 5 fixed base64 characters

    assert forms == ["abcd"]


def test_it_orders_forms_longest_first_so_the_longer_value_wins():
    forms = mask_forms(["abcdef", "abcdefgh"])
    assert [len(form) for form in forms] == sorted((len(form) for form in forms), reverse=True)

    assert Masker(["abcdef", "abcdefgh"]).mask("xabcdefghx") == "x***x"
    assert Masker(["abcdefgh", "abcdef"]).mask("xabcdefghx abcdefx") == "x***x ***x"


def test_mask_prefix_then_rest_equals_masking_at_once():
    masker = Masker([SECRET, "another-secret"])
    text = f"aa{SECRET}bb{base64.b64encode(SECRET.encode()).decode()}cc another-secret dd"
    for cut_at in range(len(text) + 1):
        if cut_at > len(text) - (masker.max_form_len - 1):
            continue
        head, consumed = masker.mask_prefix(text, cut_at)
        assert consumed >= cut_at
        assert head + masker.mask(text[consumed:]) == masker.mask(text)
