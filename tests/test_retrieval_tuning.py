import argparse
import json
import shutil
from pathlib import Path

import pytest
from _retrieval_helpers import cli, cli_state_restored, error_line, make_docs, manifest_json, write_jsonl

from graphdoc.cli import build_parser
from graphdoc.errors import GraphDocError
from graphdoc.retrieval.evaluation import evaluate
from graphdoc.retrieval.fusion import HYBRID_DEFAULT, NORMALIZERS, FusionConfig, fuse, fuse_runs
from graphdoc.retrieval.searcher import Searcher
from graphdoc.retrieval.tuning import DEFAULT_ALPHAS, assign_folds, tune_alpha

QIDS = [f"q{i}" for i in range(10)]
QRELS = {q: {"A": 1, "B": 1, "X": 0, "Y": 0} for q in QIDS}
GOOD = {"A": 1.0, "B": 0.99, "X": 0.98, "Y": 0.0}  # perfect ranking
# X outranks B after fusion for every alpha < 0.99 (0.98a + (1 - a) > 0.99a), so only alpha 1 is perfect
BAD = {"X": 1.0, "Y": 0.5, "A": 0.0, "B": 0.0}


def test_perfect_dense_picks_alpha_one():
    dense, sparse = dict.fromkeys(QIDS, GOOD), dict.fromkeys(QIDS, BAD)
    result = tune_alpha(dense, sparse, QRELS, folds=5)
    assert result.alpha == 1.0
    assert [f.alpha for f in result.folds] == [1.0] * 5
    assert [(f.train_score, f.test_score) for f in result.folds] == [(1.0, 1.0)] * 5
    assert result.mean_test_score == 1.0 and result.scores_by_alpha[1.0] == 1.0
    assert max(s for a, s in result.scores_by_alpha.items() if a < 1) < 1.0
    assert list(result.scores_by_alpha) == list(DEFAULT_ALPHAS) == [i / 10 for i in range(11)]
    assert result.run == {q: fuse(GOOD, BAD, FusionConfig(alpha=1.0)) for q in QIDS}
    assert result.to_dict()["folds"][0]["alpha"] == 1.0
    assert not result.alphas_tied and result.to_dict()["alphas_tied"] is False


def test_perfect_sparse_picks_alpha_zero():
    result = tune_alpha(dict.fromkeys(QIDS, BAD), dict.fromkeys(QIDS, GOOD), QRELS, folds=2, measure="RR@100")
    assert result.alpha == 0.0 and [f.alpha for f in result.folds] == [0.0, 0.0]
    assert result.measure == "RR@100" and result.mean_test_score == 1.0


def test_cross_validated_run_matches_mean_test_score():
    # half of the queries favour dense, half sparse: folds disagree, the held-out estimate is honest
    dense = {q: GOOD if i % 2 else BAD for i, q in enumerate(QIDS)}
    sparse = {q: BAD if i % 2 else GOOD for i, q in enumerate(QIDS)}
    result = tune_alpha(dense, sparse, QRELS, folds=3, seed=1)
    assert result.mean_test_score == pytest.approx(evaluate(result.run, QRELS, ["nDCG@10"])["nDCG@10"], abs=1e-12)
    assert sorted(q for f in result.folds for q in f.query_ids) == sorted(QIDS)


def test_fused_rankings_are_cut_to_k_as_search_returns_them():
    dense, sparse = dict.fromkeys(QIDS, GOOD), dict.fromkeys(QIDS, BAD)
    whole = tune_alpha(dense, sparse, QRELS, folds=2, measure="R@100")
    cut = tune_alpha(dense, sparse, QRELS, folds=2, measure="R@100", k=1)
    assert whole.mean_test_score == 1.0 and {len(docs) for docs in whole.run.values()} == {4}
    # one document a query: A (alpha 1) finds one of the two relevant documents
    assert cut.mean_test_score == 0.5 and cut.run == {q: {"A": 1.0} for q in QIDS}
    assert cut.scores_by_alpha[1.0] == 0.5 and cut.scores_by_alpha[0.0] == 0.0


def test_fold_assignment_is_deterministic():
    folds = assign_folds(QIDS, 5, seed=0)
    assert folds == assign_folds(list(reversed(QIDS)), 5, seed=0)
    assert sorted(q for f in folds for q in f) == sorted(QIDS) and [len(f) for f in folds] == [2] * 5
    assert folds != assign_folds(QIDS, 5, seed=1)
    with pytest.raises(GraphDocError, match=r"^cross-validation needs at least 2 judged queries; got 1$"):
        assign_folds(["q1"], 2)
    with pytest.raises(GraphDocError, match=r"^folds must be between 2 and the number of queries \(10\), got 11$"):
        assign_folds(QIDS, 11)


