import math
import re
import shutil

import ir_measures
import pytest

from graphdoc.errors import GraphDocError
from graphdoc.retrieval.evaluation import (
    DEFAULT_MEASURES,
    evaluate,
    evaluate_per_query,
    format_markdown_table,
    format_table,
    parse_measures,
)

QRELS = {"q1": {"d1": 1, "d3": 1, "d5": 0}, "q2": {"d9": 2}, "q3": {"d7": 1}}
RUN = {
    "q1": {"d1": 0.9, "d2": 0.8, "d3": 0.7, "d5": 0.6},
    "q2": {"d8": 0.5, "d9": 0.4},
    "q4": {"d1": 1.0},  # no qrels: ignored
}
NDCG_Q1 = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
NDCG_Q2 = (2 / math.log2(3)) / 2


def test_per_query_exact():
    per_query = evaluate_per_query(RUN, QRELS)
    assert per_query["q1"] == pytest.approx(
        {"nDCG@10": NDCG_Q1, "nDCG@20": NDCG_Q1, "P@20": 2 / 20, "RR@100": 1.0, "R@100": 1.0}, rel=1e-12
    )
    assert per_query["q2"] == pytest.approx(
        {"nDCG@10": NDCG_Q2, "nDCG@20": NDCG_Q2, "P@20": 1 / 20, "RR@100": 0.5, "R@100": 1.0}, rel=1e-12
    )
    assert per_query["q3"] == dict.fromkeys(DEFAULT_MEASURES, 0.0)  # in qrels, not in the run
    assert set(per_query) == {"q1", "q2", "q3"}


def test_measures_are_computed_without_a_usable_temporary_folder(monkeypatch):
    """The check of each measure held a tool's stderr in a temporary file: with no writable temporary folder,
    nDCG@10 itself was called a measure that 'cannot be computed here'."""
    import tempfile

    from graphdoc.retrieval import evaluation

    def no_folder(*args, **kwargs):
        raise FileNotFoundError(2, "No usable temporary directory found in ['/tmp']")

    monkeypatch.setattr(evaluation.tempfile, "TemporaryFile", no_folder)
    assert tempfile.TemporaryFile is no_folder
    evaluation.check_computable(parse_measures(["nDCG@10", "R@100"]))  # what eval and tune-fusion check first
    assert evaluate(RUN, QRELS, ["nDCG@10"])["nDCG@10"] == pytest.approx((NDCG_Q1 + NDCG_Q2) / 3, rel=1e-12)


def test_aggregate_is_mean_over_qrels_queries():
    result = evaluate(RUN, QRELS)
    assert list(result) == list(DEFAULT_MEASURES)
    assert result == pytest.approx(
        {
            "nDCG@10": (NDCG_Q1 + NDCG_Q2) / 3,
            "nDCG@20": (NDCG_Q1 + NDCG_Q2) / 3,
            "P@20": 0.15 / 3,
            "RR@100": 1.5 / 3,
            "R@100": 2 / 3,
        },
        rel=1e-12,
    )
    reference = ir_measures.calc_aggregate(parse_measures(DEFAULT_MEASURES), QRELS, RUN)
    assert result == pytest.approx({str(m): v for m, v in reference.items()}, rel=1e-12)


def test_counts_are_summed_as_ir_measures_sums_them():
    qrels, run = {"q1": {"d1": 1}, "q2": {"d2": 1}}, {"q1": {"d1": 2.0, "d3": 1.0}, "q2": {"d2": 1.0}}
    names = ["NumQ", "NumRet", "NumRel", "NumRelRet", "nDCG@10"]
    assert evaluate(run, qrels, names) == {"NumQ": 2.0, "NumRet": 3.0, "NumRel": 2.0, "NumRet(rel=1)": 2.0,
                                           "nDCG@10": 1.0}
    reference = ir_measures.calc_aggregate(parse_measures(names), qrels, run)
    assert evaluate(run, qrels, names) == pytest.approx({str(m): v for m, v in reference.items()})


