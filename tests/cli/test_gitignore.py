"""The .gitignore matcher against the cases of gitignore(5) that real projects use."""

from __future__ import annotations

import pytest

from trainyard_cli.gitignore import Matcher, parse_line


def matcher(text: str) -> Matcher:
    m = Matcher()
    m.add_lines(text)
    return m


def test_blank_lines_and_comments_are_no_patterns():
    assert parse_line("") is None
    assert parse_line("   ") is None
    assert parse_line("# a comment") is None
    assert matcher("\\#notes").ignored("#notes")


@pytest.mark.parametrize(
    ("pattern", "path", "ignored"),
    [
        ("*.log", "debug.log", True),
        ("*.log", "logs/deep/debug.log", True),  # no slash: any depth
        ("*.log", "debug.log.txt", False),
        ("debug?.txt", "debug1.txt", True),
        ("debug?.txt", "debug10.txt", False),
        ("data[0-9].bin", "data7.bin", True),
        ("data[!0-9].bin", "data7.bin", False),
        ("data[!0-9].bin", "datax.bin", True),
        ("/todo.txt", "todo.txt", True),  # anchored
        ("/todo.txt", "sub/todo.txt", False),
        ("doc/*.txt", "doc/notes.txt", True),  # a middle slash anchors too
        ("doc/*.txt", "doc/server/notes.txt", False),  # `*` never crosses a slash
        ("doc/*.txt", "sub/doc/notes.txt", False),
        ("**/cache", "cache", True),
        ("**/cache", "a/b/cache", True),
        ("out/**", "out/x/y.bin", True),
        ("out/**", "out", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "a/x/y/c", False),
        ("trailing.txt   ", "trailing.txt", True),  # trailing spaces dropped
        ("space\\ ", "space ", True),  # ...unless escaped
        ("\\!important", "!important", True),
    ],
)
def test_patterns(pattern, path, ignored):
    assert matcher(pattern).ignored(path) is ignored


def test_directory_patterns_match_directories_only():
    m = matcher("build/")
    assert m.ignored("build", is_dir=True)
    assert m.ignored("pkg/build", is_dir=True)
    assert not m.ignored("build", is_dir=False)  # a file named build stays


def test_negation_re_includes_and_the_last_match_wins():
    m = matcher("*.csv\n!keep.csv\n")
    assert m.ignored("data.csv")
    assert not m.ignored("keep.csv")
    assert matcher("!keep.csv\n*.csv\n").ignored("keep.csv")  # later patterns win


def test_a_file_in_an_ignored_directory_cannot_be_re_included():
    m = matcher("secret/\n!secret/ok.txt\n")
    assert m.path_ignored("secret/ok.txt")
    assert not m.ignored("secret/ok.txt")  # only the parent shuts it out


def test_a_subdirectory_ignore_file_applies_below_it_and_wins():
    m = Matcher()
    m.add_lines("*.bin\n")
    child = m.child("!weights.bin\nlocal.txt\n", "models")
    assert not child.ignored("models/weights.bin")
    assert child.ignored("models/other.bin")
    assert child.ignored("models/local.txt")
    assert not child.ignored("local.txt")  # the child's patterns stay in its folder
    assert m.ignored("models/weights.bin")  # the parent is unchanged