# ------------------------------------------------------------------ ties between alphas
#: RR@10 with A relevant: minmax fuses A = 1 - 0.75a and X = a, so A leads for a < 4/7: alphas 0.0 ... 0.5 all
#: score 1.0, 0.6 ... 1.0 score 0.5 (z-score and no normalisation split the same way)
SPLIT_DENSE, SPLIT_SPARSE = {"X": 1.0, "A": 0.25, "Z": 0.0}, {"A": 1.0, "X": 0.0, "Z": 0.0}
ONE_QRELS = {q: {"A": 1} for q in QIDS[:4]}


def split_runs(qids) -> tuple[dict, dict]:
    return dict.fromkeys(qids, SPLIT_DENSE), dict.fromkeys(qids, SPLIT_SPARSE)


@pytest.mark.parametrize("prefer, alpha", [(None, 0.5), (0.9, 0.5), (0.6, 0.5), (0.2, 0.2), (0.25, 0.2), (0.0, 0.0)])
def test_tied_alphas_go_to_the_one_nearest_prefer(prefer, alpha):
    result = tune_alpha(*split_runs(QIDS[:4]), ONE_QRELS, folds=2, measure="RR@10", prefer=prefer)
    assert result.scores_by_alpha == {a: 1.0 if a <= 0.5 else 0.5 for a in DEFAULT_ALPHAS}
    assert result.alpha == alpha and [f.alpha for f in result.folds] == [alpha, alpha]
    assert result.mean_test_score == 1.0 and not result.alphas_tied


@pytest.mark.parametrize("prefer, alpha", [(None, 0.5), (0.6, 0.6), (0.62, 0.6), (1.0, 1.0)])
def test_when_no_alpha_scores_better_the_tie_break_decides_and_says_so(prefer, alpha):
    # both retrievers rank A first: every alpha is perfect, the measure cannot choose
    runs = dict.fromkeys(QIDS[:4], {"A": 1.0, "X": 0.0})
    result = tune_alpha(runs, runs, ONE_QRELS, folds=2, measure="RR@10", prefer=prefer)
    assert result.alphas_tied and result.to_dict()["alphas_tied"] is True
    assert result.alpha == alpha and [f.alpha for f in result.folds] == [alpha, alpha]
    nothing_relevant = tune_alpha(runs, runs, {q: {"Q": 1} for q in QIDS[:4]}, folds=2, prefer=prefer)
    assert nothing_relevant.alphas_tied and nothing_relevant.alpha == alpha
    assert set(nothing_relevant.scores_by_alpha.values()) == {0.0}


# ------------------------------------------------------------------ graphdoc tune-fusion
@pytest.fixture(scope="module")
def cli_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tune-files")
    (folder / "qrels.tsv").write_text("".join(f"{q}\tA\t1\n" for q in QIDS[:4]), encoding="utf-8")
    return {"corpus": write_jsonl(folder / "corpus.jsonl", make_docs(5)),
            "queries": write_jsonl(folder / "queries.jsonl", [{"_id": q, "text": "graph"} for q in QIDS[:4]]),
            "qrels": folder / "qrels.tsv"}


