"""The docs say what the code does: README.md stays a five-minute read that links the manuals, the
configuration fields the bring-up manual lists are the parser's, and no doc quotes a line number of
submission.py (they move with every edit)."""
import dataclasses
import re

import pytest

from conftest import ROOT

import submission

DOCS = ["README.md", "BENCHMARKS.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def test_the_readme_is_short_and_links_each_manual():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for manual in ("docs/eval.md", "docs/emulator.md", "docs/b200-bring-up.md"):
        assert f"]({manual})" in text and (ROOT / manual).is_file(), manual


def _values_as_docs_write_them(field) -> list[str]:
    shipped = getattr(submission.SM100_SHIPPED, field.name)
    if isinstance(shipped, bool):
        return ["off", "on"]
    allowed = {"cta_group": (2, 1), "cluster_pairs": (2, 1), "token_variants": submission.TOKEN_VARIANT_SETS,
               "epilogue": submission.EPILOGUE_KINDS, "descriptors": ("selp", "branch"),
               "jobs": submission.JOB_POLICIES}[field.name]
    return sorted(submission._config_value(v) for v in allowed)


def test_the_bring_up_manual_lists_every_configuration_field_with_its_values():
    text = " ".join((ROOT / "docs" / "b200-bring-up.md").read_text().split())
    listed = dict(re.findall(r"`(\w+)` \(([^)]*)\)", text.split("Fields (", 1)[1].split(". A combination")[0]))
    fields = dataclasses.fields(submission.Sm100Config)
    assert list(listed) == [f.name for f in fields]
    for field in fields:
        assert sorted(v.strip() for v in listed[field.name].split(",")) == _values_as_docs_write_them(field), field.name


@pytest.mark.parametrize("doc", DOCS)
def test_no_doc_quotes_a_line_number_of_submission_py(doc):
    text = (ROOT / doc).read_text()
    assert not re.findall(r"line \d+ of submission\.py|submission\.py:\d+", text)
