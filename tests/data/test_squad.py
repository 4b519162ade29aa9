import gzip
import json

import pytest

from rckit.data.squad import SquadFormatError, read_squad
from tests.conftest import DEV_PARAS, squad_json, write_json


def test_reads_plain_and_gzip_with_all_answers(tmp_path):
    doc = squad_json(DEV_PARAS)
    for gz in (False, True):
        ds = read_squad(write_json(tmp_path / f"d{gz}.json", doc, gz=gz))
        (ex,) = ds.examples
        assert ex.qid == "d1" and [a.text for a in ex.answers] == ["1889", "in 1889"]
        assert [a.start for a in ex.answers] == [55, 52]
        assert ex.context[ex.answers[1].start : ex.answers[1].end] == "in 1889"
        assert ds.report.questions == 1 and ds.report.answers == 2 and not ds.report.misaligned


def test_v2_no_answer_questions_kept(tmp_path):
    doc = squad_json([("Some text here.", [("a", "q?", [("text", 5)]), ("b", "q2?", [], True)])], version="2.0")
    ds = read_squad(write_json(tmp_path / "v2.json", doc))
    assert [e.is_impossible for e in ds.examples] == [False, True]
    assert ds.report.version == "2.0" and ds.report.impossible == 1


def test_bad_json_names_file_and_line(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text('{"data": [\n  {"title": "x",,}]}')
    with pytest.raises(SquadFormatError, match=r"broken\.json.*line 2"):
        read_squad(p)


def test_truncated_gzip_is_an_error_naming_the_file(tmp_path):
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gzip.compress(json.dumps(squad_json(DEV_PARAS)).encode())[:-30])
    with pytest.raises(SquadFormatError, match=r"cut\.json\.gz"):
        read_squad(p)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda qa: qa.pop("question"), r"question id 'd1': missing field 'question'"),
        (lambda qa: qa["answers"][0].pop("answer_start"), r"question id 'd1' answer 0: missing field 'answer_start'"),
        (lambda qa: qa["answers"][0].update(answer_start="55"), r"'answer_start' should be int"),
        (lambda qa: qa.update(answers=[]), r"question id 'd1': no answers"),
    ],
)
def test_missing_or_wrong_fields_name_file_and_question(tmp_path, mutate, message):
    doc = squad_json(DEV_PARAS)
    mutate(doc["data"][0]["paragraphs"][0]["qas"][0])
    p = write_json(tmp_path / "bad.json", doc)
    with pytest.raises(SquadFormatError, match=r"bad\.json.*" + message):
        read_squad(p)


def test_duplicate_ids_rejected(tmp_path):
    doc = squad_json([("ctx one", [("x", "q", [("one", 4)]), ("x", "q", [("one", 4)])])])
    with pytest.raises(SquadFormatError, match="duplicate question id"):
        read_squad(write_json(tmp_path / "dup.json", doc))


def test_misaligned_answer_reported_not_dropped(tmp_path):
    doc = squad_json([("The Eiffel Tower is in Paris.", [("m", "Where?", [("Paris", 3), ("Paris", 23)])])])
    p = write_json(tmp_path / "mis.json", doc)
    ds = read_squad(p)
    (ex,) = ds.examples
    assert [a.text for a in ex.answers] == ["Paris", "Paris"]  # the answer text is kept
    assert ex.answers[0].start is None and ex.answers[1].start == 23
    (m,) = ds.report.misaligned
    assert (m.qid, m.answer_index, m.found) == ("m", 0, " Eiff")
    with pytest.raises(SquadFormatError, match=r"mis\.json: question id 'm' answer 0: answer_start 3"):
        read_squad(p, strict=True)


@pytest.mark.realdata
def test_real_dev_files(shared_data):
    v1 = read_squad(shared_data / "squad-v1.1" / "dev-v1.1.json.gz")
    assert (v1.report.articles, v1.report.contexts, v1.report.questions, v1.report.answers) == (48, 2067, 10570, 34726)
    assert not v1.report.misaligned and v1.report.version == "1.1"
    v2 = read_squad(shared_data / "squad-v2.0" / "dev-v2.0.reconstructed.json.gz")
    assert v2.report.questions == 11873 and v2.report.impossible == 5945 and v2.report.version == "2.0"
    assert all(not e.answers for e in v2.examples if e.is_impossible)


@pytest.mark.parametrize(
    "declared,impossible,rules",
    [
        ("1.0", False, "1.1"),
        ("v1.0", False, "1.1"),
        ("1.1", False, "1.1"),
        (None, False, "1.1"),
        ("v2.0", False, "2.0"),
        ("1.0", True, "2.0"),
    ],
)
def test_any_version_field_is_read_and_the_rules_follow_the_questions(tmp_path, declared, impossible, rules):
    """Public sets in SQuAD's layout write "1.0" and others: read as they are; a file with
    is_impossible questions is scored by the v2.0 rules whatever its field says."""
    import json as json_

    from rckit.evaluation.squad_metrics import score_files

    doc = squad_json(
        [("Denver won in Oslo.", [("a", "Who won?", [("Denver", 0)]), ("b", "Who lost?", [], True)])], version="2.0"
    )
    if not impossible:
        doc["data"][0]["paragraphs"][0]["qas"] = doc["data"][0]["paragraphs"][0]["qas"][:1]
    for qa in doc["data"][0]["paragraphs"][0]["qas"]:
        qa["is_impossible"] = bool(qa["is_impossible"]) if impossible else False
    if declared is None:
        del doc["version"]
    else:
        doc["version"] = declared
    path = write_json(tmp_path / "set.json", doc)
    ds = read_squad(path)
    assert ds.report.version == rules and ds.report.declared == (declared or "")
    preds = tmp_path / "p.json"
    preds.write_text(json_.dumps({"a": "Denver", "b": ""}))
    result = score_files(path, preds)
    assert result["f1"] == 100.0 and ("HasAns_f1" in result) == (rules == "2.0")  # the v2.0 breakdown