@pytest.fixture(scope="module")
def built_index(cli_files, model_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tune-index") / "index"
    with cli_state_restored():
        assert cli("index", "--corpus", cli_files["corpus"], "--index-dir", folder, "--model", model_dir) == 0
    return folder


def own_index(built_index: Path, tmp_path: Path, fusion: dict | None = None) -> Path:
    """A copy of the index, with `fusion` as its manifest's setting when given."""
    folder = Path(shutil.copytree(built_index, tmp_path / "index"))
    if fusion is not None:
        manifest = manifest_json(folder)
        (folder / "manifest.json").write_text(json.dumps({**manifest, "fusion": fusion}), encoding="utf-8")
    return folder


@pytest.fixture
def fixed_runs(monkeypatch):
    """``component_runs`` gives `runs` (dense, sparse) for every query: exact figures, no model involved."""
    runs = {}

    def component_runs(self, queries, depth=100, show_progress_bar=False):
        return {q: runs["dense"] for q in queries}, {q: runs["sparse"] for q in queries}

    monkeypatch.setattr(Searcher, "component_runs", component_runs)
    return runs


def tune(capsys, index: Path, files: dict, *extra) -> tuple[list[str], str]:
    capsys.readouterr()
    with cli_state_restored():
        assert cli("tune-fusion", "--index-dir", index, "--queries", files["queries"], "--qrels", files["qrels"],
                   "--folds", 2, "--measure", "RR@10", *extra) == 0
    captured = capsys.readouterr()
    return captured.out.splitlines(), captured.err


def test_tune_fusion_uses_the_index_normalization_and_prefers_its_alpha(built_index, cli_files, fixed_runs,
                                                                        tmp_path, capsys):
    fixed_runs.update(dense=SPLIT_DENSE, sparse=SPLIT_SPARSE)
    index = own_index(built_index, tmp_path)
    assert manifest_json(index)["fusion"] == HYBRID_DEFAULT.to_dict()  # weighted, alpha 0.6, zscore
    out, err = tune(capsys, index, cli_files, "--save")
    # 0.0 ... 0.5 tie: 0.5 is the nearest to the index's 0.6; the normalisation stays the index's zscore
    assert out == ["fold 1: alpha=0.50  train RR@10=1.0000  test RR@10=1.0000",
                   "fold 2: alpha=0.50  train RR@10=1.0000  test RR@10=1.0000",
                   "cross-validated RR@10: 1.0000; alpha on all queries: 0.50",
                   (f"stored fusion weighted alpha=0.50 normalization=zscore in {index}/manifest.json "
                    "(was weighted alpha=0.60 normalization=zscore)")]
    assert err == ""
    assert manifest_json(index)["fusion"] == {"method": "weighted", "alpha": 0.5, "normalization": "zscore",
                                              "rrf_k": 60}
    out, _ = tune(capsys, index, cli_files, "--save")
    assert out[-1] == f"{index}/manifest.json already holds fusion weighted alpha=0.50 normalization=zscore; unchanged"


@pytest.mark.parametrize("normalization", ["minmax", "none"])
def test_tune_fusion_normalization_overrides_the_index(built_index, cli_files, fixed_runs, tmp_path, capsys,
                                                       normalization):
    fixed_runs.update(dense=SPLIT_DENSE, sparse=SPLIT_SPARSE)
    index = own_index(built_index, tmp_path)
    out, _ = tune(capsys, index, cli_files, "--save", "--normalization", normalization)
    assert out[-1] == (f"stored fusion weighted alpha=0.50 normalization={normalization} in {index}/manifest.json "
                       "(was weighted alpha=0.60 normalization=zscore)")
    assert manifest_json(index)["fusion"]["normalization"] == normalization


def test_tune_fusion_save_says_it_replaces_rrf(built_index, cli_files, fixed_runs, tmp_path, capsys):
    fixed_runs.update(dense=SPLIT_DENSE, sparse=SPLIT_SPARSE)
    index = own_index(built_index, tmp_path, {"method": "rrf", "alpha": 0.2, "normalization": "minmax", "rrf_k": 30})
    out, _ = tune(capsys, index, cli_files, "--save")
    assert out[-2:] == ["cross-validated RR@10: 1.0000; alpha on all queries: 0.20",
                        (f"stored fusion weighted alpha=0.20 normalization=minmax in {index}/manifest.json "
                         "(was rrf k=30)")]
    assert manifest_json(index)["fusion"] == {"method": "weighted", "alpha": 0.2, "normalization": "minmax",
                                              "rrf_k": 30}


def test_tune_fusion_without_signal_warns_and_does_not_save(built_index, cli_files, fixed_runs, tmp_path, capsys):
    fixed_runs.update(dense={"A": 1.0, "X": 0.0}, sparse={"A": 1.0, "X": 0.0})  # every alpha ranks A first
    index = own_index(built_index, tmp_path)
    before = (index / "manifest.json").read_bytes()
    out, err = tune(capsys, index, cli_files, "--save")
    assert out[-2:] == ["cross-validated RR@10: 1.0000; alpha on all queries: 0.60",
                        (f"not stored: {index}/manifest.json keeps fusion weighted alpha=0.60 normalization=zscore, "
                         "as no alpha scored better than another")]
    assert err == ("WARNING graphdoc.cli: every alpha scores RR@10=1.0000 on the 4 queries: the measure does not "
                   "tell the alphas apart, so alpha 0.60 is only the tie-break (the tried alpha nearest the "
                   "index's 0.60)\n")
    assert (index / "manifest.json").read_bytes() == before


def test_tune_fusion_cuts_the_run_at_depth_and_warns_of_a_deeper_measure(built_index, cli_files, fixed_runs,
                                                                         tmp_path, capsys):
    fixed_runs.update(dense=GOOD, sparse=BAD)
    out, err = tune(capsys, own_index(built_index, tmp_path), cli_files, "--measure", "R@100", "--depth", "2",
                    "--output", tmp_path / "cv.trec")
    assert err == ("WARNING graphdoc.cli: R@100 has a cutoff over --depth 2: computed over the 2 documents a fused "
                   "ranking keeps\n")
    assert out[-1] == "cross-validated R@100: 1.0000; alpha on all queries: 0.60"
    lines = (tmp_path / "cv.trec").read_text(encoding="utf-8").splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(QIDS[:4] * 2)  # two documents a query, of 4


def test_tune_fusion_fuses_the_candidates_search_k_depth_fuses(built_index, cli_files, tmp_path, capsys,
                                                                 monkeypatch):
    depths, real = [], Searcher.component_runs

    def spy(self, queries, depth=100, show_progress_bar=False):
        depths.append(depth)
        return real(self, queries, depth, show_progress_bar)

    monkeypatch.setattr(Searcher, "component_runs", spy)
    tune(capsys, own_index(built_index, tmp_path), cli_files, "--depth", "2")
    assert depths == [100]  # as search -k 2 reads them: each retriever's top 100, not 2
    queries = {q: "graph" for q in QIDS[:4]}
    with Searcher(built_index) as searcher:
        dense_run, sparse_run = real(searcher, queries, 100)
        for alpha in (0.2, 0.6, 0.9):
            fused = fuse_runs(dense_run, sparse_run, FusionConfig(alpha=alpha, normalization="zscore"), k=2)
            searched = searcher.batch_search(queries, k=2, fusion={"alpha": alpha})
            assert {q: list(d) for q, d in fused.items()} == {q: list(d) for q, d in searched.items()}
            for q in queries:
                assert list(fused[q].values()) == pytest.approx(list(searched[q].values()), abs=1e-6)


@pytest.mark.skipif(shutil.which("perl") is None, reason="gdeval.pl (ERR) needs perl")
@pytest.mark.parametrize("command", ["tune-fusion", "search"])
def test_err_with_named_query_ids_is_refused_before_searching(built_index, cli_files, tmp_path, capsys, monkeypatch,
                                                              command):
    def never(*args, **kwargs):
        raise AssertionError("searched")

    monkeypatch.setattr(Searcher, "component_runs", never)
    monkeypatch.setattr(Searcher, "batch_search", never)
    flag = "--measure" if command == "tune-fusion" else "--measures"
    output = tmp_path / "run.trec"
    with cli_state_restored():
        assert cli(command, "--index-dir", built_index, "--queries", cli_files["queries"], "--qrels",
                   cli_files["qrels"], flag, "ERR@10", "--output", output) == 1
    assert error_line(capsys, command) == (f"graphdoc {command}: error: ir_measures cannot compute ERR@10: gdeval.pl, "
                                           "which computes ERR@10, takes numeric query ids only; got 'q0' (nDCG@10 "
                                           "and the other trec_eval measures take any id)")
    assert not output.exists()


def test_tune_fusion_help_gives_defaults_and_the_normalizations_of_search():
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    options = {a.dest: a for a in commands["tune-fusion"]._actions}
    for dest in ("folds", "measure", "normalization", "depth", "model", "device"):
        assert "(default" in options[dest].help, dest
    search_normalization = next(a for a in commands["search"]._actions if a.dest == "normalization")
    assert options["normalization"].choices == search_normalization.choices == tuple(NORMALIZERS)
    assert options["normalization"].default is None


def test_tune_fusion_save_does_not_overwrite_what_another_writer_did(built_index, cli_files, monkeypatch, tmp_path,
                                                                     capsys):
    import contextlib

    from graphdoc.fileio import writer_lock

    index = own_index(built_index, tmp_path)
    held = contextlib.ExitStack()
    events = []

    def component_runs(self, queries, depth=100, show_progress_bar=False):  # meanwhile, another process...
        events[0]()
        return {q: SPLIT_DENSE for q in queries}, {q: SPLIT_SPARSE for q in queries}

    monkeypatch.setattr(Searcher, "component_runs", component_runs)
    args = ("tune-fusion", "--index-dir", index, "--queries", cli_files["queries"], "--qrels", cli_files["qrels"],
            "--folds", 2, "--measure", "RR@10", "--save")
    events.append(lambda: held.enter_context(writer_lock(index)))  # ...is writing the folder (graphdoc index)
    before = (index / "manifest.json").read_bytes()
    with held, cli_state_restored():
        assert cli(*args) == 1
    assert error_line(capsys, "tune-fusion") == \
        f"graphdoc tune-fusion: error: another graphdoc process is writing {index}"
    assert (index / "manifest.json").read_bytes() == before

    def add_documents():  # ...added documents (a new shard) and finished
        manifest = manifest_json(index)
        (index / "manifest.json").write_text(json.dumps({**manifest, "shards": [*manifest["shards"], "00001"]}),
                                             encoding="utf-8")
    events[0] = add_documents
    with cli_state_restored():
        assert cli(*args) == 1
    assert error_line(capsys, "tune-fusion") == (
        f"graphdoc tune-fusion: error: {index} changed while the fusion was tuned (documents were added or "
        "deleted): not stored; rerun graphdoc tune-fusion on the index as it is now")
    assert manifest_json(index)["fusion"] == HYBRID_DEFAULT.to_dict() and "00001" in manifest_json(index)["shards"]