def test_a_query_the_run_lacks_counts_in_numq_and_numrel_as_trec_eval_c_counts_it():
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 2, "d4": 1, "d5": 0}, "q3": {"d6": 0}}
    run = {"q1": {"d1": 2.0, "d3": 1.0}}
    names = ["NumQ", "NumRet", "NumRel", "NumRelRet", "nDCG@10"]
    assert evaluate(run, qrels, names) == {"NumQ": 3.0, "NumRet": 2.0, "NumRel": 3.0, "NumRet(rel=1)": 1.0,
                                           "nDCG@10": 1 / 3}
    assert evaluate_per_query(run, qrels, names)["q2"] == {"NumQ": 1.0, "NumRet": 0.0, "NumRel": 2.0,
                                                           "NumRet(rel=1)": 0.0, "nDCG@10": 0.0}
    assert evaluate({}, qrels, ["NumQ", "NumRel"]) == {"NumQ": 3.0, "NumRel": 3.0}


def test_counts_show_as_whole_numbers_in_tables():
    qrels, run = {"q1": {"d1": 1}, "q2": {"d2": 1}}, {"q1": {"d1": 2.0, "d3": 1.0}, "q2": {"d2": 1.0}}
    results = {"run": evaluate(run, qrels, ["NumQ", "NumRelRet", "nDCG@10"])}
    assert format_table(results).splitlines() == ["name  NumQ  NumRet(rel=1)  nDCG@10",
                                                  "run      2              2   1.0000"]
    assert format_markdown_table(results).splitlines()[-1] == "| run | 2 | 2 | 1.0000 |"


@pytest.mark.parametrize("name, reason", [("alpha_nDCG@10", "no installed ir_measures provider computes it"),
                                          ("RBP(p=0.8)", "no installed ir_measures provider computes it"),
                                          ("INST", "invalid param max_rel=(not given)"),
                                          # (a traceback: pytrec_eval's TypeError)
                                          ("AP(rel=0)", "Argument relevance_level should be positive.")])
def test_a_measure_that_cannot_be_computed_is_one_line_before_any_run(name, reason):
    """(and a parameter out of range, for AP(rel=0): a TypeError traceback)"""
    from graphdoc.retrieval.evaluation import check_computable

    measures = parse_measures([name])  # ir_measures names it
    with pytest.raises(GraphDocError, match=rf"^measure '[^']+' cannot be computed here: {re.escape(reason)}; use "
                                            r"ir_measures names such as nDCG@10, "):
        check_computable(measures)
    check_computable(parse_measures(DEFAULT_MEASURES))
    with pytest.raises(GraphDocError, match=r"^ir_measures cannot compute "):  # asked all the same
        evaluate(RUN, QRELS, measures)


needs_perl = pytest.mark.skipif(shutil.which("perl") is None, reason="gdeval.pl (ERR) needs perl")


@needs_perl
def test_err_is_computed_where_perl_is_and_its_tool_prints_nothing(capfd):
    from graphdoc.retrieval.evaluation import check_computable

    measures = parse_measures(["ERR@10", "nDCG(dcg='exp-log2')@10"])
    check_computable(measures)  # the trial's query id was "q", which gdeval.pl refuses
    qrels, run = {"1": {"d1": 1, "d2": 2}, "2": {"d3": 1}}, {"1": {"d1": 2.0, "d2": 1.0}, "2": {"d9": 1.0, "d3": 0.5}}
    # gdeval.pl's grades: (2^g - 1) / 2^4
    err_1 = 1 / 16 + (1 - 1 / 16) * (3 / 16) / 2
    err_2 = (1 / 16) / 2
    assert evaluate(run, qrels, ["ERR@10"]) == pytest.approx({"ERR@10": (err_1 + err_2) / 2}, abs=1e-5)
    assert capfd.readouterr().err == ""


