"""Dataset registry: mirror-before-Hub resolution, column mapping, malformed-row accounting."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rredcot.data.normalize import (
    last_boxed,
    load_normalized,
    normalize_rows,
    split_gsm8k_answer,
    stringify_answer,
)
from rredcot.data.registry import (
    KNOWN_BENCHMARKS,
    KNOWN_TRAINING_SETS,
    REGISTRY,
    DatasetUnavailableError,
    mirror_dir,
    registry_entry,
    resolve_source,
)
from rredcot.data.schema import COLUMNS, MalformedRowsError

README_ROWS = {
    "aime24": 30,
    "aime25": 30,
    "aime26": 30,
    "amc23": 40,
    "math500": 500,
    "minerva": 272,
    "gsm8k": 1319,
}


class FakeHub:
    """A stand-in for datasets.load_dataset that records its calls and returns fixed rows."""

    def __init__(self, rows: list[dict[str, Any]] | None = None, error: Exception | None = None):
        self.rows = rows or []
        self.error = error
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append((args, kwargs))
        if self.error is not None:
            raise self.error
        return self.rows


def write_jsonl(path: Path, lines: list[dict[str, Any] | str]) -> Path:
    """Rows as JSON lines; a str entry is written verbatim (to make broken lines)."""
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines),
        encoding="utf-8",
    )
    return path


# --- registry entries --------------------------------------------------------------------


def test_known_names_cover_the_paper_benchmarks_and_training_sets():
    assert KNOWN_BENCHMARKS == (
        "aime24",
        "aime25",
        "aime26",
        "amc23",
        "math500",
        "minerva",
        "gsm8k",
    )
    assert KNOWN_TRAINING_SETS == ("numina_cot", "open_rs")
    assert registry_entry("numina_cot").hub_id == "AI-MO/NuminaMath-CoT"
    assert registry_entry("open_rs").hub_id == "knoveleng/open-rs"
    assert registry_entry("gsm8k").config == "main"
    assert all(REGISTRY[n].task == "math" for n in (*KNOWN_BENCHMARKS, *KNOWN_TRAINING_SETS))


def test_revisions_are_commits_when_pinned_and_main_otherwise():
    for spec in REGISTRY.values():
        if spec.revision_pinned:
            assert re.fullmatch(r"[0-9a-f]{40}", spec.revision), spec.name
        else:
            assert spec.revision == "main", spec.name
    assert not registry_entry("open_rs").revision_pinned


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown dataset 'aime23'") as info:
        registry_entry("aime23")
    for name in (*KNOWN_BENCHMARKS, *KNOWN_TRAINING_SETS):
        assert name in str(info.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"columns": {"question": "q", "problem": "p", "answer": "a"}}, "not normalized fields"),
        ({"columns": {"answer": "a"}}, "must map 'problem'"),
        ({"answer_from": "regex"}, "not one of"),
        ({"answer_from": "last_boxed"}, "needs columns to map 'solution'"),
        ({"revision": "main"}, "40-hex commit"),
    ],
)
def test_spec_rejects_inconsistent_entries(change: dict[str, Any], message: str):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(registry_entry("aime25"), **change)


def test_spec_columns_are_read_only():
    with pytest.raises(TypeError):
        registry_entry("aime25").columns["problem"] = "x"  # type: ignore[index]


# --- mirror location ---------------------------------------------------------------------


def test_env_var_overrides_config_value(monkeypatch, tmp_path):
    monkeypatch.setenv("RREDCOT_MIRROR", str(tmp_path / "from_env"))
    assert mirror_dir("/somewhere/else") == tmp_path / "from_env"
    assert mirror_dir(None) == tmp_path / "from_env"


def test_empty_env_var_falls_back_to_config(monkeypatch, tmp_path):
    monkeypatch.setenv("RREDCOT_MIRROR", "  ")
    assert mirror_dir(str(tmp_path)) == tmp_path
    monkeypatch.delenv("RREDCOT_MIRROR")
    assert mirror_dir(str(tmp_path)) == tmp_path


def test_relative_config_path_resolves_against_cwd(monkeypatch, tmp_path):
    monkeypatch.delenv("RREDCOT_MIRROR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert mirror_dir("data/mirror") == tmp_path / "data" / "mirror"
    assert mirror_dir(None) is None
    assert mirror_dir("") is None


@pytest.mark.parametrize("text", ["null", "None", "~", " NULL "])
def test_null_as_text_means_no_mirror(monkeypatch, text):
    """`--config data='{mirror: null}'` passes the text 'null'; it and ~ mean no mirror, in the
    config key and (overriding the key) in the variable."""
    monkeypatch.delenv("RREDCOT_MIRROR", raising=False)
    assert mirror_dir(text) is None
    monkeypatch.setenv("RREDCOT_MIRROR", text)
    assert mirror_dir("/some/mirror") is None


# --- mirror before Hub -------------------------------------------------------------------


def test_mirror_file_is_used_and_hub_never_called(tmp_path):
    write_jsonl(tmp_path / "aime25.jsonl", [{"id": "a-1", "problem": "1+1?", "answer": "2"}])
    hub = FakeHub(error=AssertionError("the Hub must not be called"))
    source = resolve_source(registry_entry("aime25"), tmp_path, hub)
    assert hub.calls == []
    assert source.kind == "mirror"
    assert source.origin == f"mirror:{tmp_path / 'aime25.jsonl'}"
    assert [r.record for r in source.rows] == [{"id": "a-1", "problem": "1+1?", "answer": "2"}]


def test_hub_is_called_with_pinned_revision_when_mirror_lacks_the_file(tmp_path):
    write_jsonl(tmp_path / "aime24.jsonl", [{"id": "x", "problem": "p", "answer": "1"}])
    hub = FakeHub(rows=[{"question": "q?", "answer": "x\n#### 42"}])
    spec = registry_entry("gsm8k")
    source = resolve_source(spec, tmp_path, hub)
    assert hub.calls == [
        (("openai/gsm8k",), {"name": "main", "revision": spec.revision, "split": "test"})
    ]
    assert source.kind == "hub"
    assert source.origin == f"hub:openai/gsm8k@{spec.revision}"


def test_missing_everywhere_names_benchmark_paths_hub_and_fix(tmp_path):
    hub = FakeHub(error=ConnectionError("Hub unreachable"))
    with pytest.raises(DatasetUnavailableError) as info:
        load_normalized("minerva", tmp_path, 0.0, hub_loader=hub)
    msg = str(info.value)
    for part in (
        "'minerva'",
        str(tmp_path / "minerva.jsonl"),
        "math-ai/minervamath@",
        "ConnectionError: Hub unreachable",
        "RREDCOT_MIRROR",
        "data.mirror",
    ):
        assert part in msg
    assert isinstance(info.value.__cause__, ConnectionError)


def test_no_mirror_configured_says_so(tmp_path):
    with pytest.raises(DatasetUnavailableError, match="no mirror"):
        resolve_source(registry_entry("aime24"), None, FakeHub(error=OSError("offline")))


# --- malformed rows ----------------------------------------------------------------------


def _messy_mirror(tmp_path: Path) -> Path:
    return write_jsonl(
        tmp_path / "aime25.jsonl",
        [
            {"id": "ok-1", "problem": "P1", "answer": 70, "solution": ""},
            {"id": "no-answer", "problem": "P2"},
            {"id": "empty-problem", "problem": "   ", "answer": "5"},
            '{"id": "broken", "problem": ',
            {"id": "ok-1", "problem": "P1 again", "answer": "71"},
            {"problem": "P6 without id", "answer": "6", "extra": "kept"},
            "",
            {"id": "ok-7", "problem": "P7", "answer": 7.0},
        ],
    )


def test_malformed_rows_are_counted_listed_and_excluded(tmp_path):
    _messy_mirror(tmp_path)
    data = load_normalized("aime25", tmp_path, max_malformed_fraction=1.0)
    assert data.n_raw == 7  # the blank line is not a row
    assert data.df["id"].to_list() == ["ok-1", "aime25-5", "ok-7"]
    assert data.df["answer"].to_list() == ["70", "6", "7"]
    assert data.df.columns[:5] == list(COLUMNS)
    assert data.df["extra"].to_list() == [None, "kept", None]
    assert set(data.df["source"]) == {data.origin}
    reasons = dict(data.malformed)
    assert list(reasons) == ["no-answer", "empty-problem", "aime25-3", "ok-1"]
    assert "missing or empty answer" in reasons["no-answer"]
    assert "missing or empty problem" in reasons["empty-problem"]
    assert "line 4: unparseable JSON" in reasons["aime25-3"]
    assert "duplicate id (first at row 0)" in reasons["ok-1"]


def test_undecodable_row_is_a_malformed_row_with_its_line_number(tmp_path):
    """Invalid UTF-8 in one line goes through the malformed-row accounting, not a raw
    UnicodeDecodeError: the other rows load, and past the threshold the error names the row."""
    good = [{"id": f"ok-{i}", "problem": "P", "answer": str(i)} for i in range(3)]
    path = write_jsonl(tmp_path / "aime24.jsonl", good)
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(1, b'{"id": "latin1", "problem": "caf\xe9", "answer": "1"}\n')
    path.write_bytes(b"".join(lines))
    data = load_normalized("aime24", tmp_path, max_malformed_fraction=1.0)
    assert data.n_raw == 4
    assert data.df["id"].to_list() == ["ok-0", "ok-1", "ok-2"]
    [(row_id, reason)] = data.malformed
    assert row_id == "aime24-1"
    assert reason.startswith("line 2: not valid UTF-8")
    with pytest.raises(MalformedRowsError, match=r"1 of 4 rows malformed.*aime24-1"):
        load_normalized("aime24", tmp_path, max_malformed_fraction=0.0)


def test_fraction_threshold_raises_naming_the_rows(tmp_path):
    _messy_mirror(tmp_path)
    with pytest.raises(MalformedRowsError) as info:
        load_normalized("aime25", tmp_path, max_malformed_fraction=0.5)  # 4/7 > 0.5
    msg = str(info.value)
    assert "4 of 7 rows malformed" in msg
    for row_id in ("no-answer", "empty-problem", "aime25-3", "ok-1"):
        assert row_id in msg
    assert load_normalized("aime25", tmp_path, max_malformed_fraction=4 / 7).df.height == 3


def test_error_lists_first_twenty_ids_and_a_count(tmp_path):
    write_jsonl(tmp_path / "amc23.jsonl", [{"id": f"r{i}", "problem": "p"} for i in range(25)])
    with pytest.raises(MalformedRowsError) as info:
        load_normalized("amc23", tmp_path, max_malformed_fraction=0.0)
    msg = str(info.value)
    assert "r19" in msg and "r20," not in msg and "and 5 more" in msg


def test_empty_source_and_bad_fraction_are_errors(tmp_path):
    (tmp_path / "aime24.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="has no rows"):
        load_normalized("aime24", tmp_path, 0.0)
    write_jsonl(tmp_path / "aime24.jsonl", [{"id": "a", "problem": "p", "answer": "1"}])
    with pytest.raises(ValueError, match="max_malformed_fraction"):
        load_normalized("aime24", tmp_path, 1.5)


# --- column mapping from Hub tables ------------------------------------------------------


def test_gsm8k_marker_splits_solution_and_answer(tmp_path):
    hub = FakeHub(
        rows=[
            {"question": "Q1", "answer": "3 * 4 = <<3*4=12>>12\n#### 12"},
            {"question": "Q2", "answer": "Big.\n#### 1,234"},
            {"question": "Q3", "answer": "no marker here"},
        ]
    )
    data = load_normalized("gsm8k", tmp_path, 0.5, hub_loader=hub)
    assert data.df.select("id", "problem", "answer", "solution").rows() == [
        ("gsm8k-0", "Q1", "12", "3 * 4 = <<3*4=12>>12"),
        ("gsm8k-1", "Q2", "1234", "Big."),
    ]
    assert data.malformed == [("gsm8k-2", "answer not extractable: no '#### <answer>' in 'answer'")]
    assert data.df["source"][0] == f"hub:openai/gsm8k@{registry_entry('gsm8k').revision}"


def test_capitalized_columns_and_int_answers_are_mapped(tmp_path):
    spec = dataclasses.replace(
        registry_entry("aime24"),
        columns={"id": "ID", "problem": "Problem", "answer": "Answer", "solution": "Solution"},
    )
    hub = FakeHub(
        rows=[
            {"ID": "2024-I-1", "Problem": "Aya walks.", "Answer": 204, "Solution": "s"},
            {"ID": "2024-I-2", "Problem": "Logs.", "Answer": 25, "Solution": "t"},
        ]
    )
    data = normalize_rows(spec, resolve_source(spec, None, hub), 0.0)
    assert data.df.select("id", "problem", "answer", "solution").rows() == [
        ("aime24-2024-I-1", "Aya walks.", "204", "s"),
        ("aime24-2024-I-2", "Logs.", "25", "t"),
    ]
    assert data.malformed == [] and data.n_raw == 2


def test_amc_float_answers_and_aime26_problem_idx(tmp_path):
    amc = load_normalized(
        "amc23",
        tmp_path,
        0.0,
        hub_loader=FakeHub(rows=[{"id": 0, "question": "Q", "answer": 27.0, "url": "u"}]),
    )
    assert amc.df.select("id", "problem", "answer", "url").row(0) == ("amc23-0", "Q", "27", "u")
    aime = load_normalized(
        "aime26",
        tmp_path,
        0.0,
        hub_loader=FakeHub(rows=[{"problem_idx": 1, "problem": "P", "answer": 277}]),
    )
    assert aime.df.select("id", "answer").row(0) == ("aime26-1", "277")


def test_minerva_style_boxed_answers_come_from_the_solution(tmp_path):
    spec = dataclasses.replace(
        registry_entry("minerva"),
        columns={"problem": "problem", "solution": "solution"},
        answer_from="last_boxed",
    )
    hub = FakeHub(
        rows=[
            {"problem": "P", "solution": "so $s=\\boxed{1.6}$ cm", "subject": "Astro"},
            {"problem": "Q", "solution": "a \\boxed{1} then \\boxed{\\frac{1}{2}}"},
            {"problem": "R", "solution": "no box"},
        ]
    )
    data = normalize_rows(spec, resolve_source(spec, None, hub), 0.5)
    assert data.df["answer"].to_list() == ["1.6", "\\frac{1}{2}"]
    assert data.df["subject"].to_list() == ["Astro", None]
    assert data.malformed[0][0] == "minerva-2"
    assert "no closed \\boxed{}" in data.malformed[0][1]


def test_numina_boxed_answers_and_clashing_source_column(tmp_path):
    hub = FakeHub(
        rows=[
            {
                "source": "olympiads",
                "problem": "P",
                "solution": "Thus \\boxed{x^{2}+1}.",
                "messages": [{"role": "user", "content": "P"}],
            }
        ]
    )
    data = load_normalized("numina_cot", tmp_path, 0.0, hub_loader=hub)
    row = data.df.row(0, named=True)
    assert row["answer"] == "x^{2}+1"
    assert row["solution"] == "Thus \\boxed{x^{2}+1}."
    assert row["raw_source"] == "olympiads"
    assert row["source"].startswith("hub:AI-MO/NuminaMath-CoT@")
    assert row["messages"] == [{"role": "user", "content": "P"}]


def test_missing_mapped_hub_column_is_a_schema_error(tmp_path):
    hub = FakeHub(rows=[{"id": 1, "problem": "P", "final_answer": "1"}])
    with pytest.raises(ValueError, match=r"mapped column\(s\) \['answer'\] not in the source"):
        load_normalized("aime25", tmp_path, 0.0, hub_loader=hub)


def test_polars_and_mixed_type_extra_columns(tmp_path):
    table = pl.DataFrame({"id": ["a", "b"], "problem": ["P", "Q"], "answer": ["1", "2"]})
    data = load_normalized("aime25", tmp_path, 0.0, hub_loader=lambda *a, **k: table)
    assert data.df["id"].to_list() == ["aime25-a", "aime25-b"]
    write_jsonl(
        tmp_path / "aime25.jsonl",
        [
            {"problem": "P", "answer": "1", "level": 3},
            {"problem": "Q", "answer": "2", "level": "x"},
        ],
    )
    mixed = load_normalized("aime25", tmp_path, 0.0)
    assert mixed.df["level"].to_list() == ["3", "x"]


# --- answer extraction -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{42}", "42"),
        ("a \\boxed{1} b \\boxed{\\frac{3}{4}}.", "\\frac{3}{4}"),
        ("\\fbox{7}", "7"),
        ("so \\boxed 5$", "5"),
        ("\\boxed{ \\{1,2\\} }", "\\{1,2\\}"),
        ("unclosed \\boxed{12", None),
        ("\\boxed{}", None),
        ("no box at all", None),
    ],
)
def test_last_boxed(text: str, expected: str | None):
    assert last_boxed(text) == expected


@given(
    prefix=st.text(alphabet=st.characters(blacklist_characters="\\{}"), max_size=30),
    inner=st.text(alphabet=st.characters(blacklist_characters="\\{}"), max_size=20),
    nested=st.booleans(),
)
def test_last_boxed_recovers_any_balanced_content(prefix: str, inner: str, nested: bool):
    content = f"a{{{inner}}}b" if nested else f"a{inner}"
    assert last_boxed(f"{prefix}\\boxed{{{content}}} end") == content.strip()


def test_gsm8k_split_and_answer_stringification():
    assert split_gsm8k_answer("x = 2\n#### 2") == ("x = 2", "2")
    assert split_gsm8k_answer("#### -3,000") == ("", "-3000")
    assert split_gsm8k_answer("no marker") is None
    assert split_gsm8k_answer("x\n#### ") is None
    assert [stringify_answer(v) for v in (204, 27.0, 2.5, " 12\n", "")] == [
        "204",
        "27",
        "2.5",
        "12",
        None,
    ]
    assert [stringify_answer(v) for v in (None, True, float("nan"), [1])] == [None] * 4


# --- the real mirror ---------------------------------------------------------------------


@pytest.mark.parametrize("name", KNOWN_BENCHMARKS)
def test_real_mirror_file_loads_clean_with_readme_row_counts(name: str, mirror_file):
    mirror = mirror_file(name).parent
    data = load_normalized(name, mirror, max_malformed_fraction=0.0, hub_loader=FakeHub())
    assert data.malformed == []
    assert data.n_raw == data.df.height == README_ROWS[name]
    assert data.df["id"].n_unique() == data.df.height
    assert data.df["answer"].str.strip_chars().str.len_chars().min() > 0
    assert data.origin == f"mirror:{mirror / f'{name}.jsonl'}"


def test_an_unpinned_dataset_is_read_with_a_warning(tmp_path, caplog):
    """open_rs has no confirmed commit: every read says so in the log; pinned ones do not."""
    rows = [{"problem": "P", "solution": "S \\boxed{1}", "answer": "1", "level": "Easy"}]
    with caplog.at_level("WARNING", logger="rredcot.data.registry"):
        load_normalized("open_rs", tmp_path, 0.0, hub_loader=FakeHub(rows=rows))
    assert "'open_rs' is read at revision 'main' of knoveleng/open-rs" in caplog.text
    assert "not at a pinned commit" in caplog.text
    caplog.clear()
    write_jsonl(tmp_path / "aime25.jsonl", [{"id": "a-1", "problem": "1+1?", "answer": "2"}])
    with caplog.at_level("WARNING", logger="rredcot.data.registry"):
        load_normalized("aime25", tmp_path, 0.0)
    assert "pinned commit" not in caplog.text
    unpinned = [s.name for s in REGISTRY.values() if not s.revision_pinned]
    assert unpinned == ["open_rs"]  # every other registry dataset is at a 40-hex commit