@needs_perl
@pytest.mark.parametrize("named", ["a", "a-1", "\uff12"])  # gdeval.pl reads "a-1" as query 1
def test_err_with_query_ids_that_are_not_numbers_says_so_in_one_line(capfd, named):
    qrels, run = {named: {"d1": 1}, "1": {"d2": 1}}, {named: {"d1": 1.0}, "1": {"d2": 1.0}}
    with pytest.raises(GraphDocError, match=rf"^ir_measures cannot compute ERR@10: gdeval.pl, which computes "
                                            rf"ERR@10, takes numeric query ids only; got '{named}' \(nDCG@10 and "):
        evaluate(run, qrels, ["ERR@10"])
    assert capfd.readouterr().err == ""
    assert evaluate(run, qrels, ["nDCG@10"]) == {"nDCG@10": 1.0}


@needs_perl
def test_err_with_ids_that_are_one_number_to_gdeval_says_so():
    qrels, run = {"1": {"d1": 1}, "01": {"d2": 1}}, {"1": {"d1": 1.0}, "01": {"d2": 1.0}}
    with pytest.raises(GraphDocError, match=r"^ir_measures cannot compute ERR@10: gdeval.pl, which computes ERR@10, "
                                            r"reads query ids as numbers: '1' and '01' are one query to it"):
        evaluate(run, qrels, ["ERR@10"])
    assert evaluate({"001": {"d1": 1.0}, "002": {"d2": 1.0}}, {"001": {"d1": 1}, "002": {"d1": 1}},
                    ["ERR@10"])["ERR@10"] == pytest.approx((1 / 16) / 2, abs=1e-5)


@needs_perl
def test_threads_evaluating_err_at_once_leave_standard_error_as_it_was():
    import os
    import threading

    before = os.fstat(2)
    qrels, run = {"1": {"d1": 1, "d2": 2}}, {"1": {"d1": 2.0, "d2": 1.0}}
    errors = []

    def work():
        try:
            for _ in range(3):
                evaluate(run, qrels, ["nDCG@10", "ERR@10"])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    after = os.fstat(2)
    assert errors == [] and (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)


def test_ties_follow_graphdoc_order():
    # graphdoc ranks tied documents by doc id: "a" (not relevant) first, so RR = 1/2
    assert evaluate({"q": {"a": 1.0, "b": 1.0}}, {"q": {"a": 0, "b": 1}}, ["RR"]) == {"RR": 0.5}


def test_parse_measures():
    assert [str(m) for m in parse_measures("nDCG@10")] == ["nDCG@10"]
    assert [str(m) for m in parse_measures(["AP@100", "Judged@10"])] == ["AP@100", "Judged@10"]
    with pytest.raises(GraphDocError, match=r"^unknown measure 'ndcg10'; use ir_measures names such as nDCG@10, "):
        parse_measures(["nDCG@10", "ndcg10"])
    with pytest.raises(GraphDocError, match=r"^unknown measure 'nDCG@x'"):
        parse_measures(["nDCG@x"])
    with pytest.raises(GraphDocError, match="^cannot evaluate: the qrels hold no queries$"):
        evaluate(RUN, {})


RESULTS = {"bm25": {"nDCG@10": 0.66169, "R@100": 0.87589}, "hybrid-rrf": {"nDCG@10": 0.7}}


def test_format_table():
    assert format_table(RESULTS) == (
        "name        nDCG@10   R@100\n"
        "bm25         0.6617  0.8759\n"
        "hybrid-rrf   0.7000       -"
    )


def test_format_markdown_table():
    assert format_markdown_table(RESULTS, digits=3) == (
        "| name | nDCG@10 | R@100 |\n"
        "|---|---:|---:|\n"
        "| bm25 | 0.662 | 0.876 |\n"
        "| hybrid-rrf | 0.700 | - |"
    )


@pytest.mark.parametrize("name", ["nDCG(rel=2)@10", "P(foo=1)@5"])
def test_a_measure_with_a_parameter_ir_measures_does_not_know_is_one_line(name):
    """ir_measures parsed it, then failed with KeyError wherever it was named (a traceback in eval, search --qrels,
    tune-fusion and a ranking fine-tuning's eval_measure)."""
    key = re.search(r"\((\w+)=", name).group(1)
    with pytest.raises(GraphDocError, match=rf"^measure {re.escape(repr(name))} has no parameter '{key}'; use "
                                            r"ir_measures names such as nDCG@10, "):
        parse_measures([name])
